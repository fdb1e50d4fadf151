"""A reconciliation pass: settle this host's resources that a crash left in a
transient status (doc/specs.rst, spec 002).

Per resource: skip what must be left alone, take the non-blocking tooz
try-lock the operations hold (skip when held), re-read the row (skip when it
changed), act by the rule of ``rules.RULES``, write the outcome with a
conditional update. Stages run in dependency order; resources of one stage
run in parallel on a bounded futurist pool. One failing resource never stops
the pass.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import futurist
from futurist import waiters
from oslo_log import log as logging
from sharemgr.common import tasks, vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.db.engine import Database
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.manager import views
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import OperationFailed, Operations, Stale, lock_name
from sharemgr.manager.plans import Op
from sharemgr.reconcile import rules, scan
from sharemgr.reconcile.scan import Candidate

LOG = logging.getLogger(__name__)


class Summary:
    """Counts per type and outcome, skips and why, duration; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: dict[str, collections.Counter] = collections.defaultdict(
            collections.Counter)
        self.skipped: collections.Counter = collections.Counter()
        self.abandoned = 0
        self.failures = 0
        self.plan: list[dict[str, Any]] = []

    def outcome(self, rtype: str, status: str) -> None:
        with self._lock:
            self.outcomes[rtype][status] += 1

    def skip(self, reason: str) -> None:
        with self._lock:
            self.skipped[reason] += 1

    def failed(self) -> None:
        with self._lock:
            self.failures += 1

    def planned(self, item: dict[str, Any]) -> None:
        with self._lock:
            self.plan.append(item)

    def as_dict(self, duration: float) -> dict[str, Any]:
        return {
            "outcomes": {t: dict(c) for t, c in self.outcomes.items()},
            "skipped": dict(self.skipped),
            "abandoned_requests": self.abandoned,
            "failures": self.failures,
            "duration_seconds": round(duration, 3),
            "plan": self.plan,
        }

    def line(self, duration: float) -> str:
        acted = ", ".join(
            f"{t}: " + " ".join(f"{s}={n}" for s, n in sorted(c.items()))
            for t, c in sorted(self.outcomes.items())
        ) or "nothing to settle"
        skipped = ", ".join(f"{r}={n}" for r, n in sorted(self.skipped.items())) or "none"
        return (f"{acted}; skipped: {skipped}; abandoned requests: {self.abandoned}; "
                f"failures: {self.failures}; {duration:.2f}s")


# Longest error text a failed pass's record keeps (its first line only).
ERROR_LIMIT = 2000

SECONDARY_STATES = (vocab.REPLICA_IN_SYNC, vocab.REPLICA_OUT_OF_SYNC, vocab.REPLICA_ERROR)


class Unusable(Exception):
    """A healthy status answer whose details cannot be recorded."""


def _size(answer: dict[str, Any]) -> int:
    """A whole, positive number of GiB (``8``, ``8.0``, ``"8"``): shares
    have at least 1 GiB and at most ``MAX_SHARE_SIZE_GB``."""
    size = answer.get("size")
    value: int | None = None
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, float) and size.is_integer():
        value = int(size)
    elif isinstance(size, str) and size.strip().isdigit():
        value = int(size)
    if value is None or value < 1:
        raise Unusable(f"no usable size ({size!r})")
    if value > vocab.MAX_SHARE_SIZE_GB:
        raise Unusable(f"a size above the maximum of {vocab.MAX_SHARE_SIZE_GB} GiB ({value})")
    return value


def _export_locations(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, (list, tuple)):
        raise Unusable(f"export locations that are not a list ({raw!r})")
    if not all(isinstance(i, str) or (isinstance(i, dict) and isinstance(i.get("path"), str))
               for i in raw):
        raise Unusable(f"export locations without paths ({raw!r})")
    return views.export_locations(raw)


def _classify(answer: Any) -> tuple[bool, str, dict[str, Any]]:
    """A status method's answer → (healthy, reason, answer dict)."""
    if not isinstance(answer, dict) or not answer.get("status"):
        return False, f"status method returned {answer!r} (no status)", {}
    if answer["status"] in (vocab.AVAILABLE, vocab.ACTIVE):
        return True, "healthy on the backend", answer
    return False, f"backend status {answer['status']}", answer


