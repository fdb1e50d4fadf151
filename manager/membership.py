"""This engine's membership of the engines group, and its healing.

tooz lets a membership expire when an engine misses its heartbeats (a VM
paused, a long stall, a partition from the coordination backend), and does
not join it again by itself (ARCHITECTURE §10). An engine out of the group
is dead to its peers: they abandon its running requests and settle its
resources. So while it is out, this engine claims nothing and starts no
driver call (its locks are treated as lost: any of them may have expired
and been taken); it joins again as soon as the backend answers, and then
claims again. Outcomes of calls that were already running are fenced by
the database (doc/reconciliation.rst, "Fencing").
"""

from __future__ import annotations

import threading
import time

from oslo_log import log as logging
from sharemgr.common import metrics
from sharemgr.manager.coordination import Coordinator

LOG = logging.getLogger(__name__)


class Membership:
    """Checked every second by the daemon (``check``); ``not_member`` says
    why this engine may not claim or call a driver now (None: it may)."""

    def __init__(self, coordinator: Coordinator, engine_id: str, stale_after: float) -> None:
        self.coordinator = coordinator
        self.engine_id = engine_id
        # A check that hangs (packets dropped: the client waits for its
        # socket timeout) must not leave the engine claiming meanwhile: the
        # membership is only as good as its last answer, for this long.
        self.stale_after = stale_after
        self._lock = threading.Lock()
        self._why: str | None = None
        self._since = 0.0
        # None until the checks begin (``begin``): a start that takes long
        # before them (a backend's set-up) is not a silent coordination
        # backend.
        self._answered: float | None = None
        self.rejoins = 0

    def begin(self) -> None:
        """The checks start now: from here a backend silent for
        ``stale_after`` seconds takes the engine out."""
        self._answered = time.monotonic()

    def not_member(self) -> str | None:
        answered = self._answered
        if self._why is None and answered is not None \
                and time.monotonic() - answered > self.stale_after:
            self._out(f"the coordination backend has not answered for "
                      f"{self.stale_after:.0f}s")
        return self._why

    def state(self) -> tuple[bool, str]:
        """(ok, detail) for the health endpoint and the service record."""
        why = self.not_member()
        if why is None:
            return True, f"member of the engines group (out and back {self.rejoins} times)" \
                if self.rejoins else "member of the engines group"
        return False, f"{why} (for {time.monotonic() - self._since:.0f}s); rejoining"

    def _out(self, why: str) -> None:
        with self._lock:
            if self._why is None:
                self._since = time.monotonic()
                LOG.warning("this engine (%s) is out of the engines group: %s; it claims "
                            "nothing and calls no driver until it has rejoined",
                            self.engine_id, why)
            self._why = why
        metrics.ENGINE_MEMBER.set(0)

    def check(self) -> None:
        """Look at the group; rejoin when this engine is not in it."""
        try:
            # tooz's own heart thread keeps the membership fresh; the member
            # list says whether it still counts.
            members = self.coordinator.engines()
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            self._out(f"coordination backend unreachable ({type(exc).__name__}"
                      f"{': ' + lines[0] if lines else ''})")
            return
        self._answered = time.monotonic()
        if self.engine_id not in members:
            self._out("its membership expired (heartbeats missed: paused or cut off)")
            try:
                self.coordinator.rejoin_engines()
                members = self.coordinator.engines()
            except Exception as exc:
                LOG.warning("rejoining the engines group failed: %s", exc)
                return
            if self.engine_id not in members:
                return
        with self._lock:
            if self._why is not None:
                LOG.warning("this engine (%s) is a member of the engines group again after "
                            "%.1fs (%s); it claims requests again", self.engine_id,
                            time.monotonic() - self._since, self._why)
                self.rejoins += 1
                self._why = None
        metrics.ENGINE_MEMBER.set(1)
