"""systemd ``Type=notify``: READY=1 once up, STOPPING=1 when stopping,
WATCHDOG=1 every half ``WatchdogSec`` (the sdnotify package speaks the
NOTIFY_SOCKET protocol; without the variable nothing is sent)."""

from __future__ import annotations

import os

import sdnotify
from oslo_log import log as logging

LOG = logging.getLogger(__name__)


class Notifier:
    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._sd = sdnotify.SystemdNotifier() if self.enabled else None
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process systemd watches (sd_watchdog_enabled).
        mine = not pid or pid == str(os.getpid())
        # Ping at half the timeout, as sd_watchdog_enabled(3) advises.
        self.watchdog_interval = (int(usec) / 2e6 if self.enabled and usec.isdigit()
                                  and int(usec) > 0 and mine else 0.0)

    def _send(self, state: str) -> None:
        if self._sd is not None:
            self._sd.notify(state)

    def ready(self) -> None:
        self._send("READY=1\nSTATUS=share-manager up")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=share-manager stopping")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")
