"""Drift detection: ask the backend about this host's ``available`` shares,
replicas and snapshots and record what disagrees with the database
(doc/reconciliation.rst, "Drift").

Kinds of drift: the resource is ``missing`` on the backend, its ``size``
differs, its ``export_locations`` changed, its backend holds it but does not
serve it as recorded (``not_served``: the driver's status answer says
``served: False``), or an object on the backend that this manager's naming
claims has no live share instance (``orphan``). What
is compared for each type of resource is data too (``TARGETS``). What a
check does about each kind is a policy, kept as data in ``POLICIES`` and
chosen with ``drift_policy``: ``report`` (record and log), ``error`` (also
set the instance to ``error``), ``correct`` (write the backend's value) or
``repair`` (apply the share to the backend again, ``repair.py``).

A check works in batches like a reconciliation pass: try-lock the instances
(an operation holds the lock while it calls the driver: a share being
changed is not compared), re-read them, ask the batch status method (the
single one where the driver has none), write every outcome in one
transaction, each ``WHERE status = 'available'``. Each check is recorded in
``reconcile_passes`` (trigger ``drift``, or ``drift:<request id>`` on
demand); each resource's finding in its row's ``drift`` column.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Required, TypedDict

from oslo_log import log as logging
from sharemgr.common import metrics, vocab
from sharemgr.db import access as db_access
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.db import resources as db_res
from sharemgr.db.api import Change
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.manager import access, hosts, kinds
from sharemgr.manager.operation_table import STATUS_METHOD
from sharemgr.manager.operations import lock_name
from sharemgr.reconcile import ask, repair, scan, status_query
from sharemgr.reconcile.answers import Unusable, exports_of, size_of
from sharemgr.reconcile.reconciler import BATCH_SIZE, Reconciler
from sharemgr.reconcile.scan import Candidate

LOG = logging.getLogger(__name__)

REPORT, ERROR, CORRECT, REPAIR = "report", "error", "correct", "repair"
MISSING, SIZE, EXPORTS, ORPHAN = "missing", "size", "export_locations", "orphan"
NOT_SERVED = "not_served"

# The policies each kind of drift allows; the first is its default. A missing
# share cannot be corrected from the backend (there is nothing to read), and
# an orphan has no row to mark: deleting or adopting an object nobody claims
# is an operator's decision (sharectl share manage / the backend's tools).
POLICIES: dict[str, tuple[str, ...]] = {
    MISSING: (REPORT, ERROR),
    SIZE: (REPORT, ERROR, CORRECT),
    EXPORTS: (REPORT, ERROR, CORRECT),
    # What the manager applied is known (the share and its active rules):
    # applying it again is safe, and the users of the share need it served.
    NOT_SERVED: (REPAIR, REPORT, ERROR),
    ORPHAN: (REPORT,),
}

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
class Target:
    """A type of resource a drift check asks about."""

    rtype: str
    method: str  # its status method (the batch form where the driver has one)
    kinds: tuple[str, ...]  # the kinds of drift compared
    noun: str  # how the log and the summary name one


TARGETS: tuple[Target, ...] = (
    Target(vocab.SHARE_INSTANCE, STATUS_METHOD[vocab.SHARE_INSTANCE],
           (MISSING, SIZE, EXPORTS, NOT_SERVED), "share"),
    # A replica's size is its share's: compared, never corrected (the share's
    # size is its active instance's; a replica that differs needs an operator).
    Target(vocab.REPLICA, STATUS_METHOD[vocab.REPLICA], (MISSING, SIZE, EXPORTS), "replica"),
    # Snapshots are not exported in this manager (no mountable snapshots).
    Target(vocab.SNAPSHOT_INSTANCE, STATUS_METHOD[vocab.SNAPSHOT_INSTANCE], (MISSING, SIZE),
           "snapshot"),
)
TARGET = {t.rtype: t for t in TARGETS}


@dataclass(frozen=True)
class Found:
    kind: str
    database: object  # what the record says (a size, export locations)
    backend: object  # what the backend says


class Ids(TypedDict, total=False):
    """The ids a finding names, besides the instance's."""

    share_id: str
    snapshot_id: str


class DriftItem(TypedDict, total=False):
    """One finding, as the check's record lists it."""

    kind: Required[str]
    resource_type: str  # not for an orphan: no resource claims it
    share_id: str | None
    snapshot_id: str
    instance_id: Required[str]
    database: object
    backend: object
    policy: str
    action: str


@dataclass
class Subject:
    """One resource as a check compares it: its candidate (type, id, row,
    host), its recorded size and where a corrected size is written (the
    share's or snapshot's row), its export locations, and the ids the
    findings name."""

    cand: Candidate
    size: int | None
    size_row: tuple[type, str] | None
    exports: Sequence[object] | None
    ids: Ids


