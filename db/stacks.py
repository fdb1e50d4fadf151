"""Stacks, their templates and their resource rows (the convergence DB API).

Conventions (as db/api.py): functions take the ``Database`` first; ``_tx``
variants take an open ``Session`` so a caller can group writes into one
transaction. Every state change is a conditional UPDATE that reports whether
this caller won.

The rows' locks are in ``resource_locks.py`` (Heat's model) and the purge
of finished rows in ``stack_purge.py``.

Lock order: ``sync_points`` rows, then the ``stacks`` row, then
``stack_resources`` rows. Among the points themselves, a delete of all of a
stack's (a new traversal, a failure) locks them in the order the database
scans them, which a report's may not be: the database ends one of the two
(PostgreSQL's deadlock, MariaDB's), and each such transaction runs again
whole (``retry_on_conflict``: ``convergence/lifecycle.py``'s, the report's
own). :func:`traversal_is_current_tx` takes a
shared lock on the stack row and traversal preparation an exclusive one, so a
worker that checks "my traversal is still current" and then starts an action
in the same transaction cannot interleave with a preparation that is about to
supersede it.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import api, models, records, stack_events
from sharemgr.db.engine import Database
from sharemgr.db.retry import in_own_transaction, retry_on_conflict
from sqlalchemy.orm import Session

Stack = models.Stack
Resource = models.StackResource

# stack_templates.stack_id comes with migration 0002; a Core view of the
# table lets this module use it whether or not the ORM model declares it.
TEMPLATES = sa.table(
    "stack_templates",
    sa.column("id", sa.Integer),
    sa.column("stack_id", sa.String),
)


class StackNotFound(LookupError):
    pass


class StackExists(ValueError):
    pass


# Stacks ----------------------------------------------------------------------


def stack_create_tx(session: Session, name: str, disable_rollback: bool = False) -> Stack:
    """A new stack row in ``INIT COMPLETE``, without template or traversal;
    preparing its CREATE traversal stores both. Raises StackExists if a
    stack of that name exists (deleted stacks excepted)."""
    exists = session.execute(
        sa.select(Stack.id).where(Stack.name == name, Stack.deleted_at.is_(None)).limit(1)
    ).first()
    if exists:
        raise StackExists(f"a stack named {name!r} exists already ({exists[0]})")
    stack = Stack(
        name=name,
        action=vocab.STACK_INIT,
        status=vocab.STACK_COMPLETE,
        current_deps={},
        disable_rollback=disable_rollback,
    )
    session.add(stack)
    session.flush()
    return stack


def stack_get_tx(
    session: Session, stack_id: str, lock: str | None = None, include_deleted: bool = False
) -> Stack | None:
    """``lock``: None, ``"share"`` (FOR SHARE) or ``"update"`` (FOR UPDATE);
    ignored on SQLite, whose transactions are serialised anyway."""
    stmt = sa.select(Stack).where(Stack.id == stack_id)
    if not include_deleted:
        stmt = stmt.where(Stack.deleted_at.is_(None))
    if lock:
        stmt = stmt.with_for_update(read=lock == "share")
    return session.execute(
        stmt.execution_options(populate_existing=True)
    ).scalar_one_or_none()


@retry_on_conflict
def stack_get(db: Database, stack_id: str, include_deleted: bool = False) -> Stack | None:
    with db.session() as session:
        return stack_get_tx(session, stack_id, include_deleted=include_deleted)


@retry_on_conflict
def stack_get_by_name(db: Database, name: str) -> Stack | None:
    with db.session() as session:
        return session.execute(
            sa.select(Stack)
            .where(Stack.name == name, Stack.deleted_at.is_(None))
            .order_by(Stack.created_at.desc())
            .limit(1)
        ).scalar_one_or_none()


def stack_lookup(db: Database, name_or_id: str) -> Stack:
    """By name first, then by id. Raises StackNotFound."""
    stack = stack_get_by_name(db, name_or_id) or stack_get(db, name_or_id)
    if stack is None:
        raise StackNotFound(f"no stack named or with id {name_or_id!r}")
    return stack


@retry_on_conflict
def stack_list(db: Database, include_deleted: bool = False) -> list[Stack]:
    stmt = sa.select(Stack).order_by(Stack.created_at, Stack.id)
    if not include_deleted:
        stmt = stmt.where(Stack.deleted_at.is_(None))
    with db.session() as session:
        return list(session.scalars(stmt))


def stack_swap_traversal_tx(
    session: Session,
    stack_id: str,
    previous: str | None,
    new: str,
    values: api.Columns | None = None,
    event: bool = True,
) -> bool:
    """``UPDATE stacks SET current_traversal=:new, <values> WHERE id=:id AND
    current_traversal=:previous`` (IS NULL for a stack that never had one).
    True if this caller won. A ``status`` in ``values`` is recorded as an
    event (unless ``event`` is False: the caller records it)."""
    won = api.conditional_update_tx(
        session,
        Stack,
        stack_id,
        {"current_traversal": previous, "deleted_at": None},
        {**(values or {}), "current_traversal": new},
    )
    if won and event and values and "status" in values:
        stack_events.stack_event_tx(session, stack_id, str(values["status"]))
    return won


# Two columns, not the row (its graph, current_deps, can be large); on the
# table, built once with a parameter (every begin runs it).
_HEAD = sa.select(Stack.__table__.c.current_traversal, Stack.__table__.c.status).where(
    Stack.__table__.c.id == sa.bindparam("id"), Stack.__table__.c.deleted_at.is_(None))
_HEAD_LOCKED = _HEAD.with_for_update(read=True)


def traversal_is_current_tx(session: Session, stack_id: str, traversal_id: str,
                            lock: bool = True) -> bool:
    """Whether ``traversal_id`` is the stack's current traversal, holding a
    shared lock on the stack row until the transaction ends: a write made
    after this check in the same transaction cannot race a preparation that
    would supersede the traversal. ``lock=False``: a plain read, for a
    caller that already holds SyncPoints (they are locked before the stack
    row) and needs no more than a check would read."""
    head = session.execute(_HEAD_LOCKED if lock else _HEAD, {"id": stack_id}).first()
    # A traversal that ended FAILED (a timeout, a cancel without rollback) is
    # not current either: its checks stop at their next step.
    return (head is not None and head.current_traversal == traversal_id
            and head.status == vocab.STACK_IN_PROGRESS)


def traversal_is_current(db: Database, stack_id: str, traversal_id: str) -> bool:
    """``traversal_is_current_tx`` as a plain read, for a check that waits
    (a share's migration) and stops once its traversal is not current."""
    with db.session() as session:
        return traversal_is_current_tx(session, stack_id, traversal_id, lock=False)


def stack_set_status_tx(
    session: Session,
    stack_id: str,
    traversal_id: str,
    status: str,
    reason: str | None = None,
    expected_status: str | Iterable[str] = vocab.STACK_IN_PROGRESS,
    event: bool = True,
) -> bool:
    """End (or fail) the stack's current traversal: set ``status`` only if
    ``traversal_id`` is still current and the status is ``expected_status``.
    A DELETE that completes also soft-deletes the stack row. True if won;
    the change is recorded as an event (``event`` False: the caller records
    it later in the transaction, ``stack_events.stack_event_tx``)."""
    now = models.utcnow()
    values: dict[str, object] = {"status": status, "status_reason": reason}
    if status == vocab.STACK_COMPLETE:
        values["deleted_at"] = sa.case((Stack.action == vocab.STACK_DELETE, now), else_=None)
    expected = expected_status if isinstance(expected_status, str) else tuple(expected_status)
    won = api.conditional_update_tx(
        session,
        Stack,
        stack_id,
        {"current_traversal": traversal_id, "status": expected, "deleted_at": None},
        values,
    )
    if won and event:
        stack_events.stack_event_tx(session, stack_id, status)
    return won


@retry_on_conflict
def stack_mark_checked(db: Database, stack_id: str, traversal_id: str | None, status: str,
                       reason: str | None) -> bool:
    """Record a stack check (CHECK COMPLETE/FAILED) if the stack still is at
    ``traversal_id``, COMPLETE (or checked before) and not deleted. The
    checked template completed: it stays the rollback target."""
    expected: dict[str, object] = {"current_traversal": traversal_id, "deleted_at": None,
                                "status": (vocab.STACK_COMPLETE, vocab.STACK_FAILED)}
    with db.session() as session:
        stack = stack_get_tx(session, stack_id, lock="update")
        if stack is None or (stack.action != vocab.STACK_CHECK
                             and stack.status != vocab.STACK_COMPLETE):
            return False
        won = api.conditional_update_tx(
            session, Stack, stack_id, expected,
            {"action": vocab.STACK_CHECK, "status": status, "status_reason": reason,
             "prev_template_id": stack.template_id})
        if won:
            stack_events.stack_event_tx(session, stack_id, status)
        return won


# Templates ---------------------------------------------------------------------


def template_create_tx(session: Session, template: dict[str, JSONValue],
                       stack_id: str | None = None) -> int:
    row = models.StackTemplate(template=template)
    session.add(row)
    session.flush()
    if stack_id is not None:
        session.execute(
            sa.update(TEMPLATES).where(TEMPLATES.c.id == row.id).values(stack_id=stack_id)
        )
    return row.id


def template_get_tx(session: Session, template_id: int) -> dict[str, JSONValue] | None:
    return session.execute(
        sa.select(models.StackTemplate.template).where(models.StackTemplate.id == template_id)
    ).scalar_one_or_none()


def template_get(db: Database, template_id: int) -> dict[str, JSONValue] | None:
    with db.reading() as session:
        return template_get_tx(session, template_id)



# Resource rows -------------------------------------------------------------------


def resource_new(
    stack_id: str,
    name: str,
    type_: str,
    template_id: int | None,
    requires: Iterable[int] = (),
    replaces: int | None = None,
    engine_id: str | None = None,
) -> Resource:
    """An unsaved row in ``INIT COMPLETE``: not created on a backend yet."""
    return Resource(
        stack_id=stack_id,
        name=name,
        type=type_,
        template_id=template_id,
        properties={},
        attributes={},
        action=vocab.STACK_INIT,
        status=vocab.STACK_COMPLETE,
        atomic_key=0 if engine_id is None else 1,
        engine_id=engine_id,
        requires=sorted(set(requires)),
        replaces=replaces,
    )


def resources_add_tx(session: Session, rows: Iterable[Resource]) -> list[Resource]:
    """Insert rows made by :func:`resource_new` with one flush (the ORM
    batches the INSERTs); their ids are set on return."""
    rows = list(rows)
    session.add_all(rows)
    session.flush()
    return rows


def resource_get_tx(session: Session, resource_id: int, lock: bool = False) -> Resource | None:
    stmt = sa.select(Resource).where(Resource.id == resource_id, Resource.deleted_at.is_(None))
    if lock:
        stmt = stmt.with_for_update()
    return session.execute(
        stmt.execution_options(populate_existing=True)
    ).scalar_one_or_none()


def resource_get(db: Database, resource_id: int) -> Resource | None:
    with db.reading() as session:
        return resource_get_tx(session, resource_id)


def resource_list_tx(session: Session, stack_id: str) -> list[Resource]:
    """Every extant row of the stack (all versions of each name), by id."""
    return list(
        session.scalars(
            sa.select(Resource)
            .where(Resource.stack_id == stack_id, Resource.deleted_at.is_(None))
            .order_by(Resource.id)
            .execution_options(populate_existing=True)
        )
    )


@retry_on_conflict
def resource_list(db: Database, stack_id: str) -> list[Resource]:
    with db.session() as session:
        return resource_list_tx(session, stack_id)


def resource_name_count(db: Database, stack_id: str) -> int:
    """How many resource names the stack's extant rows have (one statement:
    ``stack show`` of a 10,000-resource stack built every row to count)."""
    with db.reading() as session:
        return session.execute(
            sa.select(sa.func.count(sa.distinct(Resource.name)))
            .where(Resource.stack_id == stack_id, Resource.deleted_at.is_(None))).scalar_one()


def resource_update_tx(
    session: Session, resource_id: int, expected: api.Columns, values: api.Columns
) -> bool:
    """Conditional update: ``values`` only if the row matches ``expected``
    (e.g. ``{"engine_id": me, "action": "CREATE", "status": "IN_PROGRESS"}``)."""
    return api.conditional_update_tx(
        session, Resource, resource_id, {**expected, "deleted_at": None}, dict(values)
    )


def resource_set_state_tx(
    session: Session,
    resource_id: int,
    engine_id: str,
    action: str,
    status: str,
    reason: str | None = None,
    values: api.Columns | None = None,
    expected: api.Columns | None = None,
    event: bool = True,
) -> bool:
    """Set action/status (and ``values``) as the lock holder: the write
    happens only while ``engine_id`` holds the row's lock (and it matches
    ``expected``). A write that won is recorded as an event, unless
    ``event`` is False (the caller knows action and status are unchanged)."""
    won = api.conditional_update_tx(session, *state_change(
        resource_id, engine_id, action, status, reason, values, expected))
    if won and event:
        stack_events.resource_event_tx(session, resource_id)
    return won


def state_change(resource_id: int, engine_id: str, action: str, status: str,
                 reason: str | None = None, values: api.Columns | None = None,
                 expected: api.Columns | None = None) -> api.Change:
    """``resource_set_state_tx``'s conditional change, for a caller that writes
    many rows' together (``stack_work.ends_tx``)."""
    return (Resource, resource_id, {**(expected or {}), "engine_id": engine_id, "deleted_at": None},
            {**(values or {}), "action": action, "status": status, "status_reason": reason})


resource_set_state = in_own_transaction(resource_set_state_tx)


def resource_start_tx(
    session: Session,
    resource_id: int,
    engine_id: str,
    traversal_id: str,
    action: str,
    values: api.Columns | None = None,
    lock_key: int | None = None,
    event: bool = True,
) -> bool:
    """``action IN_PROGRESS`` on a row this engine holds; the caller checked
    in the same transaction that the traversal is current
    (``traversal_is_current_tx``, as ``stack_work.begin`` does). False if
    the lock is no longer ours. With ``lock_key``: take the lock in the same
    statement, only if nobody holds it and its key is still ``lock_key``.
    ``event=False``: the caller writes its event (several rows' in one)."""
    if lock_key is None:
        return resource_set_state_tx(
            session, resource_id, engine_id, action, vocab.STACK_IN_PROGRESS, None,
            {**(values or {}), "current_traversal": traversal_id}, event=event)
    won = api.conditional_update_tx(session, Resource, resource_id, *start_change(
        engine_id, traversal_id, action, values, lock_key))
    if won and event:
        stack_events.resource_event_tx(session, resource_id)
    return won


def start_change(engine_id: str, traversal_id: str, action: str,
                 values: api.Columns | None, lock_key: int) -> tuple[api.Columns, api.Columns]:
    """``resource_start_tx``'s change of a row whose lock it takes with
    ``lock_key``: (what the row must have, what it is given)."""
    return ({"engine_id": None, "atomic_key": lock_key, "deleted_at": None},
            {**(values or {}), "current_traversal": traversal_id, "engine_id": engine_id,
             "atomic_key": lock_key + 1, "action": action,
             "status": vocab.STACK_IN_PROGRESS, "status_reason": None})


def resource_replace_tx(
    session: Session,
    resource_id: int,
    engine_id: str,
    stack_id: str,
    traversal_id: str,
    template_id: int | None,
    requires: Iterable[int] = (),
    lock: bool = True,
) -> Resource | None:
    """Make a replacement row for a row this engine has locked, atomically:
    the traversal must still be current and the row not replaced yet; the
    new row gets ``replaces`` = old id, the old row ``replaced_by`` = new id,
    both in this transaction (Heat did these in separate steps and could
    leave a replacement nobody pointed at). With ``lock`` the new row is
    born locked by this engine. None if any condition fails."""
    if not traversal_is_current_tx(session, stack_id, traversal_id):
        return None
    old = resource_get_tx(session, resource_id, lock=True)
    if old is None or old.engine_id != engine_id or old.replaced_by is not None:
        return None
    new = resources_add_tx(
        session,
        [
            resource_new(
                stack_id, old.name, old.type, template_id, requires, replaces=old.id,
                engine_id=engine_id if lock else None,
            )
        ],
    )[0]
    values: dict[str, object] = {"replaced_by": new.id}
    if old.status == vocab.STACK_IN_PROGRESS:
        # Its action was cut short (a crash) and its physical resource
        # failed: that action is over, whatever happens to the replacement.
        values.update(status=vocab.STACK_FAILED, status_reason=f"{old.action} cut short; "
                      f"replaced by resource {new.id}")
    if not resource_update_tx(
        session, old.id, {"engine_id": engine_id, "replaced_by": None}, values
    ):
        # Cannot happen: the row is locked FOR UPDATE above (and SQLite
        # serialises transactions); raising rolls the insert back with it.
        raise RuntimeError(f"resource {old.id} changed while its holder replaced it")
    if "status" in values:
        stack_events.resource_event_tx(session, old.id)
    return new


def resources_settle_tx(session: Session, resource_ids: Iterable[int], template_id: int,
                        chunk: int = 500) -> int:
    """Record ``template_id`` on rows a preparation settled (their update
    node would change nothing else): one UPDATE per ``chunk`` rows, only
    rows nobody holds. Returns the rows updated."""
    ids = list(resource_ids)
    done = 0
    for i in range(0, len(ids), chunk):
        result = session.execute(
            sa.update(Resource)
            .where(Resource.id.in_(ids[i:i + chunk]), Resource.engine_id.is_(None),
                   Resource.deleted_at.is_(None))
            .values(template_id=template_id)
            .execution_options(synchronize_session=False))
        done += records.rowcount(result)
    return done
