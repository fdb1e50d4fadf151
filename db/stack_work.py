"""SQL of the check-resource workflow (convergence/worker.py) and of
stack resumption: starting and ending a resource's action together with its
physical rows, operation requests, forwarding and resuming check requests.

Conventions as in db/stacks.py: ``_tx`` functions take an open session, the
others open their own transaction; status changes are conditional updates.
Lock order (see db/stacks.py): the ``stacks`` row (shared, in
``begin``), then ``stack_resources`` rows, then physical rows —
which the share operations and the reconciler lock on their own, never
together with stack rows, so no cycle can form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.common.outcome import REPLAN, RETRY, SUPERSEDED, Outcome
from sharemgr.db import (
    api,
    capacity,
    models,
    quiet,
    records,
    resource_locks,
    stack_events,
)
from sharemgr.db import leases as db_leases
from sharemgr.db import stacks as db_stacks
from sharemgr.db.engine import Database
from sharemgr.db.leases import Lease
from sharemgr.db.retry import in_own_transaction, retry_on_conflict
from sqlalchemy.orm import Session, defer

M = models
Change = api.Change

# Stacks ------------------------------------------------------------------------


def stack_head(db: Database, stack_id: str, include_deleted: bool = False) -> M.Stack | None:
    """The stack row without ``current_deps`` (the traversal graph can be
    large; a check loads it once per traversal, not once per node)."""
    stmt = sa.select(M.Stack).options(defer(M.Stack.current_deps)).where(M.Stack.id == stack_id)
    if not include_deleted:
        stmt = stmt.where(M.Stack.deleted_at.is_(None))
    with db.reading() as session:
        row = session.execute(stmt).scalar_one_or_none()
        if row is not None:
            session.expunge(row)
        return row


def check_head(db: Database, stack_id: str, resource_id: int) -> tuple[Any, Any]:
    """The stack row without its graph and the resource row, in one read:
    what a check looks at before it decides anything. On a plain connection:
    an ORM session's set-up and tear-down cost more CPU than the read."""
    with db.connect() as conn:
        return check_head_tx(conn, stack_id, resource_id)


def _check_head_stmt() -> records.Query:
    s, r = M.Stack.__table__, M.StackResource.__table__
    return (sa.select(*records.columns(s, ("current_deps",)), r)
            .select_from(s.outerjoin(r, sa.and_(r.c.id == sa.bindparam("rid"),
                                                r.c.deleted_at.is_(None))))
            .where(s.c.id == sa.bindparam("sid"), s.c.deleted_at.is_(None)))


# Built once with parameters: every check reads its head.
_CHECK_HEAD = _check_head_stmt()


def check_head_tx(session: Session | sa.Connection, stack_id: str, resource_id: int
                  ) -> tuple[Any, Any]:
    """:func:`check_head` in the caller's transaction. One statement on the
    tables (no ORM objects): the stack without its graph, outer-joined with
    the row (a row that is gone reads as None); read-only records."""
    s, r = M.Stack.__table__, M.StackResource.__table__
    found = session.execute(_CHECK_HEAD, {"rid": resource_id, "sid": stack_id}).first()
    return (None, None) if found is None else records.pair(found, s, r, ("current_deps",))


def _check_heads_stmt() -> records.Query:
    s, r = M.Stack.__table__, M.StackResource.__table__
    return (sa.select(*records.columns(s, ("current_deps",)), r)
            .select_from(s.outerjoin(r, sa.and_(
                r.c.stack_id == s.c.id, r.c.deleted_at.is_(None),
                r.c.id.in_(sa.bindparam("rids", expanding=True)))))
            .where(s.c.id.in_(sa.bindparam("sids", expanding=True)), s.c.deleted_at.is_(None)))


# Built once with parameters: a report that takes several checks reads their heads.
_CHECK_HEADS = _check_heads_stmt()


