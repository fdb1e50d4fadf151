"""Reconciliation of access rules (``rules.ACCESS_RULES``): after the stages,
each share instance of the host whose rules a crash left on their way to the
backend is sent its full rule set again, under its try-lock, through the
``update_access`` operation. A share with a request open (pending, or running
on a live engine) is left to that request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.manager.op_errors import NotNow
from sharemgr.manager.plans import Op
from sharemgr.reconcile import rules, takeover
from sharemgr.reconcile.summary import Summary

if TYPE_CHECKING:
    from sharemgr.reconcile.reconciler import Reconciler

LOG = logging.getLogger(__name__)
TYPE = "access_rule"  # how the pass's summary and plan name a rule


def settle(rec: Reconciler, summary: Summary, dry_run: bool) -> None:
    """``rec``: the Reconciler (its database, coordinator, operations and
    backends); ``summary``: its Summary."""
    in_flight = [(host, inst_id, stuck)
                 for host in rec.hosts
                 for inst_id, stuck in db_access.in_flight_on_host(rec.db, host).items()]
    # Read after the rules, as a stage reads them after its scan.
    requests = takeover.open_requests(rec, summary, dry_run, {i for _, i, _ in in_flight})
    for host, inst_id, stuck in in_flight:
        try:
            _one(rec, summary, requests, dry_run, host, inst_id, stuck)
        except Exception:
            rec.failure(summary, "reconciliation of the access rules of share "
                        "instance %s failed", inst_id)


def _skip(summary: Summary, stuck: list[models.ShareAccessRule], reason: str, dry_run: bool
          ) -> None:
    for rule in stuck:
        summary.skip(reason)
        if dry_run:
            summary.planned({"type": TYPE, "id": rule.id, "status": rule.state,
                             "action": "skip", "reason": reason})


def _one(rec: Reconciler, summary: Summary, requests: dict[str, models.Request],
         dry_run: bool,
         host: str, inst_id: str, stuck: list[models.ShareAccessRule]) -> None:
    req = requests.get(inst_id)
    if req is not None:
        _skip(summary, stuck, "request pending" if req.status == vocab.REQUEST_PENDING
              else f"in progress on {req.engine_id}", dry_run)
        return
    if dry_run:
        for rule in stuck:
            how = rules.ACCESS_RULES[rule.state]
            summary.planned({"type": TYPE, "id": rule.id, "status": rule.state,
                             "action": f"{how.action} {how.method}",
                             "outcome": f"{how.ok} or {how.error}"})
        return
    with takeover.locked(rec, vocab.SHARE_INSTANCE, inst_id, summary) as reason:
        if reason is not None:
            _skip(summary, stuck, reason, dry_run)
            return
        if inst_id in summary.stuck:
            # Not under its lock: taken, so that the stuck call, should it
            # return late, reaches a backend that fences with an old token.
            db_leases.take_rows(rec.db, models.ShareInstance, {inst_id: vocab.AVAILABLE})
        sent = rec.operations.perform(Op(vocab.SHARE_INSTANCE, inst_id,
                                         vocab.ACTION_UPDATE_ACCESS, host), held=True)
        if sent.result is Result.NOT_NOW:
            # Not a member now, its lock lost: the pass is run again.
            raise NotNow(sent.reason or "")
        if sent.result in (Result.STALE, Result.LOST):
            # Not available (error, deleting): nothing to send them to.
            LOG.warning("access rules of share instance %s cannot be sent (%s): error",
                        inst_id, sent.reason)
            db_access.finish(rec.db, stuck[0].share_id,
                             {r.id: (r.state, vocab.ACCESS_ERROR) for r in stuck})
        elif sent.result is Result.FAILED:
            LOG.warning("access rules of share instance %s: %s", inst_id, sent.reason)
    for rule in stuck:
        row = db_api.get(rec.db, models.ShareAccessRule, rule.id, include_deleted=True)
        summary.outcome(TYPE, row.state if row is not None else vocab.ACCESS_DELETED)