def _paths(locations: Sequence[object] | None) -> list[str]:
    return sorted(str(loc.get("path")) for loc in locations or [] if isinstance(loc, dict))


def compare(answer: Mapping[str, object] | ShareResourceNotFound, size: int | None,
            exports: Sequence[object] | None,
            kinds_: tuple[str, ...] = (MISSING, SIZE, EXPORTS)) -> list[Found]:
    """What disagrees between the record (``size``, ``exports``) and the
    backend's answer (a status dict, or the ShareResourceNotFound it
    raised), for the ``kinds_`` compared. A value the answer leaves out (or
    cannot be used) is not compared."""
    if isinstance(answer, ShareResourceNotFound):
        return [Found(MISSING, vocab.AVAILABLE, None)] if MISSING in kinds_ else []
    found: list[Found] = []
    # Not served: the export it lacks is the symptom, not a new value to
    # record; applying the share again brings it back.
    not_served = NOT_SERVED in kinds_ and answer.get("served") is False
    if not_served:
        found.append(Found(NOT_SERVED, "served", answer.get("detail") or "not served"))
    if SIZE in kinds_ and size is not None:
        try:
            backend_size = size_of(answer)
        except Unusable:
            backend_size = None
        if backend_size is not None and backend_size != size:
            found.append(Found(SIZE, size, backend_size))
    if EXPORTS in kinds_ and not not_served and answer.get("export_locations") is not None:
        try:
            backend = exports_of(answer["export_locations"])
        except Unusable:
            backend = None
        if backend is not None and _paths(backend) != _paths(exports):
            found.append(Found(EXPORTS, exports or [], backend))
    return found


