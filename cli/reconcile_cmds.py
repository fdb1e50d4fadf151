"""sharectl reconcile run [--dry-run] | reconcile show."""

from __future__ import annotations

import argparse
import time
import uuid
from typing import TYPE_CHECKING, Any

from sharemgr.cli import base
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.db import models


def _summary_row(p: models.ReconcilePass) -> tuple[tuple, tuple]:
    s = p.summary or {}
    status = "failed" if s.get("failed") else "finished" if p.finished_at else "running"
    cols = ("id", "host", "engine_id", "trigger", "dry_run", "status", "started_at",
            "finished_at", "duration_seconds", "outcomes", "skipped", "abandoned_requests",
            "failures", "error")
    vals = (p.id, p.host, p.engine_id, p.trigger, p.dry_run, status, base.fmt(p.started_at),
            base.fmt(p.finished_at), s.get("duration_seconds"), s.get("outcomes", {}),
            s.get("skipped", {}), s.get("abandoned_requests", 0), s.get("failures", 0),
            s.get("error"))
    return cols, vals


class ReconcileRun(base.Lister):
    """Ask a running share-manager of this host to run a reconciliation pass
    now; with --dry-run, print what it would do without doing it."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--dry-run", action="store_true",
                            help="print the plan (resource, status, intended action) only")
        parser.add_argument("--timeout", type=float, default=120, metavar="SECONDS",
                            help="how long to wait for a manager to run it (default 120)")
        return parser

    def take_action(self, parsed_args: Any) -> tuple:
        from sharemgr.db import api as db_api
        from sharemgr.db import models
        from sharemgr.db import reconcile as db_rec

        ctx = self.app.context
        host = ctx.conf.host
        req_id = db_api.add_with_request(ctx.db, [], {
            "resource_type": vocab.RECONCILE, "resource_id": str(uuid.uuid4()),
            "action": vocab.ACTION_RUN, "host": host, "args": {"dry_run": parsed_args.dry_run},
        })
        deadline = time.monotonic() + parsed_args.timeout
        while True:
            req = db_api.get(ctx.db, models.Request, req_id)
            if req.status in (vocab.REQUEST_DONE, vocab.REQUEST_FAILED, vocab.REQUEST_ABANDONED):
                break
            if time.monotonic() > deadline:
                if req.status == vocab.REQUEST_PENDING and db_api.conditional_update(
                    ctx.db, models.Request, req_id, {"status": vocab.REQUEST_PENDING},
                    {"status": vocab.REQUEST_ABANDONED, "error": "no manager took it"},
                ):
                    raise base.OperationFailed(
                        f"no share-manager of host {host} took the request in "
                        f"{parsed_args.timeout:.0f}s (is one running?)")
                raise base.OperationFailed(f"the pass did not finish in "
                                           f"{parsed_args.timeout:.0f}s")
            time.sleep(0.2)
        if req.status != vocab.REQUEST_DONE:
            raise base.OperationFailed(f"the pass failed: {req.error}")
        found = db_rec.passes(ctx.db, host, trigger=f"manual:{req_id}")
        if not found:
            raise base.OperationFailed("the pass left no record")
        rec = found[0]
        if parsed_args.dry_run:
            cols = ("type", "id", "status", "action", "outcome")
            plan = rec.summary.get("plan", [])
            return cols, [(i["type"], i["id"], i["status"], i["action"],
                           i.get("outcome") or i.get("reason")) for i in plan]
        cols, vals = _summary_row(rec)
        return cols, [vals]


class ReconcileShow(base.ShowOne):
    """Show the newest reconciliation pass of this host that changed things
    (not a dry run; or --dry-run, or --id N)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--id", type=int, help="a pass id instead of the newest")
        parser.add_argument("--dry-run", action="store_true",
                            help="the newest dry run instead")
        parser.add_argument("--any-host", action="store_true",
                            help="the newest pass of any host")
        return parser

    def take_action(self, parsed_args: Any) -> tuple:
        from sharemgr.db import reconcile as db_rec

        ctx = self.app.context
        host = None if parsed_args.any_host or parsed_args.id else ctx.conf.host
        found = db_rec.passes(ctx.db, host, pass_id=parsed_args.id,
                              dry_run=None if parsed_args.id else parsed_args.dry_run)
        if not found:
            raise base.UserError("no reconciliation pass recorded"
                                 + (f" for host {host}" if host else ""))
        return _summary_row(found[0])


class ReconcileList(base.Lister):
    """List recent reconciliation passes of every host."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--limit", type=int, default=20)
        return parser

    def take_action(self, parsed_args: Any) -> tuple:
        from sharemgr.db import models
        from sharemgr.db import reconcile as db_rec

        rows = db_rec.passes(self.app.context.db, None, limit=parsed_args.limit)
        if not rows:
            return _summary_row(models.ReconcilePass(id=0, summary={}))[0], []
        return _summary_row(rows[0])[0], [_summary_row(r)[1] for r in rows]
