"""sharectl service list."""

from __future__ import annotations

import argparse
from typing import Any

from sharemgr.cli import base


class ServiceList(base.Lister):
    """List share-manager engines; 'alive' is tooz group membership."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--all", action="store_true", help="include stopped engines")
        return parser

    def take_action(self, parsed_args: Any) -> tuple:
        from sharemgr.db import api as db_api

        ctx = self.app.context
        rows = db_api.service_list(ctx.db, include_stopped=parsed_args.all)
        alive = ctx.coordinator.engines()
        columns = ("host", "binary", "engine_id", "alive", "started_at", "heartbeat_at",
                   "stopped_at")
        data = [
            (r.host, r.binary, r.engine_id, r.engine_id in alive, r.started_at,
             r.heartbeat_at, r.stopped_at)
            for r in rows
        ]
        return columns, [tuple(base.fmt(v) for v in row) for row in data]
