"""A reconciliation pass: settle this host's resources that a crash left in a
transient status (doc/specs.rst, spec 002).

Per resource: skip what must be left alone, take the non-blocking tooz
try-lock the operations hold (skip when held), re-read the row (skip when it
changed), act by the rule of ``rules.RULES``, write the outcome with a
conditional update. The work is done in batches: a batch try-locks each of
its resources, re-reads them in one query, asks the driver's batch status
method (one backend call; the single method when the driver has none), writes
every outcome in one transaction (each row still ``WHERE status = :seen``) and
releases its locks. Stages run in dependency order; the batches of one stage
run in parallel on a bounded futurist pool. One failing resource never stops
the pass.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import futurist
from futurist import waiters
from oslo_log import log as logging
from sharemgr.common import messages, tasks, vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.db.api import Change
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import hosts
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.op_errors import NotNow
from sharemgr.manager.operations import Operations
from sharemgr.manager.outage import is_outage
from sharemgr.manager.plans import Op
from sharemgr.reconcile import access, outcomes, rules, scan, status_query, takeover
from sharemgr.reconcile.scan import Candidate
from sharemgr.reconcile.summary import PlanItem, Summary, observe_pass

if TYPE_CHECKING:
    from sharemgr.reconcile.drift import DriftSummary

LOG = logging.getLogger(__name__)


# Longest error text a failed pass's record keeps (its first line only).
ERROR_LIMIT = 2000

# Most resources one batch holds: one re-read, one driver call, one
# transaction each. A batch holds the try-locks of its resources while it
# acts, so the pool together holds at most the coordinator's
# locks_held_limit (an open file each, or a renewal in every heartbeat).
BATCH_SIZE = 200


def batch_size(resources: int, workers: int, locks_limit: int) -> int:
    """Resources per batch: every worker gets a batch (a slow driver's calls
    spread over the whole pool), within BATCH_SIZE and the lock limit."""
    return max(1, min(BATCH_SIZE, locks_limit // max(1, workers),
                      math.ceil(resources / max(1, workers))))


def interrupts(exc: BaseException) -> bool:
    """Whether ``exc``, met on one resource, interrupts the pass rather
    than fails that resource: the database or coordination backend is away,
    or this engine may not call a driver now (out of the engines group, its
    lock lost). The pass is run again once they are back."""
    return is_outage(exc) or isinstance(exc, NotNow)


class Reconciler:
    def __init__(
        self,
        db: Database,
        drivers: dict[str, ShareDriver],
        coordinator: Coordinator,
        operations: Operations,
        host: str,
        engine_id: str,
        workers: int,
    ) -> None:
        self.db = db
        self.drivers = drivers
        self.coordinator = coordinator
        self.operations = operations
        self.host = host
        self.engine_id = engine_id
        self.workers = workers
        #: How long the user messages of the requests it abandons are kept.
        self.message_ttl: float = messages.DEFAULT_TTL
        #: Set when the engine is stopping (``PassRunner`` gives its own): a
        #: pass then starts no more delete retries, each a driver call.
        self.stopping = threading.Event()

    @property
    def hosts(self) -> list[str]:
        return [f"{self.host}@{b}" for b in self.drivers]

    # The pass ----------------------------------------------------------------

    def run(self, trigger: str = "startup", dry_run: bool = False) -> dict[str, object]:
        """One pass; its record says what it did."""
        summary = Summary()
        return self.recorded(trigger, dry_run, summary, lambda: self._stages(summary, dry_run),
                             "reconciliation pass",
                             lambda result, seconds: observe_pass(trigger, result, summary,
                                                                  seconds))

    def recorded(self, trigger: str, dry_run: bool, summary: Summary | DriftSummary,
                 work: Callable[[], None],
                 label: str, observe: Callable[[str, float], None] | None = None
                 ) -> dict[str, object]:
        """Run ``work`` as a recorded pass of this engine (a reconciliation
        pass, a drift check): its ``reconcile_passes`` row, ``summary``'s
        result in it, one INFO line naming it by ``label``. A pass that fails
        (the database, a bug) is recorded as failed, with the error, before
        the exception goes on to the caller. ``observe(result, seconds)``
        feeds the metrics."""
        started = time.monotonic()
        record_id = None
        try:
            record_id = db_rec.pass_start(self.db, self.host, self.engine_id, trigger,
                                          dry_run).id
            work()
            duration = time.monotonic() - started
            result = summary.as_dict(duration)
            db_rec.pass_finish(self.db, record_id, result)
        except Exception as exc:
            self._record_failure(record_id, trigger, dry_run, summary, started, exc)
            if observe is not None:
                observe("failed", time.monotonic() - started)
            raise
        if observe is not None:
            observe("dry_run" if dry_run else "finished", duration)
        LOG.info("%s %s (%s%s) on %s: %s", label, record_id, trigger,
                 ", dry run" if dry_run else "", self.host, summary.line(duration, dry_run))
        result["id"] = record_id
        return result

    def _stages(self, summary: Summary, dry_run: bool) -> None:
        executor = futurist.ThreadPoolExecutor(max_workers=self.workers)
        futures: list[Future[None]] = []
        try:
            for rtype in rules.STAGES:
                cands = self._stage(rtype)
                # Requests after the scan: an operation writes its request with
                # the transient status, so every candidate's request is seen
                # (read before, a request begun in between was missed and the
                # resource settled under a live engine's feet).
                # Its resources' requests, and their backups' (_backup_request).
                requests = takeover.open_requests(
                    self, summary, dry_run,
                    {c.id for c in cands} | {b for c in cands for b in self._backups_of(c)})
                size = batch_size(len(cands), self.workers,
                                  self.coordinator.locks_held_limit)
                futures = [tasks.submit_logged(executor, self._batch, cands[i:i + size],
                                               requests, summary, dry_run,
                                               what=f"reconciliation of {rtype} batch "
                                               f"{i // size}")
                           for i in range(0, len(cands), size)]
                if futures:
                    waiters.wait_for_all(futures)
            access.settle(self, summary, dry_run)
            takeover.abandon_rest(self, summary, dry_run)
            if summary.interrupted is not None:
                raise summary.interrupted
        finally:
            # Every resource of the stage is done before the pass ends;
            # shutdown(wait=True) would add futurist's idle poll (1 s) to
            # every pass, and its duration.
            if futures:
                waiters.wait_for_all(futures)
            executor.shutdown(wait=False)

    def _record_failure(self, record_id: int | None, trigger: str, dry_run: bool,
                        summary: Summary | DriftSummary, started: float, exc: BaseException
                        ) -> None:
        """Finish the pass's record as failed (what it did so far, the pass
        counted among the failures, and why), so 'sharectl reconcile show'
        and 'reconcile list' tell a failed pass from a running one."""
        result = summary.as_dict(time.monotonic() - started)
        lines = str(exc).strip().splitlines()  # a DBAPIError goes on with SQL
        error = f"{type(exc).__name__}: {lines[0] if lines else ''}"
        result.update(failures=summary.failures + 1, failed=True,
                      error=error[:ERROR_LIMIT])
        try:
            db_rec.pass_failed(self.db, record_id, self.host, self.engine_id, trigger,
                               dry_run, result)
        except Exception as again:  # e.g. the database is what failed
            if is_outage(again):  # the pass runner retries it; the outage is logged once
                LOG.debug("reconciliation pass (%s) on %s failed in an outage: %s", trigger,
                          self.host, again)
                return
            LOG.error("reconciliation pass (%s) on %s failed and could not be recorded: "
                      "%s: %s", trigger, self.host, type(again).__name__, again)

    def _stage(self, rtype: str) -> list[Candidate]:
        cands: list[Candidate] = []
        for backend, driver in self.drivers.items():
            if rtype == vocab.SHARE_SERVER and not driver.driver_handles_share_servers:
                continue
            cands.extend(scan.scan(self.db, rtype, f"{self.host}@{backend}"))
        return cands

    # A batch of resources ---------------------------------------------------------

    def _failed(self, cand: Candidate, summary: Summary) -> None:
        self.failure(summary, "reconciliation of %s %s (%s) failed", cand.rtype, cand.id,
                     cand.status)

    def failure(self, summary: Summary, what: str, *args: object) -> None:
        """The exception being handled, about one resource: an outage of
        the database or the coordination backend, or this engine not being
        allowed to call a driver now (``interrupts``), interrupts the pass (it
        ends failed and the runner runs it again), anything else is that
        resource's failure, logged with its traceback."""
        exc = sys.exc_info()[1]
        if exc is not None and interrupts(exc):
            summary.interrupt(exc)
            LOG.debug(what + ": %s (the pass is run again)", *args, exc)
            return
        summary.failed()
        LOG.exception(what, *args)

    def _skip(self, cand: Candidate, reason: str, summary: Summary, dry_run: bool) -> None:
        LOG.debug("reconciliation skips %s %s (%s): %s", cand.rtype, cand.id, cand.status,
                  reason)
        summary.skip(reason.split(" on ")[0] if reason.startswith("in progress") else reason)
        if dry_run:
            summary.planned({"type": cand.rtype, "id": cand.id, "status": cand.status,
                             "action": "skip", "reason": reason})

    def _batch(self, cands: list[Candidate], requests: dict[str, models.Request],
               summary: Summary, dry_run: bool) -> None:
        """Settle a batch of one stage's resources. A failure of one resource
        (its checks, its lock, its action) fails only that resource; one of
        the batch's shared steps (the re-read, the write) fails the resources
        it was for."""
        todo: list[tuple[Candidate, rules.Rule]] = []
        for cand in cands:
            try:
                rule = self._check(cand, requests, summary, dry_run)
            except Exception:
                self._failed(cand, summary)
                continue
            if rule is not None:
                todo.append((cand, rule))
        if dry_run or not todo:
            return
        # Every try-lock of the batch is held until its outcomes are written.
        with contextlib.ExitStack() as locks:
            held: list[tuple[Candidate, rules.Rule]] = []
            for cand, rule in todo:
                try:
                    # A departed engine's backup of this share: its lock first.
                    holds = [*((vocab.BACKUP, b) for b in self._backups_of(cand)
                               if b in summary.dead), (cand.rtype, cand.id)]
                    for rtype, ident in holds:
                        reason = locks.enter_context(takeover.locked(self, rtype, ident,
                                                                     summary))
                        if reason is not None:
                            break
                except Exception:
                    self._failed(cand, summary)
                    continue
                if reason is not None:
                    self._skip(cand, reason, summary, dry_run)
                    continue
                held.append((cand, rule))
            if held:
                try:
                    self._locked(held, summary)
                except Exception:  # a shared step (the backend's answers, a read)
                    for cand, _ in held:
                        self._failed(cand, summary)

    def _check(self, cand: Candidate, requests: dict[str, models.Request], summary: Summary,
               dry_run: bool) -> rules.Rule | None:
        """The rule to apply, or None when the resource is skipped (or, in a
        dry run, planned)."""
        reason = scan.left_alone(self.db, cand)
        if reason is not None and not dry_run:
            # Its own workflow settles it, under the lock it takes itself,
            # once no open request is about it (a migration's periodic task).
            takeover.abandon_departed(self, cand.id, summary)
        req = requests.get(cand.id) or self._backup_request(cand, requests)
        if reason is None and req is not None:
            reason = ("request pending" if req.status == vocab.REQUEST_PENDING
                      else f"in progress on {req.engine_id}" + (
                          f" (lease until {req.lease_expires_at:%H:%M:%S} UTC)"
                          if req.lease_expires_at is not None else ""))
        if reason is None and hosts.backend_of(cand.host) not in self.drivers:
            reason = "backend not served by this engine"
        if reason is not None:
            self._skip(cand, reason, summary, dry_run)
            return None
        rule = rules.RULES[cand.rtype][cand.status]
        if dry_run:
            target = {rules.QUERY: f"{rule.ok} or {rule.error}",
                      rules.DELETE: f"{rule.ok} or {rule.error}",
                      rules.MARK: rule.error}[rule.action]
            item: PlanItem = {"type": cand.rtype, "id": cand.id, "status": cand.status,
                              "action": rule.action + (f" {rule.method}" if rule.method else ""),
                              "outcome": target}
            if cand.id in summary.stuck:
                item["stuck"] = "lease expired"
            summary.planned(item)
            return None
        return rule

    def _locked(self, held: list[tuple[Candidate, rules.Rule]], summary: Summary) -> None:
        """Under the batch's locks: re-read, act, write the outcomes."""
        try:
            # Taken: each row's fencing token bumped (doc/reconciliation.rst,
            # "Fencing"), so a call of the engine that lost it can no longer
            # land on a backend that fences, nor its outcome in the database.
            rows = db_leases.take_rows(self.db, held[0][0].model,
                                    {c.id: c.status for c, _ in held})
        except Exception:
            for cand, _ in held:
                self._failed(cand, summary)
            return
        live: list[tuple[Candidate, rules.Rule]] = []
        for cand, rule in held:
            row = rows.get(cand.id)
            if row is None or row.status != cand.status:
                self._skip(cand, "changed meanwhile", summary, False)
                continue
            cand.row = row
            live.append((cand, rule))
        answered = status_query.verdicts(self.db, self.operations, self.drivers,
                                         [(c, r) for c, r in live if r.action == rules.QUERY])
        writes: list[tuple[Candidate, str, list[Change]]] = []
        for cand, rule in live:
            try:
                if rule.action == rules.DELETE:
                    if self.stopping.is_set():  # left in its status for the next pass
                        self._skip(cand, "the engine is stopping", summary, False)
                        continue
                    # The delete retry is an operation of its own (driver
                    # call, its own transaction): one by one.
                    outcome = self._delete(cand, rule)
                    if outcome is not None:
                        summary.outcome(cand.rtype, outcome)
                    continue
                if rule.action == rules.MARK:
                    status, changes = outcomes.mark(cand, rule)
                else:
                    status, changes = outcomes.converge(cand, rule, answered[cand.id])
                writes.append((cand, status, changes))
            except Exception:
                self._failed(cand, summary)
        if not writes:
            return
        try:
            applied = db_rec.transitions(self.db, [changes for _, _, changes in writes])
        except Exception:
            for cand, _, _ in writes:
                self._failed(cand, summary)
            return
        for (cand, status, _), won in zip(writes, applied, strict=True):
            if won:
                summary.outcome(cand.rtype, status)
            else:
                LOG.info("%s %s changed while being reconciled", cand.rtype, cand.id)

    def _backup_request(self, cand: Candidate, requests: dict[str, models.Request]
                        ) -> models.Request | None:
        """A share instance in backup_creating/backup_restoring belongs to its
        backup's request (keyed by the backup's id): while that request is
        pending or running, the backup workflow brings the share back."""
        return next((requests[b] for b in self._backups_of(cand) if b in requests), None)

    def _backups_of(self, cand: Candidate) -> list[str]:
        if cand.rtype not in (vocab.SHARE_INSTANCE, vocab.REPLICA) or \
                cand.status not in (vocab.BACKUP_CREATING, vocab.BACKUP_RESTORING):
            return []
        return [b.id for b in db_api.query(self.db, models.ShareBackup,
                                           {"share_id": cand.row.share_id})]

    def _delete(self, cand: Candidate, rule: rules.Rule) -> str | None:
        # Retried as it was asked: a forced delete stays forced (its request
        # row holds the args), so it never ends in an error status.
        args = db_rec.last_request_args(self.db, cand.rtype, cand.id, vocab.ACTION_DELETE)
        forced = bool(args.get("force")) and rule.forced is not None
        deleted = self.operations.perform(Op(cand.rtype, cand.id, vocab.ACTION_DELETE,
                                             args=args), held=True)
        match deleted.result:
            case Result.FAILED:
                LOG.warning("%s %s: delete retry failed: %s", cand.rtype, cand.id,
                            deleted.reason)
                return rule.error
            case Result.NOT_NOW:  # not a member now, its lock lost: the pass is run again
                raise NotNow(deleted.reason or "")
            case Result.STALE | Result.LOST:
                return None  # taken by someone else meanwhile: theirs to settle
        return rule.forced if forced else rule.ok
