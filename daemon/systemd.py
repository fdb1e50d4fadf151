"""systemd ``Type=notify``: READY=1 once up, STOPPING=1 when stopping,
WATCHDOG=1 every half ``WatchdogSec``. The protocol is one datagram to the
Unix socket ``NOTIFY_SOCKET`` names (sd_notify(3); a name starting with
'@' is in the abstract namespace), a few lines here rather than a
dependency; without the variable nothing is sent."""

from __future__ import annotations

import os
import socket

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


def _address(value: str) -> str:
    return "\0" + value[1:] if value.startswith("@") else value


class Notifier:
    def __init__(self) -> None:
        socket_name = os.environ.get("NOTIFY_SOCKET", "")
        self.enabled = bool(socket_name)
        self._address = _address(socket_name) if socket_name else None
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process systemd watches (sd_watchdog_enabled).
        mine = not pid or pid == str(os.getpid())
        # Ping at half the timeout, as sd_watchdog_enabled(3) advises.
        self.watchdog_interval = (int(usec) / 2e6 if self.enabled and usec.isdigit()
                                  and int(usec) > 0 and mine else 0.0)

    def _send(self, state: str) -> None:
        if self._address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self._address)
                sock.sendall(state.encode())
        except OSError as exc:  # systemd gone or the socket wrong: the daemon goes on
            LOG.warning("systemd notification %r not sent: %s", state.split("\n")[0], exc)

    def ready(self) -> None:
        self._send("READY=1\nSTATUS=share-manager up")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=share-manager stopping")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")