def check_heads_tx(session: Session | sa.Connection, wanted: Sequence[tuple[str, int]]
                   ) -> list[tuple[Any, Any]]:
    """:func:`check_head_tx` of each ``(stack id, resource id)`` in one
    statement, in ``wanted``'s order: a stack that is gone reads as (None,
    None), a row that is gone, or is another stack's, as (stack, None)."""
    if not wanted:
        return []
    s, r = M.Stack.__table__, M.StackResource.__table__
    found = session.execute(_CHECK_HEADS, {"sids": sorted({sid for sid, _ in wanted}),
                                           "rids": sorted({rid for _, rid in wanted})})
    stacks: dict[str, Any] = {}
    rows: dict[tuple[str, int], Any] = {}
    for line in found:
        stack, row = records.pair(line, s, r, ("current_deps",))
        stacks[stack.id] = stack
        if row is not None:
            rows[(stack.id, row.id)] = row
    return [(stacks.get(sid), rows.get((sid, rid)) if sid in stacks else None)
            for sid, rid in wanted]


_FREE_AND_CURRENT = sa.select(M.StackResource.__table__.c.id).where(
    M.StackResource.__table__.c.id.in_(sa.bindparam("rids", expanding=True)),
    M.StackResource.__table__.c.deleted_at.is_(None),
    M.StackResource.__table__.c.engine_id.is_(None),
    M.StackResource.__table__.c.replaced_by.is_(None))


def free_and_current_tx(session: Session | sa.Connection, resource_ids: Iterable[int]
                        ) -> set[int]:
    """Those of the rows that exist, whose lock nobody holds and that
    nothing replaced: what a clean-up node of a row its traversal still
    wants reads before it reports without doing anything. One statement for
    all of them."""
    return set(session.execute(_FREE_AND_CURRENT, {"rids": list(resource_ids)}).scalars())


def stack_deps(db: Database, stack_id: str, traversal_id: str) -> dict[str, JSONValue] | None:
    """``current_deps`` if ``traversal_id`` is still the stack's traversal."""
    with db.reading() as session:
        row = session.execute(
            sa.select(M.Stack.current_deps).where(
                M.Stack.id == stack_id, M.Stack.current_traversal == traversal_id
            )
        ).first()
        return None if row is None else (row[0] or {})


# Starting and ending an action on a locked resource row ---------------------------


# The lease's terms: the caller's own type (manager/leases.py's Terms), given back.
L = TypeVar("L", bound=Lease)


@dataclass(frozen=True)
class Begin(Generic[L]):
    """What starting an action writes besides the row's IN_PROGRESS: physical
    rows to insert (a create), conditional changes of physical rows (the
    transient status of an update or delete, a rename) and the operation's
    request, recorded ``running`` for this engine so that reconciliation
    leaves the resource alone while this engine lives and settles it (and
    abandons the request) if it dies."""

    action: str
    values: dict[str, object] = field(default_factory=dict)
    add: Sequence[models.Base] = ()
    changes: Sequence[Change] = ()
    op: api.NewRequest | None = None
    op_lease: L | None = None  # its lease (``Operations.default_lease``), written with it
    op_taken: int | None = None  # the token its row is inserted with, taken (``Op.taken``)
    claims: Sequence[capacity.Claim] = ()  # pool capacity its rows take (NoRoom)
    conditions: Sequence[quiet.Condition] = ()  # checked after the changes (db/quiet.py)
    event: bool = True  # False: a row never made is let go, as Heat, without events


@dataclass(frozen=True)
class Begun(Generic[L]):
    resource_id: int  # the row the action runs on (a replacement's when replacing)
    op_request_id: int | None
    op_lease: L | None = None  # the lease its request was written with
    op_taken: int | None = None  # the token its row was inserted with, taken
    # The row's ``atomic_key`` while this begin's lock is held, when the
    # begin took it (``lock_key``): its end is written only while the key
    # is still that, not merely while the engine is (another check of this
    # engine may have taken the row again since the lock moved).
    key: int | None = None


class _NotBegun(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.result)
        self.outcome = outcome


def _lock_lost(rid: int) -> Outcome:
    return Outcome.bailed(f"resource {rid}: its lock was taken by another engine")


