"""sharectl backend list, pool list: what each backend last reported from
its driver's get_share_stats() (refreshed every backend_stats_interval)."""

from __future__ import annotations

from typing import Any

from sharemgr.cli import base


def _reports(app: Any) -> list:
    from sharemgr.db import capabilities as db_capabilities

    return db_capabilities.all_stats(app.context.db)


def _backend(host: str) -> str:
    return host.split("@", 1)[1] if "@" in host else host


class BackendList(base.Lister):
    """List backends with their capabilities, as their drivers last reported."""

    def take_action(self, parsed_args: Any) -> tuple:
        columns = ("host", "backend", "share_backend_name", "vendor_name",
                   "driver_handles_share_servers", "snapshot_support",
                   "create_share_from_snapshot_support", "replication_type",
                   "share_group_support", "pools", "updated_at")
        data = []
        for row in _reports(self.app):
            stats = row.stats or {}
            data.append((row.host.split("@", 1)[0], _backend(row.host),
                         *(stats.get(c) for c in columns[2:9]),
                         len(stats.get("pools") or []), base.fmt(row.updated_at)))
        return columns, data


class PoolList(base.Lister):
    """List pools ('host@backend#pool') with their capacity in GiB, as their
    backends last reported."""

    def take_action(self, parsed_args: Any) -> tuple:
        columns = ("name", "backend", "total_capacity_gb", "free_capacity_gb", "updated_at")
        data = []
        for row in _reports(self.app):
            for pool in (row.stats or {}).get("pools") or []:
                if isinstance(pool, dict) and pool.get("pool_name"):
                    data.append((f"{row.host}#{pool['pool_name']}", _backend(row.host),
                                 pool.get("total_capacity_gb"), pool.get("free_capacity_gb"),
                                 base.fmt(row.updated_at)))
        return columns, data
