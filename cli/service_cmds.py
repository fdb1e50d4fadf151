"""sharectl service list and service cleanup."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sharemgr.cli import base

if TYPE_CHECKING:
    from sharemgr.db import models


def backend_states(rows: Iterable[models.ServiceBackend], alive: bool = True) -> str:
    """'dummy: up, broken: failed (reason)': each backend's state; an engine
    not alive serves none, whatever it last wrote ('dummy: down (engine not
    alive; was up)')."""
    if not alive:
        return ", ".join(f"{r.backend}: down (engine not alive; was {r.state})" for r in rows)
    return ", ".join(f"{r.backend}: {r.state}" + (f" ({r.reason})" if r.reason else "")
                     for r in rows)


class ServiceList(base.Lister):
    """List share-manager engines; 'alive' is tooz group membership,
    'backends' each backend's state (up, initializing, failed with reason)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--all", action="store_true", help="include stopped engines")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import services as db_services

        ctx = self.app.context
        rows = db_services.service_list(ctx.db, include_stopped=parsed_args.all)
        alive = ctx.coordinator.engines()
        backends = db_services.service_backends(ctx.db, [r.engine_id for r in rows])
        columns = ("host", "binary", "engine_id", "alive", "backends", "started_at",
                   "heartbeat_at", "stopped_at", "died_at", "out_of_group")
        data = [
            (r.host, r.binary, r.engine_id, r.engine_id in alive,
             backend_states(backends[r.engine_id], r.engine_id in alive), r.started_at,
             r.heartbeat_at, r.stopped_at, died_at(r, r.engine_id in alive), r.out_of_group)
            for r in rows
        ]
        return columns, [tuple(base.fmt(v) for v in row) for row in data]


_seconds = base.whole(0, "a whole number of seconds")


def died_at(row: models.Service, alive: bool) -> datetime.datetime | None:
    """When a dead engine died, as far as the database can tell: its last
    heartbeat (None for an engine alive or stopped with SIGTERM)."""
    if alive or row.stopped_at is not None:
        return None
    return row.heartbeat_at or row.started_at


class ServiceCleanup(base.Command):
    """Remove the records of engines that are not alive (stopped, or dead:
    out of the engines group) and gave no sign of life for --older-than
    seconds. Alive engines are never removed."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--older-than", type=_seconds, default=0,
                            metavar="SECONDS",
                            help="only engines silent for at least this long (default 0)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.db import services as db_services

        ctx = self.app.context
        alive = ctx.coordinator.engines()
        removed = db_services.service_cleanup(ctx.db, alive, parsed_args.older_than)
        print(f"removed {len(removed)} engine record(s)" +
              (": " + ", ".join(removed) if removed else ""))
        return 0