@retry_on_conflict
def begin(
    db: Database,
    resource_id: int,
    engine_id: str,
    stack_id: str,
    traversal_id: str,
    work: Begin[L],
    replace_template_id: int | None = None,
    replace_requires: Iterable[int] = (),
    replace: bool = False,
    lock_key: int | None = None,
) -> Begun[L] | Outcome:
    """Start ``work`` on a row this engine has locked, in one transaction.

    With ``replace`` a replacement row is made first (``resource_replace_tx``,
    born locked by this engine) and the action starts on it. Returns
    :class:`Begun`, or the outcome of a begin that started nothing, and
    wrote nothing: SUPERSEDED (the traversal is no longer current or ended),
    BAILED (another engine took the row's lock: it thought us dead), REPLAN
    (a physical row changed since the work was planned).

    With ``lock_key`` the row's lock is taken in this same transaction, only
    if nobody holds it and its ``atomic_key`` is still ``lock_key`` (the
    caller planned from the row as it read it; every lock change bumps the
    key, so an unchanged key means an unchanged row), in the statement that
    starts the action; else RETRY, and the caller takes the lock the slow
    way. Not with ``replace``, whose caller holds the lock already."""
    if lock_key is not None and replace:
        raise ValueError("begin: lock_key takes a row's lock to start on it, not to replace it")
    try:
        with db.session() as session:
            if not db_stacks.traversal_is_current_tx(session, stack_id, traversal_id):
                raise _NotBegun(SUPERSEDED)
            rid = resource_id
            if replace:
                old = db_stacks.resource_get_tx(session, resource_id, lock=True)
                if old is None or old.engine_id != engine_id:
                    raise _NotBegun(_lock_lost(resource_id))
                if old.replaced_by is not None:
                    raise _NotBegun(REPLAN)
                new = db_stacks.resource_replace_tx(
                    session, resource_id, engine_id, stack_id, traversal_id,
                    replace_template_id, replace_requires,
                )
                if new is None:
                    raise _NotBegun(REPLAN)
                rid = new.id
            _start_tx(session, rid, engine_id, traversal_id, work, lock_key, work.event)
            if work.add:
                api.insert_rows_tx(session, work.add)
            _changes_tx(session, work)
            return _begun_tx(session, rid, engine_id, work, lock_key)
    except _NotBegun as exc:
        return exc.outcome


@retry_on_conflict
def begin_many(
    db: Database,
    engine_id: str,
    stack_id: str,
    traversal_id: str,
    items: Sequence[tuple[int, Begin[L], int]],
) -> list[Begun[L]] | Outcome:
    """``begin`` of several rows' work, ``(row, work, lock_key)`` each, every
    row's lock taken as its action starts, in one transaction: all of them
    begin, or none does and nothing is written — SUPERSEDED, RETRY (a lock
    moved), REPLAN, or ``capacity.NoRoom`` raised —, and the caller begins
    each alone. Their new rows go in one statement per table, their events
    in one."""
    try:
        with db.session() as session:
            if not db_stacks.traversal_is_current_tx(session, stack_id, traversal_id):
                raise _NotBegun(SUPERSEDED)
            _starts_tx(session, engine_id, traversal_id, items)
            api.insert_rows_tx(session, [row for _rid, work, _key in items for row in work.add])
            for _rid, work, _key in items:
                _changes_tx(session, work)
            stack_events.resource_events_tx(
                session, [rid for rid, work, _key in items if work.event])
            ops = db_leases.running_requests_tx(
                session, engine_id, [None if work.op is None else (work.op, work.op_lease)
                                     for _rid, work, _key in items])
            return [_begun(rid, work, key, op_id)
                    for (rid, work, key), op_id in zip(items, ops, strict=True)]
    except _NotBegun as exc:
        return exc.outcome


def _start_tx(session: Session, rid: int, engine_id: str, traversal_id: str, work: Begin[L],
              lock_key: int | None, event: bool = True) -> None:
    """A row's action IN_PROGRESS (its lock taken with ``lock_key``) and
    the pool capacity its work claims (NoRoom: nothing is written)."""
    if not db_stacks.resource_start_tx(session, rid, engine_id, traversal_id, work.action,
                                       work.values, lock_key=lock_key, event=event):
        raise _NotBegun(_lock_lost(rid) if lock_key is None else RETRY)
    for claim in work.claims:
        capacity.claim_tx(session, claim)


