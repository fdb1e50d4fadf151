"""Operation leases: how long a driver call may run before it counts as stuck.

A running operation's request row holds a lease (``lease_expires_at``), set
when its driver call starts: ``operation_lease_seconds``, or the method's own
value from ``operation_lease_seconds_by_method``. While the lease is fresh the
operation is slow and left alone however long it takes; once it has expired
while its engine is still alive (a hung driver call, a lost thread) it is
stuck, and the reconciliation pass settles it by the rules of
``reconcile/rules.py`` (doc/reconciliation.rst, "Leases").

The manager cannot tell a slow call that makes progress from a hung one (a
driver call gives no progress signal; the thread of a hung call is as alive
as the thread of a slow one), so a lease is a deadline per driver method,
not a heartbeat the engine renews: renewing it from a thread of the engine
would keep a hung call's lease fresh for ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Leases:
    """Lease seconds per driver method; ``None`` means no lease (never stuck)."""

    def __init__(self, default: float, by_method: Mapping[str, float] | None = None) -> None:
        self.default = default
        self.by_method = dict(by_method or {})

    def seconds(self, method: str | None) -> float | None:
        value = self.by_method.get(method or "", self.default)
        return value if value > 0 else None

    @classmethod
    def from_conf(cls, conf: Any) -> Leases:
        return cls(conf.operation_lease_seconds, conf.operation_lease_seconds_by_method or {})


# No leases at all: what Operations uses until the daemon configures them.
NONE = Leases(0)