class DriftSummary:
    """Counts, findings and duration of one check; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.checked = 0
        self.drift: collections.Counter[str] = collections.Counter()
        self.actions: collections.Counter[str] = collections.Counter()
        self.skipped: collections.Counter[str] = collections.Counter()
        self.items: list[DriftItem] = []
        self.failures = 0

    def found(self, item: DriftItem, action: str) -> None:
        metrics.DRIFT_FINDINGS.labels(item["kind"], action).inc()
        with self._lock:
            self.drift[item["kind"]] += 1
            self.actions[action] += 1
            self.items.append(item)

    def as_dict(self, duration: float) -> dict[str, object]:
        return {"checked": self.checked, "drift": dict(self.drift),
                "actions": dict(self.actions), "skipped": dict(self.skipped),
                "failures": self.failures, "items": self.items,
                "duration_seconds": round(duration, 3)}

    def line(self, duration: float, dry_run: bool) -> str:
        drift = ", ".join(f"{k}={n}" for k, n in sorted(self.drift.items())) or "none"
        acts = ", ".join(f"{k}={n}" for k, n in sorted(self.actions.items())) or "nothing"
        return (f"checked {self.checked} resources; drift: {drift}; "
                f"{'would do' if dry_run else 'done'}: {acts}; failures: {self.failures}; "
                f"{duration:.2f}s")


def _with_active_rules(db: Database, subjects: list[Subject],
                       args: dict[str, tuple[object, ...] | Exception]) -> None:
    """Give each share's status call its active access rules
    (``access_rules`` in the share dict), which a driver answering
    ``served`` compares its servers' clients with; not while a rule of the
    share is being applied or denied (the servers are changing). One read
    for the batch."""
    asked: list[tuple[str, dict[str, object]]] = []
    for subject in subjects:
        given = args.get(subject.cand.id)
        if isinstance(given, Exception) or not given or not isinstance(given[0], dict):
            continue
        asked.append((subject.cand.row.share_id, given[0]))
    by_share = db_access.rules_of_shares(db, {share_id for share_id, _ in asked})
    for share_id, share in asked:
        rules = by_share[share_id]
        if any(r.state in vocab.ACCESS_IN_FLIGHT for r in rules):
            continue
        share["access_rules"] = [access.view(r) for r in rules
                                 if r.state == vocab.ACCESS_ACTIVE]


def _as_read(cand: Candidate) -> dict[str, object]:
    """A finding's condition: the resource as the check read it, its token
    included, so that an answer the backend gave about an older state
    (another engine changed the resource meanwhile) is not written."""
    expected: dict[str, object] = {"status": vocab.AVAILABLE}
    if getattr(cand.row, "fence", None) is not None:
        expected["fence"] = cand.row.fence
    return expected


class DriftChecker:
    """Drift checks of one engine's backends; run on the pass runner's
    single worker, so never at the same time as a reconciliation pass."""

    def __init__(self, reconciler: Reconciler, policies: dict[str, str]) -> None:
        self.rec = reconciler
        self.policies = policies

    def run(self, trigger: str = "drift", dry_run: bool = False) -> dict[str, object]:
        summary = DriftSummary()

        def check() -> None:
            for backend, driver in self.rec.drivers.items():
                host = f"{self.rec.host}@{backend}"
                for target in TARGETS:
                    self._scan(driver, target, host, summary, dry_run)
                self._orphans(driver, host, summary, dry_run)

        return self.rec.recorded(trigger, dry_run, summary, check, "drift check")

    # Resources the database has -----------------------------------------------------

    def _batch_size(self) -> int:
        """A batch holds its resources' locks while it checks them."""
        return min(BATCH_SIZE, self.rec.coordinator.locks_held_limit)

    def _scan(self, driver: ShareDriver, target: Target, host: str, summary: DriftSummary,
              dry_run: bool) -> None:
        cands = scan.scan(self.rec.db, target.rtype, host, [vocab.AVAILABLE])
        size = self._batch_size()
        for start in range(0, len(cands), size):
            batch = cands[start:start + size]
            try:
                self._batch(driver, target, batch, summary, dry_run)
            except Exception:  # one batch's trouble must not hide the others'
                summary.failures += 1
                LOG.exception("drift check of %s: a batch of %d %ss failed", host, len(batch),
                              target.noun)

    def check_resources(self, cands: list[Candidate], policies: dict[str, str]
                        ) -> tuple[DriftSummary, set[str]]:
        """Check these resources (of this engine's backends) with
        ``policies`` instead of the configured ones (a stack check); the
        findings, and the ids that were not checked (busy, changed, the
        backend cannot tell)."""
        summary = DriftSummary()
        groups: dict[tuple[str, str], list[Candidate]] = collections.defaultdict(list)
        for cand in cands:
            groups[(hosts.backend_of(cand.host), cand.rtype)].append(cand)
        checked: set[str] = set()
        for (backend, rtype), group in groups.items():
            driver = self.rec.drivers[backend]
            size = self._batch_size()
            for start in range(0, len(group), size):
                checked |= self._batch(driver, TARGET[rtype], group[start:start + size],
                                       summary, False, policies)
        return summary, {c.id for c in cands} - checked

    def _batch(self, driver: ShareDriver, target: Target, cands: list[Candidate],
               summary: DriftSummary, dry_run: bool,
               policies: dict[str, str] | None = None) -> set[str]:
        """Check a batch; the ids of the resources compared with the backend."""
        rec = self.rec
        policies = policies or self.policies
        with contextlib.ExitStack() as locks:
            held = []
            for cand in cands:
                # A dry run changes nothing: it needs no lock.
                if dry_run or locks.enter_context(
                        rec.coordinator.try_lock(lock_name(cand.rtype, cand.id))):
                    held.append(cand)
                else:
                    summary.skipped["busy (locked)"] += 1
            subjects = self._subjects(target, held)
            summary.skipped["changed meanwhile"] += len(held) - len(subjects)
            if not subjects:
                return set()
            args = status_query.status_args(rec.db, rec.operations,
                                            [s.cand for s in subjects])
            if NOT_SERVED in target.kinds:
                _with_active_rules(rec.db, subjects, args)
            items = {s.cand.id: given for s in subjects
                     if not isinstance(given := args[s.cand.id], Exception)}
            answers = ask.ask(driver, target.method, items)
            writes = []
            compared: set[str] = set()
            for subject in subjects:
                summary.checked += 1
                ident = subject.cand.id
                # Not asked when its arguments could not be read: that error.
                answer = answers[ident] if ident in answers else args[ident]
                if not isinstance(answer, (dict, ShareResourceNotFound)):
                    summary.skipped["backend cannot tell"] += 1
                    if answer is not None and not isinstance(answer, NotImplementedError):
                        LOG.warning("drift check: %s of %s %s answered %r", target.method,
                                    target.noun, ident, answer)
                    continue
                compared.add(ident)
                found = compare(answer, subject.size, subject.exports, target.kinds)
                done = {}
                # Under the lock held for the check; not when another kind
                # marks the share error (it needs an operator).
                if any(f.kind == NOT_SERVED for f in found) and not dry_run \
                        and policies[NOT_SERVED] == REPAIR \
                        and all(policies[f.kind] != ERROR for f in found):
                    why = next(str(f.backend) for f in found if f.kind == NOT_SERVED)
                    done[NOT_SERVED] = repair.repair(rec, driver, subject.cand, target.method,
                                                     subject.ids["share_id"], why)
                if found:
                    writes.append(self._outcome(target, subject, found, summary, dry_run,
                                                policies, done))
                elif subject.cand.row.drift and not dry_run:
                    # The backend agrees again: the old finding goes.
                    writes.append([(subject.cand.model, ident, _as_read(subject.cand),
                                    {"drift": None})])
            if writes and not dry_run:
                applied = db_rec.transitions(rec.db, writes)
                summary.skipped["changed meanwhile"] += applied.count(False)
        return compared

    def _subjects(self, target: Target, cands: list[Candidate]) -> list[Subject]:
        """The candidates re-read (under their locks) that are still
        available, with what is compared."""
        db = self.rec.db
        model = kinds.kind(target.rtype).model
        rows = db_res.rows_by_id(db, model, [c.id for c in cands])
        fresh = [Candidate(c.rtype, c.id, rows[c.id].status, c.host, rows[c.id])
                 for c in cands if c.id in rows and rows[c.id].status == vocab.AVAILABLE]
        if target.rtype == vocab.SNAPSHOT_INSTANCE:
            snaps = db_res.rows_by_id(db, models.ShareSnapshot, {c.row.snapshot_id for c in fresh})
            return [Subject(c, snaps[c.row.snapshot_id].size,
                            (models.ShareSnapshot, c.row.snapshot_id), None,
                            {"snapshot_id": c.row.snapshot_id,
                             "share_id": snaps[c.row.snapshot_id].share_id})
                    for c in fresh if c.row.snapshot_id in snaps]
        shares = db_res.rows_by_id(db, models.Share, {c.row.share_id for c in fresh})
        replica = target.rtype == vocab.REPLICA
        return [Subject(c, shares[c.row.share_id].size,
                        None if replica else (models.Share, c.row.share_id),
                        c.row.export_locations, {"share_id": c.row.share_id})
                for c in fresh if c.row.share_id in shares]

    def _outcome(self, target: Target, subject: Subject, found: list[Found],
                 summary: DriftSummary, dry_run: bool, policies_in: dict[str, str],
                 done: Mapping[str, str] | None = None) -> list[Change]:
        """The resource's conditional updates for what was found: the drift
        record always; ``error`` wins over corrections (the resource needs an
        operator); ``correct`` writes the backend's value; ``done``: what a
        repair made of a kind (its action)."""
        cand = subject.cand
        policies = {f.kind: policies_in[f.kind] for f in found}
        marked = ERROR in policies.values()
        values: dict[str, object] = {}
        extra: list[Change] = []
        found_by_kind: dict[str, dict[str, object]] = {}
        record: dict[str, object] = {"checked_at": models.utcnow().isoformat(timespec="seconds"),
                                     "found": found_by_kind}
        for f in found:
            policy = policies[f.kind]
            action = policy
            if policy == CORRECT and marked:
                action = REPORT  # the resource is marked error: nothing is corrected
            elif policy == CORRECT and f.kind == SIZE and subject.size_row is not None:
                model, ident = subject.size_row
                extra.append((model, ident, {"size": subject.size}, {"size": f.backend}))
                action = "corrected"
            elif policy == CORRECT and f.kind == SIZE:
                action = REPORT  # a replica's size is its share's: not corrected here
            elif policy == CORRECT and f.kind == EXPORTS:
                values["export_locations"] = f.backend
                action = "corrected"
            elif policy == REPAIR:
                action = (done or {}).get(f.kind, REPAIR)
            if dry_run:
                action = f"would {action}"
            found_by_kind[f.kind] = {"database": f.database, "backend": f.backend,
                                       "policy": policy, "action": action}
            summary.found({"kind": f.kind, "resource_type": target.noun, **subject.ids,
                           "instance_id": cand.id, "database": f.database,
                           "backend": f.backend, "policy": policy, "action": action}, action)
            LOG.warning("drift: %s %s (instance %s) %s: database %s, backend %s; "
                        "policy %s%s", target.noun, subject.ids.get("snapshot_id")
                        or subject.ids["share_id"], cand.id, f.kind, f.database, f.backend,
                        policy, f" → {action}")
        values["drift"] = record
        if marked:
            values["status"] = vocab.ERROR
            if target.rtype == vocab.REPLICA:
                values["replica_state"] = vocab.REPLICA_ERROR
        return [(cand.model, cand.id, _as_read(cand), values)] + extra

    # Objects the database does not have ---------------------------------------------

    def _orphans(self, driver: ShareDriver, host: str, summary: DriftSummary,
                 dry_run: bool) -> None:
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
            seen: dict[str, object] = {k: obj.get(k) for k in ("name", "size", "status")
                                       if obj.get(k) is not None}
            if _paths(obj.get("export_locations")):
                # What 'sharectl share manage EXPORT_PATH' adopts it by.
                seen["export_paths"] = _paths(obj.get("export_locations"))
            summary.found({"kind": ORPHAN, "share_id": None, "instance_id": ident,
                           "database": None, "backend": seen,
                           "policy": self.policies[ORPHAN],
                           "action": f"would {REPORT}" if dry_run else REPORT}, REPORT)
            LOG.warning("drift: orphan on %s: share object %s (%s) has no share instance",
                        host, ident, obj.get("name"))
