"""Backend capabilities and pools: what each backend's driver last reported
from ``get_share_stats()``, refreshed into ``backend_stats`` by the engines
that serve it and read by the planners (``plans.py``) to refuse what the
backend cannot do and to put a new share instance in a pool.

A backend with no report, or a report without a capability or without
pools, is served as if it could do everything: only what a driver says it
cannot do is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oslo_log import log as logging
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db.engine import Database
from sharemgr.manager import views
from sharemgr.manager.outage import is_outage

LOG = logging.getLogger(__name__)

# Capabilities a planner checks: the report's key → what users asked for.
SNAPSHOT = "snapshot_support"
FROM_SNAPSHOT = "create_share_from_snapshot_support"
REPLICATION = "replication_type"
GROUPS = "share_group_support"


def refresh(db: Database, host: str, driver: Any, engine_id: str) -> bool:
    """Store ``driver.get_share_stats(refresh=True)`` as ``host``'s report.

    A failure (the driver raises, returns something that is not a dict or
    not JSON) is logged with its traceback and leaves the previous report.
    """
    try:
        stats = driver.get_share_stats(refresh=True)
        if not isinstance(stats, dict):
            raise TypeError(f"get_share_stats returned {type(stats).__name__}, not a dict")
        db_capabilities.save(db, host, stats, engine_id)
    except Exception as exc:  # one backend's trouble must not stop the others
        if is_outage(exc):
            raise  # the database is away: the caller backs off
        LOG.exception("%s: get_share_stats failed; its previous report stays", host)
        return False
    return True


def _gib(value: Any) -> float | None:
    """A capacity in GiB; None for Manila's 'infinite' and 'unknown'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class Pool:
    name: str
    total_gb: float | None
    free_gb: float | None  # None: no limit known ('infinite', 'unknown')

    def fits(self, size: float) -> bool:
        return self.free_gb is None or size <= self.free_gb


class Report:
    """One backend's last report."""

    def __init__(self, host: str, stats: dict[str, Any]) -> None:
        self.host = host
        self.stats = stats
        self.pools = [
            Pool(str(p["pool_name"]), _gib(p.get("total_capacity_gb")),
                 _gib(p.get("free_capacity_gb")))
            for p in stats.get("pools") or [] if isinstance(p, dict) and p.get("pool_name")
        ]

    @property
    def backend(self) -> str:
        return views.backend_of(self.host)

    def supports(self, key: str) -> bool:
        """False only when the report says so (False, None, ''); a key it
        leaves out is supported, as before reports existed."""
        return key not in self.stats or bool(self.stats[key])

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)

    def best_pool(self, size: float) -> Pool | None:
        """The pool with the most free space that holds ``size`` (no limit
        counts as the most; ties go to the first name), or None."""
        fits = sorted((p for p in self.pools if p.fits(size)), key=lambda p: p.name)
        return max(fits, key=lambda p: (p.free_gb is None, p.free_gb or 0.0), default=None)

    def largest_free(self) -> Pool | None:
        return self.best_pool(0)


def report(db: Database, host: str) -> Report | None:
    """The report of ``host``'s backend (one read by primary key), or None
    when it reported nothing."""
    row = db_capabilities.get(db, views.host_of(host))
    if row is None or not row.stats:
        return None
    return Report(row.host, dict(row.stats))


def pool_of(host: str) -> str | None:
    """'host@backend#pool' → 'pool'; None without a pool part."""
    return host.split("#", 1)[1] if "#" in host else None
