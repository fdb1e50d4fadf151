"""Drift detection: ask the backend about this host's ``available`` shares
and record what disagrees with the database (doc/reconciliation.rst, "Drift").

Kinds of drift: the share is ``missing`` on the backend, its ``size``
differs, its ``export_locations`` changed, or an object on the backend that
this manager's naming claims has no live share instance (``orphan``). What a
check does about each kind is a policy, kept as data in ``POLICIES`` and
chosen with ``drift_policy``: ``report`` (record and log), ``error`` (also
set the instance to ``error``) or ``correct`` (write the backend's value).

A check works in batches like a reconciliation pass: try-lock the instances
(an operation holds the lock while it calls the driver: a share being
changed is not compared), re-read them, ask the batch status method (the
single one where the driver has none), write every outcome in one
transaction, each ``WHERE status = 'available'``. Each check is recorded in
``reconcile_passes`` (trigger ``drift``, or ``drift:<request id>`` on
demand); each instance's finding in ``share_instances.drift``.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oslo_log import log as logging
from sharemgr.common import metrics, vocab
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.db import resources as db_res
from sharemgr.drivers.base import BATCH_STATUS_METHODS
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.manager import kinds, views
from sharemgr.manager.operations import lock_name
from sharemgr.reconcile.reconciler import BATCH_SIZE, Reconciler, Unusable, _export_locations, _size

LOG = logging.getLogger(__name__)

REPORT, ERROR, CORRECT = "report", "error", "correct"
MISSING, SIZE, EXPORTS, ORPHAN = "missing", "size", "export_locations", "orphan"

# The policies each kind of drift allows; the first is its default. A missing
# share cannot be corrected from the backend (there is nothing to read), and
# an orphan has no row to mark: deleting or adopting an object nobody claims
# is an operator's decision (sharectl share manage / the backend's tools).
POLICIES: dict[str, tuple[str, ...]] = {
    MISSING: (REPORT, ERROR),
    SIZE: (REPORT, ERROR, CORRECT),
    EXPORTS: (REPORT, ERROR, CORRECT),
    ORPHAN: (REPORT,),
}

METHOD = "get_share_status"


def policy_table(chosen: Mapping[str, str] | None) -> dict[str, str]:
    """The policy of every kind: the defaults with ``drift_policy`` over them.

    :raises ValueError: an unknown kind or a policy the kind does not allow
        (one line, for the start-up error)."""
    table = {kind: allowed[0] for kind, allowed in POLICIES.items()}
    for kind, policy in (chosen or {}).items():
        if kind not in POLICIES:
            raise ValueError(f"drift_policy: unknown kind '{kind}' "
                             f"(kinds: {', '.join(POLICIES)})")
        if policy not in POLICIES[kind]:
            raise ValueError(f"drift_policy: '{kind}' cannot be '{policy}' "
                             f"(allowed: {', '.join(POLICIES[kind])})")
        table[kind] = policy
    return table


@dataclass(frozen=True)
class Found:
    kind: str
    database: Any
    backend: Any


def _paths(locations: list[dict[str, Any]] | None) -> list[str]:
    return sorted(loc.get("path") for loc in locations or [] if isinstance(loc, dict))


def compare(inst: models.ShareInstance, share: models.Share, answer: Any) -> list[Found]:
    """What disagrees between the rows and the backend's answer (a status
    dict, or the ShareResourceNotFound the backend raised). A value the
    answer leaves out (or cannot be used) is not compared."""
    if isinstance(answer, ShareResourceNotFound):
        return [Found(MISSING, inst.status, None)]
    found: list[Found] = []
    try:
        size = _size(answer)
    except Unusable:
        size = None
    if size is not None and size != share.size:
        found.append(Found(SIZE, share.size, size))
    if answer.get("export_locations") is not None:
        try:
            backend = _export_locations(answer["export_locations"])
        except Unusable:
            backend = None
        if backend is not None and _paths(backend) != _paths(inst.export_locations):
            found.append(Found(EXPORTS, inst.export_locations or [], backend))
    return found


class DriftSummary:
    """Counts, findings and duration of one check; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.checked = 0
        self.drift: collections.Counter = collections.Counter()
        self.actions: collections.Counter = collections.Counter()
        self.skipped: collections.Counter = collections.Counter()
        self.items: list[dict[str, Any]] = []
        self.failures = 0

    def found(self, item: dict[str, Any], action: str) -> None:
        metrics.DRIFT_FINDINGS.labels(item["kind"], action).inc()
        with self._lock:
            self.drift[item["kind"]] += 1
            self.actions[action] += 1
            self.items.append(item)

    def as_dict(self, duration: float) -> dict[str, Any]:
        return {"checked": self.checked, "drift": dict(self.drift),
                "actions": dict(self.actions), "skipped": dict(self.skipped),
                "failures": self.failures, "items": self.items,
                "duration_seconds": round(duration, 3)}

    def line(self, duration: float, dry_run: bool) -> str:
        drift = ", ".join(f"{k}={n}" for k, n in sorted(self.drift.items())) or "none"
        acts = ", ".join(f"{k}={n}" for k, n in sorted(self.actions.items())) or "nothing"
        return (f"checked {self.checked} shares; drift: {drift}; "
                f"{'would do' if dry_run else 'done'}: {acts}; failures: {self.failures}; "
                f"{duration:.2f}s")


