"""Operation leases: how long a driver call may run before it counts as stuck.

A running operation's request row holds a lease (``lease_expires_at``), set
when its driver call starts (a stack's: with the request row its begin
writes a moment before, ``Operations.default_lease``):
``operation_lease_seconds``, or the method's own value from
``operation_lease_seconds_by_method``. While the lease is fresh the
operation is slow and left alone however long it takes; once it has expired
while its engine is still alive (a hung driver call, a lost thread) it is
stuck, and the reconciliation pass settles it by the rules of
``reconcile/rules.py`` (doc/reconciliation.rst, "Leases").

The manager cannot tell a slow call that makes progress from a hung one (a
driver call gives no progress signal; the thread of a hung call is as alive
as the thread of a slow one), so the lease of a call ends at its deadline
per driver method, however often it is renewed. Within the deadline the
engine renews it (``Keeper``) only ``operation_heartbeat_seconds`` ahead,
for as long as the call runs in one of its threads: a request whose engine
no longer runs its call (a lost thread) stops being renewed and is stuck
after the heartbeat, not after the deadline.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from oslo_config import cfg
from sharemgr.db import leases as db_leases
from sharemgr.db.engine import Database


@dataclass(frozen=True)
class Terms:
    """A call's lease, in seconds from when the database writes it (its
    clock is the one every engine judges leases by: db/clock.py). This
    engine's own checks count them on its monotonic clock from ``started``,
    taken before the write: they end a little early, never late, whatever
    its wall clock says."""

    until: float  # the lease as first set
    deadline: float  # never renewed past this
    heartbeat: float  # renewed this far ahead (0: not renewed)
    started: float  # time.monotonic() as the terms were made

    def left(self) -> float:
        """Seconds of the lease as first set still left, by this engine's count."""
        return self.started + self.until - time.monotonic()


def shaped(seconds: float | None, heartbeat: float, started: float) -> Terms | None:
    """A call's lease starting ``started``: ``seconds`` to its deadline
    (None: no lease), renewed ``heartbeat`` ahead when that is shorter."""
    if seconds is None:
        return None
    renewed = 0 < heartbeat < seconds
    return Terms(heartbeat if renewed else seconds, seconds, heartbeat if renewed else 0, started)


class Leases:
    """Lease seconds per driver method; ``None`` means no lease (never stuck).
    Each method's terms are shaped once, from the options (``shapes``,
    ``default_shape``: unstarted, None for no lease): a call stamps its
    start on them (``dataclasses.replace``) with nothing left to work out."""

    def __init__(self, default: float, by_method: Mapping[str, float] | None = None,
                 heartbeat: float = 0) -> None:
        self.default = default
        self.by_method = dict(by_method or {})
        self.heartbeat = heartbeat  # 0: no renewal, the lease is the deadline
        self.default_shape = shaped(self.seconds(None), heartbeat, 0.0)
        self.shapes = {method: shaped(self.seconds(method), heartbeat, 0.0)
                       for method in self.by_method}

    def seconds(self, method: str | None) -> float | None:
        value = self.by_method.get(method or "", self.default)
        return value if value > 0 else None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Leases:
        return cls(conf.operation_lease_seconds, conf.operation_lease_seconds_by_method or {},
                   conf.operation_heartbeat_seconds)


# No leases at all: what Operations uses until the daemon configures them.
NONE = Leases(0)


class Keeper:
    """The leases of this engine's driver calls in progress: set as a call
    starts, renewed by ``renew`` (a daemon periodic) while it runs, never
    past the call's deadline."""

    def __init__(self, db: Database, engine_id: str) -> None:
        self.db = db
        self.engine_id = engine_id
        self._lock = threading.Lock()
        # resource id → (the call's deadline on time.monotonic(), heartbeat seconds)
        self._calls: dict[str, tuple[float, float]] = {}

    @staticmethod
    def terms(seconds: float | None, heartbeat: float) -> Terms | None:
        """A call's lease starting now (see ``shaped``)."""
        return shaped(seconds, heartbeat, time.monotonic())

    @contextlib.contextmanager
    def lease(self, ident: str, seconds: float | None, heartbeat: float) -> Iterator[None]:
        """Hold the lease of this engine's running request about ``ident``
        while the block (the driver call) runs; ``seconds``: its deadline
        (None: no lease)."""
        terms = self.terms(seconds, heartbeat)
        leased = terms is not None and bool(
            db_leases.lease_set(self.db, [ident], self.engine_id, terms.until, terms.deadline))
        with self.holding(ident, terms, leased):
            yield

    @contextlib.contextmanager
    def holding(self, ident: str, terms: Terms | None, leased: bool) -> Iterator[None]:
        """Renew a lease already set (``leased``: the engine's request about
        ``ident`` took ``terms``) while the block runs. A call with no
        request of its own (the reconciler's retries) has nothing to renew."""
        renewed = leased and terms is not None and terms.heartbeat > 0
        if renewed and terms is not None:
            with self._lock:
                self._calls[ident] = (terms.started + terms.deadline, terms.heartbeat)
        try:
            yield
        finally:
            if renewed:
                with self._lock:
                    self._calls.pop(ident, None)

    def running(self, ident: str) -> bool:
        """Whether a call about ``ident`` runs in this engine within its deadline."""
        with self._lock:
            call = self._calls.get(ident)
        return call is not None and call[0] > time.monotonic()

    def renew(self) -> None:
        """Move the leases of the calls still running one heartbeat ahead
        (one UPDATE per heartbeat; the database stops each at its call's
        deadline). A call whose deadline is less than a heartbeat away has
        its lease set to the deadline, once, and is not renewed again."""
        now = time.monotonic()
        with self._lock:
            calls = dict(self._calls)
        ahead: dict[float, list[str]] = collections.defaultdict(list)
        for ident, (deadline, heartbeat) in calls.items():
            ahead[heartbeat].append(ident)
            if now + heartbeat >= deadline:
                with self._lock:
                    if self._calls.get(ident) == (deadline, heartbeat):
                        del self._calls[ident]
        for heartbeat, idents in ahead.items():
            db_leases.lease_set(self.db, idents, self.engine_id, heartbeat)