def _starts_tx(session: Session, engine_id: str, traversal_id: str,
               items: Sequence[tuple[int, Begin[L], int]]) -> None:
    """``_start_tx`` of each of ``items``, the rows' starts of one shape in
    one statement (``api.applied_together_tx``), then their claims."""
    starts = [[(db_stacks.Resource, rid, *db_stacks.start_change(
        engine_id, traversal_id, work.action, work.values, key))] for rid, work, key in items]
    together = api.applied_together_tx(session, starts)
    for i, (rid, work, key) in enumerate(items):
        if i not in together:
            _start_tx(session, rid, engine_id, traversal_id, work, key, event=False)
        elif not together[i]:
            raise _NotBegun(RETRY)  # a lock moved: each begins alone
        else:
            for claim in work.claims:
                capacity.claim_tx(session, claim)


def _changes_tx(session: Session, work: Begin[L]) -> None:
    """The work's changes of physical rows, then its plan's conditions:
    REPLAN when either finds a row moved on."""
    for model, ident, expected, values in work.changes:
        if not api.conditional_update_tx(session, model, ident, expected, values):
            raise _NotBegun(REPLAN)
    try:
        quiet.check_tx(session, work.conditions)
    except quiet.Busy:
        raise _NotBegun(REPLAN)  # planned again, the plan's own check refuses


def _begun_tx(session: Session, rid: int, engine_id: str, work: Begin[L],
              lock_key: int | None) -> Begun[L]:
    """The work's operation request, running for this engine: what began."""
    op_id = None
    if work.op is not None:
        op_id = db_leases.running_request_tx(session, engine_id, **work.op,
                                             lease=work.op_lease)
    return _begun(rid, work, lock_key, op_id)


def _begun(rid: int, work: Begin[L], lock_key: int | None, op_id: int | None) -> Begun[L]:
    return Begun(rid, op_id, None if op_id is None else work.op_lease,
                 None if op_id is None else work.op_taken,
                 None if lock_key is None else lock_key + 1)


def end_tx(
    session: Session,
    resource_id: int,
    engine_id: str,
    action: str,
    status: str,
    reason: str | None = None,
    values: Mapping[str, object] | None = None,
    op_request_id: int | None = None,
    op_error: str | None = None,
    changes: Sequence[Change] = (),
    release: bool = False,
    key: int | None = None,
    event: bool = True,
) -> bool:
    """End the row's action (as the lock holder) and record the outcome of
    its operation request, together; False if the lock is no longer ours.
    ``release``: drop the row's lock in the same statement; ``key``: only
    while the row's lock still has that ``atomic_key`` (``Begun.key``);
    ``event=False``: the caller writes its event
    (``stack_events.resource_events_tx``, several rows' in one statement)."""
    if op_request_id is not None:
        finish_request_tx(session, op_request_id, engine_id,
                          vocab.REQUEST_FAILED if op_error else vocab.REQUEST_DONE, op_error)
    for model, ident, expected, vals in changes:
        api.conditional_update_tx(session, model, ident, expected, vals)
    if release:
        values = {**(values or {}), **resource_locks.RELEASED}
    return db_stacks.resource_set_state_tx(
        session, resource_id, engine_id, action, status, reason, values,
        None if key is None else {"atomic_key": key}, event)


end = in_own_transaction(end_tx)


def ends_tx(session: Session, engine_id: str, status: str,
            ends: Sequence[tuple[int, str, Mapping[str, object] | None, bool, int | None]]
            ) -> int | None:
    """Rows' ends ``(id, action, values, release, key)``, each as ``end_tx``
    writes one without a request, changes or event, those of one shape in
    one statement; the first row whose lock was no longer ours (the caller
    rolls back), or None."""
    groups = [[db_stacks.state_change(
        rid, engine_id, action, status, None,
        {**(values or {}), **resource_locks.RELEASED} if release else values,
        None if key is None else {"atomic_key": key})]
        for rid, action, values, release, key in ends]
    return next((end[0] for end, won in zip(ends, api.applied_tx(session, groups), strict=True)
                 if not won), None)