class DriftChecker:
    """Drift checks of one engine's backends; run on the pass runner's
    single worker, so never at the same time as a reconciliation pass."""

    def __init__(self, reconciler: Reconciler, policies: dict[str, str]) -> None:
        self.rec = reconciler
        self.policies = policies

    def run(self, trigger: str = "drift", dry_run: bool = False) -> dict[str, Any]:
        rec = self.rec
        started = time.monotonic()
        summary = DriftSummary()
        record_id = None
        try:
            record_id = db_rec.pass_start(rec.db, rec.host, rec.engine_id, trigger,
                                          dry_run).id
            for backend, driver in rec.drivers.items():
                host = f"{rec.host}@{backend}"
                self._shares(driver, host, summary, dry_run)
                self._orphans(driver, host, summary, dry_run)
            duration = time.monotonic() - started
            result = summary.as_dict(duration)
            db_rec.pass_finish(rec.db, record_id, result)
        except Exception as exc:
            rec._record_failure(record_id, trigger, dry_run, summary, started, exc)
            raise
        LOG.info("drift check %s (%s%s) on %s: %s", record_id, trigger,
                 ", dry run" if dry_run else "", rec.host, summary.line(duration, dry_run))
        result["id"] = record_id
        return result

    # Shares the database has -------------------------------------------------------

    def _shares(self, driver: Any, host: str, summary: DriftSummary, dry_run: bool) -> None:
        insts = [i for i in db_res.on_host(self.rec.db, models.ShareInstance, host,
                                           [vocab.AVAILABLE])
                 if not kinds.is_secondary(i)]
        for start in range(0, len(insts), BATCH_SIZE):
            try:
                self._batch(driver, insts[start:start + BATCH_SIZE], summary, dry_run)
            except Exception:  # one batch's trouble must not hide the others'
                summary.failures += 1
                LOG.exception("drift check of %s: a batch of %d shares failed", host,
                              len(insts[start:start + BATCH_SIZE]))

    def check_instances(self, insts: list[models.ShareInstance], policies: dict[str, str]
                        ) -> tuple[DriftSummary, set[str]]:
        """Check these instances (of this engine's backends) with
        ``policies`` instead of the configured ones (a stack check); the
        findings, and the ids that were not checked (busy, changed, the
        backend cannot tell)."""
        summary = DriftSummary()
        by_backend: dict[str, list[models.ShareInstance]] = collections.defaultdict(list)
        for inst in insts:
            by_backend[views.backend_of(inst.host)].append(inst)
        checked: set[str] = set()
        for backend, group in by_backend.items():
            driver = self.rec.drivers[backend]
            for start in range(0, len(group), BATCH_SIZE):
                checked |= self._batch(driver, group[start:start + BATCH_SIZE], summary,
                                       False, policies)
        return summary, {i.id for i in insts} - checked

    def _batch(self, driver: Any, insts: list[models.ShareInstance], summary: DriftSummary,
               dry_run: bool, policies: dict[str, str] | None = None) -> set[str]:
        """Check a batch; the ids of the instances compared with the backend."""
        rec = self.rec
        policies = policies or self.policies
        with contextlib.ExitStack() as locks:
            held = []
            for inst in insts:
                # A dry run changes nothing: it needs no lock.
                if dry_run or locks.enter_context(
                        rec.coordinator.try_lock(lock_name(vocab.SHARE_INSTANCE, inst.id))):
                    held.append(inst.id)
                else:
                    summary.skipped["busy (locked)"] += 1
            rows = db_res.rows_by_id(rec.db, models.ShareInstance, held)
            rows = {i: r for i, r in rows.items() if r.status == vocab.AVAILABLE}
            summary.skipped["changed meanwhile"] += len(held) - len(rows)
            if not rows:
                return set()
            shares = db_res.rows_by_id(rec.db, models.Share, {r.share_id for r in rows.values()})
            pairs = [(r, shares[r.share_id]) for r in rows.values() if r.share_id in shares]
            answers = self._answers(driver, pairs)
            writes = []
            compared: set[str] = set()
            for inst, share in pairs:
                summary.checked += 1
                answer = answers.get(inst.id)
                if answer is None:
                    summary.skipped["backend cannot tell"] += 1
                    continue
                compared.add(inst.id)
                found = compare(inst, share, answer)
                if found:
                    writes.append(self._outcome(inst, share, found, summary, dry_run,
                                                policies))
                elif inst.drift and not dry_run:
                    # The backend agrees again: the old finding goes.
                    writes.append([(models.ShareInstance, inst.id,
                                    {"status": vocab.AVAILABLE}, {"drift": None})])
            if writes and not dry_run:
                applied = db_rec.transitions(rec.db, writes)
                summary.skipped["changed meanwhile"] += applied.count(False)
        return compared

    def _answers(self, driver: Any, pairs: list[tuple[models.ShareInstance, models.Share]]
                 ) -> dict[str, Any]:
        """Per instance id: the backend's status dict or ShareResourceNotFound;
        left out when the backend cannot tell (logged)."""
        ops = self.rec.operations
        args = {inst.id: (views.share(inst, share), ops.server_dict(inst.share_server_id))
                for inst, share in pairs}
        answers: dict[str, Any] = {}
        batch = getattr(driver, BATCH_STATUS_METHODS[METHOD], None)
        if batch is not None:
            try:
                got = batch(list(args.values()))
                if isinstance(got, dict):
                    answers = {i: a for i, a in got.items() if i in args}
            except NotImplementedError:
                pass
            except Exception as exc:
                LOG.warning("drift check: %s failed (%r); asking share by share",
                            BATCH_STATUS_METHODS[METHOD], exc)
        usable = (dict, ShareResourceNotFound)
        for ident, arg in args.items():
            if isinstance(answers.get(ident), usable):
                continue
            answers.pop(ident, None)
            try:
                answer = getattr(driver, METHOD)(*arg)
            except ShareResourceNotFound as exc:
                answer = exc
            except NotImplementedError:
                continue
            except Exception as exc:
                LOG.warning("drift check: %s of share instance %s failed: %r", METHOD, ident,
                            exc)
                continue
            if isinstance(answer, usable):
                answers[ident] = answer
        return answers

    def _outcome(self, inst: models.ShareInstance, share: models.Share, found: list[Found],
                 summary: DriftSummary, dry_run: bool, policies_in: dict[str, str]) -> list:
        """The instance's conditional updates for what was found: the drift
        record always; ``error`` wins over corrections (the share needs an
        operator); ``correct`` writes the backend's value."""
        policies = {f.kind: policies_in[f.kind] for f in found}
        marked = ERROR in policies.values()
        values: dict[str, Any] = {}
        extra: list = []
        record: dict[str, Any] = {"checked_at": models.utcnow().isoformat(timespec="seconds"),
                                  "found": {}}
        for f in found:
            policy = policies[f.kind]
            action = policy
            if policy == CORRECT and marked:
                action = REPORT  # the share is marked error: nothing is corrected
            elif policy == CORRECT and f.kind == SIZE:
                extra.append((models.Share, share.id, {"size": share.size}, {"size": f.backend}))
                action = "corrected"
            elif policy == CORRECT and f.kind == EXPORTS:
                values["export_locations"] = f.backend
                action = "corrected"
            if dry_run:
                action = f"would {action}"
            record["found"][f.kind] = {"database": f.database, "backend": f.backend,
                                       "policy": policy, "action": action}
            summary.found({"kind": f.kind, "share_id": share.id, "instance_id": inst.id,
                           "database": f.database, "backend": f.backend, "policy": policy,
                           "action": action}, action)
            LOG.warning("drift: share %s (instance %s) %s: database %s, backend %s; "
                        "policy %s%s", share.id, inst.id, f.kind, f.database, f.backend,
                        policy, f" → {action}")
        values["drift"] = record
        if marked:
            values["status"] = vocab.ERROR
        return [(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE}, values)] + extra

    # Objects the database does not have ---------------------------------------------

    def _orphans(self, driver: Any, host: str, summary: DriftSummary, dry_run: bool) -> None:
        """Backend objects named like ours that no live share instance
        claims. The rows are read before the listing: a share deleted in
        between is then neither listed nor (falsely) an orphan, and a share
        created in between is found by the second read."""
        db = self.rec.db
        known = {r.id for r in db_res.on_host(db, models.ShareInstance, host)}
        try:
            objects = driver.list_shares()
        except NotImplementedError:
            summary.skipped["orphans: driver cannot list"] += 1
            return
        except Exception:
            summary.failures += 1
            LOG.exception("drift check of %s: list_shares failed", host)
            return
        listed = {o["id"]: o for o in objects or [] if isinstance(o, dict) and o.get("id")}
        unknown = [i for i in listed if i not in known]
        if unknown:
            claimed = db_res.rows_by_id(db, models.ShareInstance, unknown)
            unknown = [i for i in unknown if i not in claimed]
        for ident in unknown:
            obj = listed[ident]
            summary.found({"kind": ORPHAN, "share_id": None, "instance_id": ident,
                           "database": None, "backend": {k: obj.get(k) for k in (
                               "name", "size", "status") if obj.get(k) is not None},
                           "policy": self.policies[ORPHAN],
                           "action": f"would {REPORT}" if dry_run else REPORT}, REPORT)
            LOG.warning("drift: orphan on %s: share object %s (%s) has no share instance",
                        host, ident, obj.get("name"))
