"""sharectl reconcile run [--dry-run] | reconcile drift [--dry-run] | reconcile show."""

from __future__ import annotations

import argparse
import time
import uuid
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.context import Context
    from sharemgr.db import models


def _summary_row(p: models.ReconcilePass) -> tuple[tuple[str, ...], tuple[object, ...]]:
    s = p.summary or {}
    status = base.pass_status(p)
    cols = ("id", "host", "engine_id", "trigger", "dry_run", "status", "started_at",
            "finished_at", "duration_seconds", "outcomes", "skipped", "abandoned_requests",
            "failures", "drift", "error")
    vals = (p.id, p.host, p.engine_id, p.trigger, p.dry_run, status, base.fmt(p.started_at),
            base.fmt(p.finished_at), s.get("duration_seconds"), s.get("outcomes", {}),
            s.get("skipped", {}), s.get("abandoned_requests", 0), s.get("failures", 0),
            s.get("drift"), s.get("error"))
    return cols, vals


class ReconcileRun(base.Lister):
    """Ask a running share-manager of this host to run a reconciliation pass
    now; with --dry-run, print what it would do without doing it."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--dry-run", action="store_true",
                            help="print the plan (resource, status, intended action) only")
        parser.add_argument("--timeout", type=base.seconds, default=120, metavar="SECONDS",
                            help="how long to wait for a manager to run it (default 120)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        rec = _ask(self.app.context, vocab.ACTION_RUN, "manual", parsed_args)
        if parsed_args.dry_run:
            plan_cols = ("type", "id", "status", "action", "outcome")
            plan = rec.summary.get("plan", [])
            return plan_cols, [(i["type"], i["id"], i["status"], i["action"],
                           i.get("outcome") or i.get("reason")) for i in plan]
        cols, vals = _summary_row(rec)
        return cols, [vals]


def _ask(ctx: Context, action: str, prefix: str, parsed_args: argparse.Namespace
         ) -> models.ReconcilePass:
    """Write a request for a manager of this host, wait for it, return the
    record of the pass (or check) it ran."""
    from sharemgr.db import api as db_api
    from sharemgr.db import reconcile as db_rec

    host = ctx.conf.host
    req_id = db_api.add_with_request(ctx.db, [], {
        "resource_type": vocab.RECONCILE, "resource_id": str(uuid.uuid4()),
        "action": action, "host": host, "args": {"dry_run": parsed_args.dry_run},
    })
    assert req_id is not None  # a request was given
    wait_request(ctx, req_id, parsed_args.timeout, f"share-manager of host {host}")
    found = db_rec.passes(ctx.db, host, trigger=f"{prefix}:{req_id}")
    if not found:
        raise base.OperationFailed("the pass left no record")
    return found[0]


def wait_request(ctx: Context, req_id: int, timeout: float, who: str, what: str = "the pass"
                 ) -> None:
    """Wait for a request to be carried out; OperationFailed (one line)
    when it failed, nobody took it, or it did not finish in ``timeout``."""
    from sharemgr.db import api as db_api
    from sharemgr.db import models

    deadline = time.monotonic() + timeout
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
                    f"no {who} took the request in {timeout:.0f}s (is one running?)")
            raise base.OperationFailed(f"{what} did not finish in {timeout:.0f}s")
        time.sleep(0.2)
    if req.status != vocab.REQUEST_DONE:
        raise base.OperationFailed(f"{what} failed: {req.error}")


class ReconcileDrift(base.Lister):
    """Ask a running share-manager of this host to check its available shares,
    replicas and snapshots against the backends now, and print what disagrees (and what was done
    about it by drift_policy); with --dry-run, change nothing."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--dry-run", action="store_true",
                            help="find and print the drift only; record and change nothing")
        parser.add_argument("--timeout", type=base.seconds, default=120, metavar="SECONDS",
                            help="how long to wait for a manager to run it (default 120)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        rec = _ask(self.app.context, vocab.ACTION_DRIFT, "drift", parsed_args)
        cols = ("kind", "resource_type", "share_id", "snapshot_id", "instance_id", "database",
                "backend", "policy", "action")
        # An orphan names no resource type: it is a share object nobody claims.
        return cols, [tuple(i.get(c, "share" if c == "resource_type" else None) for c in cols)
                      for i in rec.summary.get("items", [])]


class ReconcileShow(base.ShowOne):
    """Show this host's newest reconciliation pass that was not a dry run
    (--dry-run: the newest dry run; --id N: pass N of any host)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--id", type=int, help="a pass id instead of the newest")
        parser.add_argument("--dry-run", action="store_true",
                            help="the newest dry run instead")
        parser.add_argument("--any-host", action="store_true",
                            help="the newest pass of any host")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import reconcile as db_rec

        ctx = self.app.context
        by_id = parsed_args.id is not None
        host = None if parsed_args.any_host or by_id else ctx.conf.host
        found = db_rec.passes(ctx.db, host, pass_id=parsed_args.id,
                              dry_run=None if by_id else parsed_args.dry_run)
        if not found:
            raise base.UserError(f"no reconciliation pass with id {parsed_args.id}" if by_id
                                 else "no reconciliation pass recorded"
                                 + (f" for host {host}" if host else ""))
        return _summary_row(found[0])


class ReconcileList(base.Lister):
    """List recent reconciliation passes of every host."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--limit", type=base.whole(1), default=20)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import models
        from sharemgr.db import reconcile as db_rec

        rows = db_rec.passes(self.app.context.db, None, limit=parsed_args.limit)
        if not rows:
            return _summary_row(models.ReconcilePass(id=0, summary={}))[0], []
        return _summary_row(rows[0])[0], [_summary_row(r)[1] for r in rows]
