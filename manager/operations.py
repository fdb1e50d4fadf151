"""Carrying out claimed requests: lock, call the driver, write the outcome.

Every operation holds the resource's tooz lock (the lock the reconciler
try-locks) while it calls the driver, re-reads the row under the lock, and
writes the terminal status with a conditional update on the transient status
it expects, in one transaction with any other row the outcome touches.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeVar

import tenacity
from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.outcome import Outcome
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.db.retry import first_then_retry
from sharemgr.drivers import timing
from sharemgr.drivers.exceptions import (
    FencedCall,
    ShareResourceNotFound,
)
from sharemgr.manager import (
    access_sync,
    driver_args,
    hosts,
    kinds,
    late_outcome,
    leases,
    operation_table,
    successes,
)
from sharemgr.manager.coordination import CoordinationUnavailable, Coordinator
from sharemgr.manager.op_errors import (
    Lost,
    NotNow,
    OperationFailed,
    Stale,
    before_call,
    log_failure,
    outcome_of,
)
from sharemgr.manager.outage import is_outage
from sharemgr.manager.plans import Change, Op, Reread

if TYPE_CHECKING:
    from sharemgr.drivers.base import ShareDriver
    from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)


R = TypeVar("R", bound=kinds.StatusRow)
# Carries out one (kind, action): the operations, the op, whether the lock is held.
OpHandler = Callable[["Operations", Op, bool], "list[Change] | None"]

# Seconds an outcome waits for a database that is away before it gives up
# (the resource then stays transient until a reconciliation pass).
OUTCOME_WAIT = 300.0


def lock_name(rtype: str, ident: str) -> bytes:
    return kinds.kind(rtype).lock_name(ident)


@dataclass(frozen=True)
class Step(Generic[R]):
    """A handler's part of an operation for ``Operations.run``: the row, how
    the driver is called and what a success (and, where it differs from the
    spec's error status, a failure) writes. The rest — the statuses the call
    expects, the driver method, the error status — is the operation table's."""

    model: type[R]
    ident: str
    what: str  # '<verb> of <what> <id>', for logs and errors
    # The driver call on the re-read row and what ``read`` read with it (None
    # without a ``read``).
    call: Callable[[R, object], object]
    done: Callable[[R, object], list[Change]]  # what its success writes
    failed: Callable[[R, Exception], list[Change]] | None = None  # None: the spec's error
    expected: tuple[str, ...] | None = None  # None: the spec's transient statuses
    force: bool = False  # a forced delete: a failure is logged, the success written
    # After the success (given the changes written), still under the lock.
    then: Callable[[R, list[Change]], None] | None = None
    # The re-read, in the lease's transaction, of the row and what else the
    # call needs (None: the row by id alone); a function of db/.
    read: Callable[[Session, str], tuple[R | None, object]] | None = None


@dataclass(frozen=True)
class _Lease:
    """The lease a call in one status starts with, chosen before the re-read."""

    method: str | None
    terms: leases.Terms | None
    written: bool  # the request row was written with these terms: not again


class Operations:
    def __init__(
        self,
        db: Database,
        drivers: dict[str, ShareDriver],
        coordinator: Coordinator,
        engine_id: str,
        handlers: Mapping[tuple[str, str], OpHandler],
    ) -> None:
        self.db = db
        # (kind, action) -> its handler: manager/handlers.py's table, given
        # by whoever assembles the engine (the handlers build on this class).
        self.handlers = handlers
        self.drivers = drivers
        self.coordinator = coordinator
        self.engine_id = engine_id
        # The daemon sets them from its options (manager/leases.py).
        self.leases: leases.Leases = leases.NONE
        self.keeper = leases.Keeper(db, engine_id)
        # The daemon's membership (manager/membership.py): why this engine
        # may not call a driver now, or None. And what to do about a
        # resource whose outcome could not be written (re-observe it).
        self.not_member: Callable[[], str | None] = lambda: None
        self.outcome_wait = OUTCOME_WAIT
        self.on_lost: Callable[[str, str], None] = lambda rtype, ident: None
        # A host-assisted migration's copy rate, KiB/s (0: unbounded); the
        # daemon sets it from [DEFAULT] migration_copy_bwlimit.
        self.copy_bwlimit_kib = 0

    # Plumbing --------------------------------------------------------------

    def perform(self, op: Op, held: bool = False) -> Outcome[list[Change]]:
        """Carry out ``op`` in this thread: the one entry for the request
        runner, the reconciler and stacks. ``held``: the caller (the
        reconciler) already holds the resource's lock. DONE carries the
        changes its success wrote under that lock (None from
        ``update_access``, which writes rules, each its own outcome); FAILED
        (the resource is in its error status), STALE, LOST or NOT_NOW say
        why not (``outcome_of``); an outage met before the first driver call
        is NOT_NOW too. Anything else raised is a bug or an outage after a
        call began, and propagates."""
        handler = self.handlers.get((op.kind, op.action))
        if handler is None:
            return Outcome.failed(f"unknown request {op.kind} {op.action}")
        begun = timing.BEGUN.count
        try:
            return Outcome.done(handler(self, op, held))
        except (Stale, OperationFailed) as exc:
            return outcome_of(exc)
        except Exception as exc:
            if not is_outage(exc) or timing.BEGUN.count != begun:
                raise
            # The database or the coordination backend away before any
            # driver call (the lock, the re-read that takes the row): nothing
            # reached the backend, and the request waits for them.
            return outcome_of(before_call(f"{op.kind} {op.action} of {op.ident}", exc))

    def default_lease(self) -> leases.Terms | None:
        """The lease of a method with no lease of its own, starting now
        (None: none). A stack's begin writes it with the request row and
        passes it in ``Op.lease``: the call then writes it no more."""
        return _starting(self.leases.default_shape)

    def handle(self, req: models.Request) -> Outcome[list[Change]]:
        """The request runner's handler for a claimed request."""
        return self.perform(Op.of_request(req))

    def driver_for(self, host: str) -> ShareDriver:
        backend = hosts.backend_of(host)
        try:
            return self.drivers[backend]
        except KeyError:
            raise OperationFailed(f"this engine does not serve backend {backend!r}")

    @contextlib.contextmanager
    def locked(self, rtype: str, ident: str, lock: bytes | None = None) -> Iterator[None]:
        """The resource's lock (``lock``: its name, when the caller has it)."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.coordinator.hold(lock or lock_name(rtype, ident)))
            except CoordinationUnavailable as exc:
                # Before any driver call: a member runs the request once the
                # backend answers (it failed for good and left its resource
                # in its transient status).
                raise NotNow(str(exc)) from exc
            yield

    def _lock_scope(self, op: Op, rtype: str, ident: str, lock: bytes, held: bool
                    ) -> contextlib.ExitStack:
        """``run``'s hold of the resource's lock: its own, none when the caller
        holds it, or, where a batch took it (``Op.reread``), let go at the end
        as its own would be (a copy from a snapshot needs the clone poll to get
        it), unless ``run`` leaves its success to the batch (``late_outcome``)."""
        scope = contextlib.ExitStack()
        if op.reread is not None:
            scope.callback(op.reread.release)
        elif not held:
            scope.enter_context(self.locked(rtype, ident, lock))
        return scope

    def fresh(self, model: type[R], ident: str, expected: tuple[str, ...],
              take: bool = False) -> R:
        """The row re-read, or Stale when it is gone or in none of
        ``expected``. ``take``: taken first (its fencing token bumped), in
        the same transaction, for a driver call made outside ``run`` under a
        lock of its own: a call of an earlier holder left running cannot
        land after this one. A caller that holds the lock for a pass that
        took the row already does not take it again (the pass's own writes
        are fenced by the token it took)."""
        row, _, _ = db_leases.read_and_lease(self.db, model, ident, self.engine_id, {},
                                             take=expected if take else None)
        return _expect(model, ident, row, expected)

    def _fresh_leased(self, model: type[R], ident: str, spec: operation_table.Spec,
                      expected: tuple[str, ...],
                      read: Callable[[Session, str], tuple[R | None, object]] | None,
                      written: leases.Terms | None, taken: int | None = None,
                      reread: Reread | None = None, request_id: int | None = None,
                      ) -> tuple[R, object, _Lease, bool]:
        """``fresh`` and the lease of the call about to start, in one
        transaction. A lease starts for each status the call expects before
        the read (the spec's ``methods`` by status), which picks one;
        ``read`` re-reads the row and what else the call needs (see
        ``db_leases.read_and_lease``); ``written``: the request row's lease
        (``Op.lease``); ``taken``: the token the row was inserted with,
        taken (``Op.taken``): not taken again while it still has it;
        ``reread``: the row as read under the lock (``Op.reread``);
        ``request_id``: the call's request, without which nothing is taken
        once a pass has abandoned it (``Lost``). Returns the row, what
        ``read`` read, its status's lease and whether our request holds it."""
        chosen: dict[str, _Lease] = {}
        for status in expected:
            name = spec.methods[status]
            shape = self.leases.shapes.get(name or "", self.leases.default_shape)
            if written is not None and shape == self.leases.default_shape:
                # The request row was written with this lease a moment ago.
                chosen[status] = _Lease(name, written, True)
            else:
                chosen[status] = _Lease(name, _starting(shape), False)
        to_write = {status: None if lease.written else lease.terms
                    for status, lease in chosen.items()}
        found: R | None
        if (reread is not None and isinstance(reread.row, model) and taken is not None
                and not any(to_write.values())):
            # Read under the lock by the caller that holds it (held_reads.py),
            # as the read below would: nothing to take, no lease to write.
            found, parent, leased = reread.row, reread.parent, 0
        else:
            # The row is taken (its fencing token bumped) in the same
            # transaction: the call and its outcome carry the new token.
            found, parent, leased = db_leases.read_and_lease(
                self.db, model, ident, self.engine_id, to_write, read,
                take=expected if taken is None else None, request_id=request_id)
        if taken is not None and found is not None and getattr(found, "fence", None) != taken:
            # Taken by someone else since it was inserted: taken back, as any
            # call takes its row (whose outcome wins is the fence's to say),
            # unless its request was taken over with it.
            found, parent, leased = db_leases.read_and_lease(
                self.db, model, ident, self.engine_id, to_write, read, take=expected,
                request_id=request_id)
        row = _expect(model, ident, found, expected)
        lease = chosen[row.status]
        return row, parent, lease, bool(leased) or lease.written

    def write_outcome(self, changes: list[Change], what: str, rtype: str, ident: str) -> None:
        """Write the outcome; while the database is away it waits for it
        (up to ``outcome_wait`` seconds): a call that changed the backend
        must not leave its resource transient with its request failed."""

        won = first_then_retry(is_outage, functools.partial(self._outcome_retrying, what),
                               db_api.transition_with_request, self.db, changes, None)
        if not won:
            self.re_observe(rtype, ident)
            raise Lost(f"{what} changed while the driver worked (taken over); outcome not "
                       "written, the resource is re-observed")

    def _outcome_retrying(self, what: str) -> tenacity.Retrying:
        """The outcome's wait for the database, made only once the first
        try met an outage (not for each of the outcomes that go through)."""
        def waiting(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1:
                LOG.warning("%s: the database is away; its outcome waits for it", what)

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_outage), reraise=True,
            wait=tenacity.wait_exponential(multiplier=0.2, max=5),
            stop=tenacity.stop_after_delay(self.outcome_wait), before_sleep=waiting)

    def re_observe(self, rtype: str, ident: str) -> None:
        """A late outcome is looked at, not dropped: the resource is
        re-observed (doc/reconciliation.rst, "Fencing")."""
        try:
            self.on_lost(rtype, ident)
        except Exception:
            LOG.exception("re-observing %s %s failed", rtype, ident)

    def guard(self, what: str, terms: leases.Terms | None, lock: bytes) -> None:
        """Right before a driver call: this engine must be a member of the
        engines group, still hold the resource's lock (a pause longer than
        ``lock_timeout`` lets it expire), and the call's lease must have a
        margin left (a pause between the take and the call eats it). A
        driver call made outside ``run`` (access rules) is guarded too."""
        why = self.why_not_call(lock)
        if why:
            raise NotNow(f"{what}: not calling the driver: {why}")
        if terms is not None:
            margin = max(1.0, terms.heartbeat / 3) if terms.heartbeat else 1.0
            left = terms.left()
            if left < margin:
                raise NotNow(f"{what}: not calling the driver: its lease has "
                                f"{left:.1f}s left, under the {margin:.1f}s margin")

    def why_not_call(self, lock: bytes) -> str | None:
        """Why this engine may not call a driver about the resource of
        ``lock`` (held by the caller) now, or None: out of the engines group,
        or the lock expired."""
        why = self.not_member()
        if why:
            return why
        if not self.coordinator.still_holds(lock):
            return "its lock expired or cannot be checked on the coordination backend"
        return None

    def run(self, op: Op, step: Step[R], held: bool = False) -> list[Change]:
        """Carry out ``step``, ``op``'s driver call on one row, by the
        operation table's spec: lock, re-read, call the driver, write success
        or error atomically; the success's changes, as written, are returned.
        ``held``: the caller (the reconciler; a stack's batch, which read the
        row under it: ``Op.reread``) already holds the lock."""
        spec = operation_table.SPECS[(op.kind, op.action)]
        rtype, model, ident, what = op.kind, step.model, step.ident, step.what
        expected = step.expected or spec.transient
        force = step.force
        if force and step.failed is None:
            # A plain delete queued before this one may have failed meanwhile:
            # the forced one finishes it from that error status.
            expected = (*expected, spec.error_values()["status"])
        lock = lock_name(rtype, ident)
        with self._lock_scope(op, rtype, ident, lock, held) as scope:
            why = self.not_member()
            if why:  # not even the take below: it would fence out our replacement
                raise NotNow(f"{what}: not calling the driver: {why}")
            try:
                row, parent, lease, leased = self._fresh_leased(
                    model, ident, spec, expected, step.read, op.lease, op.taken, op.reread,
                    op.request_id)
            except db_leases.TakenOver as exc:  # nothing taken, nothing called
                raise Lost(f"{what}: {exc}; the pass that abandoned it settles it")
            method, terms = lease.method, lease.terms
            fence = getattr(row, "fence", None)
            # Asked right before the call; a call refused renews nothing.
            self.guard(what, terms if leased else None, lock)
            with self.keeper.holding(ident, terms, leased):
                begun = timing.BEGUN.count
                try:
                    try:
                        result = step.call(row, parent)
                    except ShareResourceNotFound as exc:
                        if vocab.DELETING not in expected:
                            raise
                        # Deletes are idempotent: gone is success, whatever the driver says.
                        LOG.info("%s: already gone on the backend (%s)", what, exc)
                        result = None
                except Stale:
                    raise
                except FencedCall as exc:
                    # The backend refused the call: another engine holds a
                    # newer token. Nothing changed; the outcome is theirs.
                    LOG.warning("%s: the backend refused the call as fenced: %s", what, exc)
                    self.re_observe(rtype, ident)
                    raise Lost(f"{what}: fenced by the backend: {exc}")
                except Exception as exc:
                    if is_outage(exc) and timing.BEGUN.count == begun:
                        # A read of the step met the database (or the
                        # coordination backend) away before any driver call:
                        # nothing changed, and the request waits for a member.
                        raise before_call(what, exc) from exc
                    log_failure(what, method, exc)
                    if not force:
                        if step.failed is not None:
                            changes = step.failed(row, exc)
                        else:
                            changes = [(model, ident, {"status": row.status},
                                        spec.error_values())]
                        self.write_outcome(_fenced(changes, model, ident, fence), what,
                                           rtype, ident)
                        # The driver's exception is the cause: a handler may
                        # tell its user more (a shrink refused to keep data).
                        raise OperationFailed(f"{what} failed: {exc}") from exc
                    kind = kinds.kind(rtype)
                    LOG.warning("forced %s: the record is deleted although %s failed; %s %s "
                                "may remain on backend %s: clean it up there", what,
                                method or "the driver", kind.what, ident,
                                kind.host_of(self.db, row))
                    result = None
                changes = step.done(row, result)
                fenced = _fenced(changes, model, ident, fence)
                if op.reread is not None and late_outcome.defers(op, changes):  # its holder's
                    scope.pop_all()
                    return fenced
                self.write_outcome(fenced, what, rtype, ident)
                if step.then is not None:
                    step.then(row, changes)
                return changes

    # The operations the table carries out alone --------------------------------

    def by_table(self, op: Op, held: bool = False) -> list[Change]:
        """Carry out ``op`` as the operation table says, through ``run``: its
        spec's statuses and driver method (``methods`` of the status found),
        the method's arguments (``driver_args.ARGS``) and what its success
        writes (``successes.DONE``); the re-read of a share instance brings
        its share (``driver_args.READS``). Every carried operation is this
        one unless a handler of its own does more (``handlers.OWN``)."""
        key = (op.kind, op.action)
        spec, kind = operation_table.SPECS[key], kinds.KINDS[op.kind]
        if op.host and key in driver_args.REQUEST_NAMES_BACKEND:
            host = op.host  # nothing read before the lock
        else:
            row0 = db_api.get(self.db, kind.model, op.ident)
            if row0 is None:
                raise Stale(f"{kind.what} {op.ident} is gone")
            found = kind.host_of(self.db, row0)
            if found is None:
                raise Stale(f"{kind.what} {op.ident} is on no backend")
            # The backend read now is the one the call is for: a row found on
            # another under the lock is Stale (driver_args: a share's delete).
            host, op = found, replace(op, host=op.host or found)
        driver = self.driver_for(host)
        build = driver_args.ARGS[key]
        force = spec.forcible and bool(op.args.get("force"))

        def call(row: kinds.Row, read: object) -> object:
            method = getattr(driver, str(spec.methods[row.status]))
            # Read inside the call: an answer the manager cannot record fails it.
            return successes.changes(self.db, spec, row, method(*build(self.db, op, row, read)),
                                     force)

        def written(row: kinds.Row, made: object) -> list[Change]:
            # None: a failure that counts as the success (a forced delete; a
            # delete that found the object gone).
            return made if isinstance(made, list) else successes.changes(
                self.db, spec, row, None, force)

        def then(row: kinds.Row, changes: list[Change]) -> None:
            # Rules queued meanwhile wait for the end of a copy the driver goes on with.
            if isinstance(row, models.ShareInstance) and not successes.copy_goes_on(changes):
                access_sync.flush_access(self, row)

        return self.run(op, Step(
            kind.model, op.ident, f"{spec.verb} of {kind.what} {op.ident}", call, written,
            force=force, then=then if spec.flushes_access else None,
            read=driver_args.READS.get(key)), held)


def _fenced(changes: list[Change], model: models.ModelClass, ident: str, fence: int | None
            ) -> list[Change]:
    """The outcome's change of the operation's own row is written only
    while the row still has the fencing token the operation took it with
    (doc/reconciliation.rst, "Fencing")."""
    if fence is None:
        return changes
    return [(m, i, {**expected, "fence": fence}, values)
            if m is model and i == ident and "status" in expected else (m, i, expected, values)
            for m, i, expected, values in changes]


def _starting(shape: leases.Terms | None) -> leases.Terms | None:
    """A lease of ``shape`` (``Leases.shapes``) starting now."""
    return None if shape is None else replace(shape, started=time.monotonic())


def _expect(model: type[R], ident: str, row: R | None, expected: tuple[str, ...]) -> R:
    """The re-read row, or Stale if it is gone or not in an expected status."""
    if row is None or row.status not in expected:
        raise Stale(f"{model.__table__.name} {ident} is "
                    f"{getattr(row, 'status', 'gone')}, not {'/'.join(expected)}")
    return row


def by_table(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """The handler of every operation without one of its own (``handlers.py``)."""
    return ops.by_table(op, held)
