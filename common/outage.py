"""Back-off and one-line logging for outages of the database or the
coordination backend (what counts as one: manager/outage.py).

Each loop or periodic task has its own ``Backoff``: capped exponential waits
(doubling from its usual pace) instead of retrying at its usual pace. All of
them report to one ``OutageLog`` per process, so the log shows an outage
once, however many tasks meet it: one WARNING with the error's first line
when it starts, one INFO when a task that failed succeeds again.
"""

from __future__ import annotations

import sys
import threading
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


def first_line(exc: BaseException) -> str:
    """'<type>: <first line>' of an exception (a DBAPI error's own cause)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class OutageLog:
    """Whether an outage is going on in this process, and its two lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ongoing = False
        self._since = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            if self.ongoing:
                return
            self.ongoing, self._since = True, time.monotonic()
        if sys.exc_info()[1] is exc:
            # Called while handling it: oslo.log's formatter appends the
            # exception's first line to a WARNING by itself.
            LOG.warning("database or coordination unavailable (%s), retrying with "
                        "back-off", what)
        else:
            LOG.warning("database or coordination unavailable (%s), retrying with "
                        "back-off: %s", what, first_line(exc))

    def recovered(self, what: str) -> None:
        with self._lock:
            if not self.ongoing:
                return
            self.ongoing = False
            lasted = time.monotonic() - self._since
        LOG.info("database and coordination reachable again (%s) after %.1fs", what, lasted)


OUTAGES = OutageLog()  # the process's one


class Backoff:
    """The back-off of one loop or task (``what`` names it in the log)."""

    def __init__(self, what: str, initial: float, maximum: float,
                 log: OutageLog = OUTAGES) -> None:
        self.what = what
        self.log = log
        self.initial = initial
        self.maximum = max(initial, maximum)
        self.failures = 0
        self.retry_at = 0.0  # time.monotonic() before which a periodic task skips

    def failed(self, exc: BaseException) -> float:
        """Count a failed try (the process's WARNING if the outage is new);
        returns the seconds to wait before the next try."""
        self.failures += 1
        self.log.failed(self.what, exc)
        # Doubling from ``initial`` up to ``maximum`` (capped before the
        # power grows past what a float holds in a long outage).
        delay = min(self.maximum, self.initial * 2.0 ** min(self.failures - 1, 60))
        self.retry_at = time.monotonic() + delay
        return delay

    def recovered(self) -> None:
        """A try succeeded: the INFO if this task had met the outage."""
        if self.failures:
            self.failures, self.retry_at = 0, 0.0
            self.log.recovered(self.what)
