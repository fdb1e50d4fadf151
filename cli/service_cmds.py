"""sharectl service list."""

from __future__ import annotations

import argparse
from typing import Any

from sharemgr.cli import base


def backend_states(rows: list[Any]) -> str:
    """'dummy: up, broken: failed (reason)': each backend's state."""
    return ", ".join(f"{r.backend}: {r.state}" + (f" ({r.reason})" if r.reason else "")
                     for r in rows)


class ServiceList(base.Lister):
    """List share-manager engines; 'alive' is tooz group membership,
    'backends' each backend's state (up, initializing, failed with reason)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--all", action="store_true", help="include stopped engines")
        return parser

    def take_action(self, parsed_args: Any) -> tuple:
        from sharemgr.db import api as db_api

        ctx = self.app.context
        rows = db_api.service_list(ctx.db, include_stopped=parsed_args.all)
        alive = ctx.coordinator.engines()
        backends = db_api.service_backends(ctx.db, [r.engine_id for r in rows])
        columns = ("host", "binary", "engine_id", "alive", "backends", "started_at",
                   "heartbeat_at", "stopped_at")
        data = [
            (r.host, r.binary, r.engine_id, r.engine_id in alive,
             backend_states(backends[r.engine_id]), r.started_at, r.heartbeat_at, r.stopped_at)
            for r in rows
        ]
        return columns, [tuple(base.fmt(v) for v in row) for row in data]
