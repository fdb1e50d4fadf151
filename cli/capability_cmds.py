"""sharectl backend list, pool list: what each backend last reported from
its driver's get_share_stats() (refreshed every backend_stats_interval)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli import base

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.db import models


def _reports(app: SharectlApp) -> list[models.BackendStats]:
    from sharemgr.db import capabilities as db_capabilities

    return db_capabilities.all_stats(app.context.db)


def _backend(host: str) -> str:
    return host.split("@", 1)[1] if "@" in host else host


class BackendList(base.Lister):
    """List backends with their capabilities, as their drivers last reported."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        columns = ("host", "backend", "share_backend_name", "vendor_name",
                   "driver_handles_share_servers", "snapshot_support",
                   "create_share_from_snapshot_support", "replication_type",
                   "share_group_support", "pools", "updated_at")
        data = []
        for row in _reports(self.app):
            stats = row.stats or {}
            data.append((row.host.split("@", 1)[0], _backend(row.host),
                         *(stats.get(c) for c in columns[2:9]),
                         _count(stats.get("pools")), base.fmt(row.updated_at)))
        return columns, data


class PoolList(base.Lister):
    """List pools ('host@backend#pool') with their capacity in GiB: total and
    free as their backends last reported, allocated to the shares and
    replicas placed in them now, and the room a new placement can still
    take there (the reserve, over-subscription and placements since the
    report counted; empty: no bound)."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.manager import capabilities

        columns = ("name", "backend", "total_capacity_gb", "free_capacity_gb",
                   "allocated_capacity_gb", "room_gb", "updated_at")
        data = [(p.host, p.backend, _gb(p.total_gb), _gb(p.free_gb), _gb(p.allocated_gb),
                 _gb(p.room_gb), base.fmt(p.reported_at))
                for p in capabilities.pool_states(self.app.context.db)]
        return columns, data


def _gb(value: object) -> object:
    """Whole GiB as an integer (how sizes are asked for); a reported
    'infinite' or 'unknown' as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return int(value) if float(value).is_integer() else round(value, 2)


def _count(pools: object) -> int:
    """How many pools a report lists (none when it lists none, or not as a list)."""
    return len(pools) if isinstance(pools, list) else 0
