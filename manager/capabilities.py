"""Backend capabilities and pools: what each backend's driver last reported
from ``get_share_stats()``, refreshed into ``backend_stats`` by the engines
that serve it and read by the planners (``plans.py``) to refuse what the
backend cannot do and to put a new share instance in a pool.

A backend with no report, or a report without a capability or without
pools, is served as if it could do everything: only what a driver says it
cannot do is refused.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oslo_log import log as logging
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db import capacity as db_capacity
from sharemgr.db.engine import Database
from sharemgr.manager import hosts
from sharemgr.manager.outage import is_outage

if TYPE_CHECKING:
    from sharemgr.drivers.base import ShareDriver

LOG = logging.getLogger(__name__)

# Capabilities a planner checks: the report's key → what users asked for.
SNAPSHOT = "snapshot_support"
FROM_SNAPSHOT = "create_share_from_snapshot_support"
REPLICATION = "replication_type"
GROUPS = "share_group_support"


def refresh(db: Database, host: str, driver: ShareDriver, engine_id: str) -> bool:
    """Store ``driver.get_share_stats(refresh=True)`` as ``host``'s report.

    A failure (the driver raises, returns something that is not a dict or
    not JSON) is logged with its traceback and leaves the previous report.
    """
    try:
        stats: object = driver.get_share_stats(refresh=True)
        if not isinstance(stats, dict):
            raise TypeError(f"get_share_stats returned {type(stats).__name__}, not a dict")
        db_capabilities.save(db, host, with_options(stats, getattr(driver, "configuration", None)),
                             engine_id)
    except Exception as exc:  # one backend's trouble must not stop the others
        if is_outage(exc):
            raise  # the database is away: the caller backs off
        LOG.exception("%s: get_share_stats failed; its previous report stays", host)
        return False
    return True


def _gib(value: object) -> float | None:
    """A capacity in GiB; None for Manila's 'infinite' and 'unknown'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


# Manila's default for a thin pool that names no ratio.
DEFAULT_OVER_SUBSCRIPTION = 20.0


@dataclass(frozen=True)
class Pool:
    name: str
    total_gb: float | None
    free_gb: float | None  # None: no limit known ('infinite', 'unknown')
    reserved_percentage: float = 0.0
    thin: bool = False
    ratio: float = 1.0  # max_over_subscription_ratio, for a thin pool

    def limits(self, backend_host: str, reported_at: datetime.datetime | None
               ) -> db_capacity.Limits:
        """What the pool may take (Manila's capacity rules): its total less
        the reserve bounds what is allocated in it, times the ratio when thin;
        the free space reported, less the reserve (times the ratio when
        thin), bounds what is placed after the report."""
        scale = self.ratio if self.thin else 1.0
        reserve = (self.total_gb or 0.0) * self.reserved_percentage / 100.0
        cap = None if self.total_gb is None else (self.total_gb - reserve) * scale
        free = None if self.free_gb is None else (self.free_gb - reserve) * scale
        return db_capacity.Limits(f"{backend_host}#{self.name}", cap, free, reported_at)


def _pool(p: Mapping[str, object]) -> Pool:
    ratio = _gib(p.get("max_over_subscription_ratio"))
    reserved = _gib(p.get("reserved_percentage"))
    return Pool(str(p["pool_name"]), _gib(p.get("total_capacity_gb")),
                _gib(p.get("free_capacity_gb")), reserved or 0.0,
                p.get("thin_provisioning") is True,
                ratio if ratio is not None and ratio >= 1.0 else DEFAULT_OVER_SUBSCRIPTION)