def finish_request_tx(
    session: Session, request_id: int, engine_id: str, status: str, error: str | None = None
) -> bool:
    return finish_requests_tx(session, (request_id,), engine_id, status, error) == 1


def finish_requests_tx(session: Session, request_ids: Iterable[int], engine_id: str,
                       status: str, error: str | None = None) -> int:
    """Finish this engine's running requests ``request_ids`` with one outcome,
    in one conditional UPDATE (each row still checked as running for this
    engine); how many it finished."""
    ids = sorted(set(request_ids))
    if not ids:
        return 0
    params = {"ids": ids, "engine": engine_id, "status": status, "error": error,
              "now": M.utcnow()}
    return records.rowcount(session.execute(_FINISH, params))


# Built once with parameters (every check finishes its requests); a plain
# UPDATE on the table (see api.conditional_update_tx).
_FINISH = (sa.update(M.Request.__table__)
           .where(M.Request.__table__.c.id.in_(sa.bindparam("ids", expanding=True)),
                  M.Request.__table__.c.engine_id == sa.bindparam("engine"),
                  M.Request.__table__.c.status == vocab.REQUEST_RUNNING)
           .values(status=sa.bindparam("status"), error=sa.bindparam("error"),
                   finished_at=sa.bindparam("now")))


def running_check_tx(session: Session, engine_id: str, resource_id: int, args: models.RequestArgs
                     ) -> int:
    """A ``check_resource`` request claimed by this engine as it is written:
    the engine runs it at once, in the thread that made the node ready; the
    row is the durable record (the watchdog abandons it, and retriggers the
    node, if the engine dies)."""
    return db_leases.running_request_tx(session, engine_id, vocab.STACK_RESOURCE,
                                        str(int(resource_id)), vocab.ACTION_CHECK, None, args)


@retry_on_conflict
def finish_request(db: Database, request_id: int, engine_id: str, status: str,
                   error: str | None = None) -> bool:
    with db.session() as session:
        return finish_request_tx(session, request_id, engine_id, status, error)


@retry_on_conflict
def unreplace(db: Database, resource_id: int, engine_id: str, replaced_by: int) -> bool:
    """Make a replaced row current again (a rollback back to it): clear its
    ``replaced_by`` as its lock holder. Its replacement's clean-up then
    deletes the replacement instead of this row."""
    with db.session() as session:
        return db_stacks.resource_update_tx(
            session, resource_id, {"engine_id": engine_id, "replaced_by": replaced_by},
            {"replaced_by": None},
        )


# Requests: forwarding and resuming checks -------------------------------------------


@retry_on_conflict
def forward_check(db: Database, request: M.Request, host: str, note: str) -> int:
    """A copy of a check request for ``host`` (the engines that serve it)."""
    with db.session() as session:
        args = {**(request.args or {}), "forwarded_from": request.id, "note": note}
        return api.request_add_tx(
            session, request.resource_type, request.resource_id, request.action, host, args
        ).id


@retry_on_conflict
def stack_heads(db: Database) -> list[M.Stack]:
    """Every live stack without its graph: what the self-healing round looks
    at every period (a graph of 10,000 resources is a JSON of a megabyte
    decoded at each read)."""
    stmt = (sa.select(M.Stack).options(defer(M.Stack.current_deps))
            .where(M.Stack.deleted_at.is_(None)).order_by(M.Stack.created_at, M.Stack.id))
    with db.reading() as session:
        rows = list(session.scalars(stmt))
        for row in rows:
            session.expunge(row)
        return rows


@retry_on_conflict
def stack_requests(db: Database, stack_id: str, traversal_id: str | None = None
                   ) -> list[M.Request]:
    """The check requests of a stack (one traversal's, if given), oldest first.
    Filtered in Python: ``args`` is JSON, queried the same way on every
    database; the callers are tests."""
    stmt = sa.select(M.Request).where(
        M.Request.resource_type == vocab.STACK_RESOURCE, M.Request.action == vocab.ACTION_CHECK
    ).order_by(M.Request.id)
    with db.reading() as session:
        rows = list(session.scalars(stmt))
    return [r for r in rows if (r.args or {}).get("stack_id") == stack_id
            and (traversal_id is None or r.args.get("traversal") == traversal_id)]