class Reconciler:
    def __init__(
        self,
        db: Database,
        drivers: dict[str, Any],
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

    @property
    def hosts(self) -> list[str]:
        return [f"{self.host}@{b}" for b in self.drivers]

    # The pass ----------------------------------------------------------------

    def run(self, trigger: str = "startup", dry_run: bool = False) -> dict[str, Any]:
        """One pass; its record says what it did. A pass that fails (the
        database, a bug) is recorded as failed, with the error, before the
        exception goes on to the caller."""
        started = time.monotonic()
        summary = Summary()
        record_id = None
        try:
            record_id = db_rec.pass_start(self.db, self.host, self.engine_id, trigger,
                                          dry_run).id
            self._stages(summary, dry_run)
            duration = time.monotonic() - started
            result = summary.as_dict(duration)
            db_rec.pass_finish(self.db, record_id, result)
        except Exception as exc:
            self._record_failure(record_id, trigger, dry_run, summary, started, exc)
            raise
        LOG.info("reconciliation pass %s (%s%s) on %s: %s", record_id, trigger,
                 ", dry run" if dry_run else "", self.host, summary.line(duration))
        result["id"] = record_id
        return result

    def _stages(self, summary: Summary, dry_run: bool) -> None:
        executor = futurist.ThreadPoolExecutor(max_workers=self.workers)
        futures: list = []
        try:
            for rtype in rules.STAGES:
                cands = self._stage(rtype)
                # Requests after the scan: an operation writes its request with
                # the transient status, so every candidate's request is seen
                # (read before, a request begun in between was missed and the
                # resource settled under a live engine's feet).
                requests = self._open_requests(summary, dry_run)
                futures = [tasks.submit_logged(executor, self._one, c, requests, summary,
                                               dry_run, what=f"reconciliation of {c.rtype} "
                                               f"{c.id}")
                           for c in cands]
                if futures:
                    waiters.wait_for_all(futures)
        finally:
            # Every resource of the stage is done before the pass ends;
            # shutdown(wait=True) would add futurist's idle poll (1 s) to
            # every pass, and its duration.
            if futures:
                waiters.wait_for_all(futures)
            executor.shutdown(wait=False)

    def _record_failure(self, record_id: int | None, trigger: str, dry_run: bool,
                        summary: Summary, started: float, exc: BaseException) -> None:
        """Finish the pass's record as failed (what it did so far, the pass
        counted among the failures, and why), so 'sharectl reconcile show'
        and 'reconcile list' tell a failed pass from a running one."""
        result = summary.as_dict(time.monotonic() - started)
        lines = str(exc).strip().splitlines()  # a DBAPIError goes on with SQL
        error = f"{type(exc).__name__}: {lines[0] if lines else ''}"
        result.update(failures=result["failures"] + 1, failed=True,
                      error=error[:ERROR_LIMIT])
        try:
            db_rec.pass_failed(self.db, record_id, self.host, self.engine_id, trigger,
                               dry_run, result)
        except Exception as again:  # e.g. the database is what failed
            LOG.error("reconciliation pass (%s) on %s failed and could not be recorded: "
                      "%s: %s", trigger, self.host, type(again).__name__, again)

    def _stage(self, rtype: str) -> list[Candidate]:
        cands: list[Candidate] = []
        for backend, driver in self.drivers.items():
            if rtype == vocab.SHARE_SERVER and not driver.driver_handles_share_servers:
                continue
            cands.extend(scan.scan(self.db, rtype, f"{self.host}@{backend}"))
        return cands

    def _open_requests(self, summary: Summary, dry_run: bool) -> dict[str, models.Request]:
        """Pending/running requests by resource id; requests claimed by dead
        engines become abandoned (not in a dry run).

        The requests are read before the membership: an engine that joins and
        claims a request in between is then seen with a pending request, never
        as a claimant missing from an older member list (which would abandon
        the request of an alive engine)."""
        by_resource: dict[str, models.Request] = {}
        open_requests = db_rec.open_requests(self.db, self.hosts)
        alive = self.coordinator.engines()
        for req in open_requests:
            if req.status == vocab.REQUEST_RUNNING and req.engine_id not in alive:
                if req.host is None:
                    continue  # host-less requests (stacks) are resumed by the engine
                if not dry_run and db_rec.abandon_request(
                        self.db, req.id, req.engine_id,
                        f"engine {req.engine_id} died; reconciled by {self.engine_id}"):
                    summary.abandoned += 1
                continue
            by_resource[req.resource_id] = req
        return by_resource

    # One resource ----------------------------------------------------------------

    def _one(self, cand: Candidate, requests: dict[str, models.Request], summary: Summary,
             dry_run: bool) -> None:
        try:
            self._settle(cand, requests, summary, dry_run)
        except Exception:
            summary.failed()
            LOG.exception("reconciliation of %s %s (%s) failed", cand.rtype, cand.id,
                          cand.status)

    def _skip(self, cand: Candidate, reason: str, summary: Summary, dry_run: bool) -> None:
        LOG.debug("reconciliation skips %s %s (%s): %s", cand.rtype, cand.id, cand.status,
                  reason)
        summary.skip(reason.split(" on ")[0] if reason.startswith("in progress") else reason)
        if dry_run:
            summary.planned({"type": cand.rtype, "id": cand.id, "status": cand.status,
                             "action": "skip", "reason": reason})

    def _settle(self, cand: Candidate, requests: dict[str, models.Request], summary: Summary,
                dry_run: bool) -> None:
        reason = scan.left_alone(self.db, cand)
        req = requests.get(cand.id) or self._backup_request(cand, requests)
        if reason is None and req is not None:
            reason = ("request pending" if req.status == vocab.REQUEST_PENDING
                      else f"in progress on {req.engine_id}")
        if reason is None and views.backend_of(cand.host) not in self.drivers:
            reason = "backend not served by this engine"
        if reason is not None:
            self._skip(cand, reason, summary, dry_run)
            return
        rule = rules.RULES[cand.rtype][cand.status]
        if dry_run:
            target = {rules.QUERY: f"{rule.ok} or {rule.error}",
                      rules.DELETE: f"{rule.ok} or {rule.error}",
                      rules.MARK: rule.error}[rule.action]
            summary.planned({"type": cand.rtype, "id": cand.id, "status": cand.status,
                             "action": rule.action + (f" {rule.method}" if rule.method else ""),
                             "outcome": target})
            return
        with self.coordinator.try_lock(lock_name(cand.rtype, cand.id)) as got:
            if not got:
                self._skip(cand, "locked by another engine", summary, dry_run)
                return
            row = db_api.get(self.db, cand.model, cand.id)
            if row is None or row.status != cand.status:
                self._skip(cand, "changed meanwhile", summary, dry_run)
                return
            cand.row = row
            outcome = self._act(cand, rule)
        if outcome is not None:
            summary.outcome(cand.rtype, outcome)

    def _backup_request(self, cand: Candidate, requests: dict[str, models.Request]
                        ) -> models.Request | None:
        """A share instance in backup_creating/backup_restoring belongs to its
        backup's request (keyed by the backup's id): while that request is
        pending or running, the backup workflow brings the share back."""
        if cand.rtype not in (vocab.SHARE_INSTANCE, vocab.REPLICA) or \
                cand.status not in (vocab.BACKUP_CREATING, vocab.BACKUP_RESTORING):
            return None
        for backup in db_api.query(self.db, models.ShareBackup, {"share_id": cand.row.share_id}):
            if backup.id in requests:
                return requests[backup.id]
        return None

    def _act(self, cand: Candidate, rule: rules.Rule) -> str | None:
        if rule.action == rules.MARK:
            LOG.warning("%s %s stuck in %s cannot be resumed: %s", cand.rtype, cand.id,
                        cand.status, rule.error)
            values = {"replica_state": vocab.REPLICA_ERROR} if cand.rtype == vocab.REPLICA else {}
            return self._set(cand, [], rule.error, values)
        if rule.action == rules.DELETE:
            try:
                self.operations.perform(Op(cand.rtype, cand.id, vocab.ACTION_DELETE),
                                        held=True)
            except OperationFailed as exc:
                LOG.warning("%s %s: delete retry failed: %s", cand.rtype, cand.id, exc)
                return rule.error
            except Stale:
                return None
            return rule.ok
        return self._query(cand, rule)

    def _set(self, cand: Candidate, extra: list, status: str,
             values: dict[str, Any] | None = None) -> str | None:
        changes = [(cand.model, cand.id, {"status": cand.status},
                    {"status": status, **(values or {})})] + extra
        if not db_api.transition_with_request(self.db, changes, None):
            LOG.info("%s %s changed while being reconciled", cand.rtype, cand.id)
            return None
        return status

    # Query and converge ---------------------------------------------------------

    def _query(self, cand: Candidate, rule: rules.Rule) -> str | None:
        driver = self.drivers[views.backend_of(cand.host)]
        values: dict[str, Any] = {}
        extra: list = []
        try:
            args = self._status_args(cand)
            answer = getattr(driver, rule.method)(*args)
            healthy, reason, answer = _classify(answer)
        except NotImplementedError:
            healthy, reason, answer = False, f"driver does not implement {rule.method}", {}
        except ShareResourceNotFound as exc:
            healthy, reason, answer = False, f"missing on the backend ({exc})", {}
        except Exception as exc:
            healthy, reason, answer = False, f"{rule.method} raised {exc!r}", {}
        if healthy:
            try:
                values, extra = self._healthy_values(cand, answer)
            except Unusable as exc:
                healthy, reason = False, f"{rule.method} answered {exc}"
        if not healthy:
            LOG.warning("%s %s (%s) → %s: %s", cand.rtype, cand.id, cand.status, rule.error,
                        reason)
            values = {"replica_state": vocab.REPLICA_ERROR} if cand.rtype == vocab.REPLICA else {}
            return self._set(cand, [], rule.error, values)
        LOG.info("%s %s (%s) → %s: %s", cand.rtype, cand.id, cand.status, rule.ok, reason)
        return self._set(cand, extra, rule.ok, values)

    def _status_args(self, cand: Candidate) -> tuple:
        ops = self.operations
        if cand.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
            return ops.share_parts(cand.row)
        if cand.rtype == vocab.SNAPSHOT_INSTANCE:
            return ops.snapshot_parts(cand.row)
        if cand.rtype == vocab.SHARE_GROUP:
            return views.group(cand.row), ops.server_dict(cand.row.share_server_id)
        grp = db_api.get(self.db, models.ShareGroup, cand.row.share_group_id, include_deleted=True)
        return views.group_snapshot(cand.row, grp), ops.server_dict(grp.share_server_id)

    def _healthy_values(self, cand: Candidate, answer: dict[str, Any]
                        ) -> tuple[dict[str, Any], list]:
        """The columns a healthy answer sets; Unusable when the answer cannot
        be recorded (the error outcome, not a crash that leaves the resource
        transient for every later pass too)."""
        values: dict[str, Any] = {}
        extra: list = []
        if cand.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
            if answer.get("export_locations") is not None:
                values["export_locations"] = _export_locations(answer["export_locations"])
            if cand.rtype == vocab.REPLICA:
                # A secondary being created is never the active replica (that
                # takes a promotion); anything else is out of sync until proven.
                state = answer.get("replica_state") or vocab.REPLICA_IN_SYNC
                values["replica_state"] = state if state in SECONDARY_STATES \
                    else vocab.REPLICA_OUT_OF_SYNC
            if cand.status in (vocab.EXTENDING, vocab.SHRINKING):
                # The backend's size is the truth, whichever way the resize
                # went; without it the database cannot be made to match.
                extra.append((models.Share, cand.row.share_id, {}, {"size": _size(answer)}))
        if cand.rtype == vocab.SNAPSHOT_INSTANCE:
            values["progress"] = "100%"  # as a completed create records it
        return values, extra