def with_options(stats: dict[str, object], configuration: object) -> dict[str, object]:
    """The report with the backend group's ``reserved_percentage`` and
    ``max_over_subscription_ratio`` in each pool, where set (they win over
    what the driver reported, as Manila's drivers report what is configured)."""
    overrides: dict[str, object] = {}
    for key in ("reserved_percentage", "max_over_subscription_ratio"):
        value = getattr(configuration, key, None)
        if value is not None:
            overrides[key] = value
    pools = stats.get("pools")
    if not overrides or not isinstance(pools, list):
        return stats
    return {**stats, "pools": [{**p, **overrides} if isinstance(p, dict) else p
                               for p in pools]}


@dataclass(frozen=True)
class PoolRoom:
    limits: db_capacity.Limits
    usage: db_capacity.Usage
    room: float | None  # GiB a placement can still take; None: no bound


class Report:
    """One backend's last report."""

    def __init__(self, host: str, stats: dict[str, Any],
                 reported_at: datetime.datetime | None = None) -> None:
        self.host = host
        self.stats = stats
        self.reported_at = reported_at  # when it was saved (placements since count)
        self.pools = [_pool(p) for p in stats.get("pools") or []
                      if isinstance(p, dict) and p.get("pool_name")]

    @property
    def backend(self) -> str:
        return hosts.backend_of(self.host)

    def supports(self, key: str) -> bool:
        """False only when the report says so (False, None, ''); a key it
        leaves out is supported, as before reports existed."""
        return key not in self.stats or bool(self.stats[key])

    def protocols(self) -> list[str]:
        """The protocols the report names (Manila's ``NFS_CIFS`` form); []
        when it names none."""
        offered = self.stats.get("storage_protocol")
        return [p for p in offered.upper().split("_") if p] \
            if isinstance(offered, str) else []

    def serves(self, proto: str) -> bool:
        """False only when the report names its protocols without this one."""
        offered = self.protocols()
        return not offered or proto.upper() in offered

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)

    def rooms(self, db: Database) -> dict[str, PoolRoom]:
        """Each pool's limits, what is placed in it now and the room left,
        by pool name (one grouped read of the instances)."""
        limits = {p.name: p.limits(self.host, self.reported_at) for p in self.pools}
        used = db_capacity.usage(db, [lim.pool_host for lim in limits.values()],
                                 self.reported_at)
        return {name: PoolRoom(lim, used[lim.pool_host],
                               db_capacity.room(lim, used[lim.pool_host]))
                for name, lim in limits.items()}


def report(db: Database, host: str) -> Report | None:
    """The report of ``host``'s backend (one read by primary key), or None
    when it reported nothing."""
    row = db_capabilities.get(db, hosts.host_of(host))
    if row is None or not row.stats:
        return None
    return Report(row.host, dict(row.stats), row.updated_at)


def pool_of(host: str) -> str | None:
    """'host@backend#pool' → 'pool'; None without a pool part."""
    return host.split("#", 1)[1] if "#" in host else None


@dataclass(frozen=True)
class PoolState:
    """A pool as ``sharectl pool list`` and /metrics show it: the report's
    figures, what is allocated in it now and what a placement can still
    take (``room_gb``; None: no bound)."""

    host: str  # 'host@backend#pool'
    backend: str
    total_gb: float | str | None  # as reported: a number, 'infinite' or 'unknown'
    free_gb: float | str | None
    allocated_gb: float
    room_gb: float | None
    reported_at: datetime.datetime | None


def pool_states(db: Database) -> list[PoolState]:
    """Every reported pool (one read of the reports, one grouped read of
    the instances per backend with pools)."""
    found = []
    for row in db_capabilities.all_stats(db):
        report = Report(row.host, dict(row.stats or {}), row.updated_at)
        if not report.pools:
            continue
        raw = {str(p["pool_name"]): p for p in report.stats.get("pools") or []
               if isinstance(p, dict) and p.get("pool_name")}
        for name, pool in report.rooms(db).items():
            found.append(PoolState(pool.limits.pool_host, report.backend,
                                   raw[name].get("total_capacity_gb"),
                                   raw[name].get("free_capacity_gb"),
                                   pool.usage.allocated_gb, pool.room, row.updated_at))
    return found
