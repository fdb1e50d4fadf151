"""Stacks that let go of their resources, or take existing ones (doc/convergence.rst,
"Keeping what matters"): mark-unhealthy, abandon and adopt.

Every status change is a conditional UPDATE in a transaction that holds
the stack row, so none interleaves with a traversal's preparation (which
locks it FOR UPDATE; the lock order of db/stacks.py is kept: SyncPoints,
then the stack row, then resource rows).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import api, models, stack_events, sync_points
from sharemgr.db import stacks as db_stacks
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import Session

Resource = models.StackResource

# The row of each physical type an adopt locks while it checks nobody owns it.
PHYSICAL_MODEL: Mapping[str, type[models.Base]] = {
    vocab.SHARE: models.Share, vocab.SNAPSHOT: models.ShareSnapshot,
    vocab.REPLICA: models.ShareInstance, vocab.SHARE_SERVER: models.ShareServer,
    vocab.SHARE_GROUP: models.ShareGroup, vocab.GROUP_SNAPSHOT: models.ShareGroupSnapshot,
}

# The resource actions a row may be marked unhealthy from: it was made.
_MARKABLE = (vocab.STACK_CREATE, vocab.STACK_UPDATE, vocab.STACK_CHECK)


class Refused(ValueError):
    """The change was not made (the message says why); nothing was written."""


# Mark unhealthy ---------------------------------------------------------------------


def _stack_at_rest(session: Session, stack_id: str, lock: str, what: str) -> models.Stack:
    stack = db_stacks.stack_get_tx(session, stack_id, lock=lock)
    if stack is None:
        raise Refused(f"stack {stack_id} does not exist")
    if stack.status == vocab.STACK_IN_PROGRESS:
        raise Refused(f"stack {stack.name} is {stack.action} {stack.status}: {what} once "
                      "the traversal has ended (or cancel it)")
    return stack


@retry_on_conflict
def resource_mark_unhealthy(db: Database, stack_id: str, resource_id: int, reason: str | None,
                            reset: bool = False) -> None:
    """Mark the row CHECK FAILED with ``reason`` (Heat's mark-unhealthy) —
    its next update node replaces it — or, with ``reset``, a row so marked
    CHECK COMPLETE again. Only while the stack has no traversal in progress
    and nobody holds the row. Raises Refused."""
    with db.session() as session:
        stack = _stack_at_rest(session, stack_id, "share", "mark a resource")
        if reset:
            expected: dict[str, object] = {"action": vocab.STACK_CHECK,
                                           "status": vocab.STACK_FAILED}
            values: dict[str, object] = {"status": vocab.STACK_COMPLETE, "status_reason": None}
        else:
            expected = {"action": _MARKABLE, "status": (vocab.STACK_COMPLETE, vocab.STACK_FAILED)}
            values = {"action": vocab.STACK_CHECK, "status": vocab.STACK_FAILED,
                      "status_reason": reason or "marked unhealthy"}
        won = db_stacks.resource_update_tx(
            session, resource_id, {**expected, "stack_id": stack.id, "engine_id": None},
            {**values, "atomic_key": api.PLUS_ONE})
        if won:  # an event as any status change (db/stack_events.py)
            stack_events.resource_event_tx(session, resource_id)
        else:
            row = db_stacks.resource_get_tx(session, resource_id)
            state = "gone" if row is None else f"{row.action} {row.status}" + (
                f", held by {row.engine_id}" if row.engine_id else "")
            raise Refused(f"resource {resource_id} of stack {stack.name} is {state}: "
                          + ("not marked unhealthy" if reset else "it cannot be marked"))


# Abandon -----------------------------------------------------------------------------


@dataclass
class Abandoned:
    """What an abandon removed: the stack row, its current template and
    every resource row (their physical resources are left alone)."""

    stack: models.Stack
    template: dict[str, JSONValue] | None
    rows: list[models.StackResource] = field(default_factory=list)


@retry_on_conflict
def abandon(db: Database, stack_id: str) -> Abandoned:
    """Delete the stack's records — SyncPoints, pending requests of its
    checks and stack checks, resource rows, templates, the stack row — in
    one transaction, leaving every physical resource as it is. Refused
    (nothing written) while a traversal is in progress or a row's lock is
    held (a check still finishing)."""
    with db.session() as session:
        sync_points.delete_all_tx(session, stack_id)
        stack = _stack_at_rest(session, stack_id, "update", "abandon it")
        rows = db_stacks.resource_list_tx(session, stack_id)
        held = [r for r in rows if r.engine_id is not None]
        if held:
            raise Refused(f"stack {stack.name}: resource {held[0].name} is held by "
                          f"{held[0].engine_id}; try again once it is released")
        template = None if stack.template_id is None else \
            db_stacks.template_get_tx(session, stack.template_id)
        R = models.Request
        session.execute(sa.delete(R).where(
            R.status == vocab.REQUEST_PENDING,
            sa.or_(sa.and_(R.resource_type == vocab.STACK_RESOURCE,
                           R.resource_id.in_([str(r.id) for r in rows] or [""])),
                   sa.and_(R.resource_type == vocab.STACK, R.resource_id == stack.id)),
        ).execution_options(synchronize_session=False))
        session.execute(sa.delete(Resource).where(Resource.stack_id == stack_id)
                        .execution_options(synchronize_session=False))
        session.execute(sa.delete(models.Stack).where(models.Stack.id == stack_id)
                        .execution_options(synchronize_session=False))
        T = models.StackTemplate.__table__
        session.execute(sa.delete(T).where(T.c.stack_id == stack_id))
        stack_events.delete_tx(session, stack_id)
        for obj in (stack, *rows):
            session.expunge(obj)
        return Abandoned(stack, template, rows)


# Adopt -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Adopted:
    """A resource an adopt makes a row for, as it exists already."""

    name: str
    type: str
    physical_id: str
    properties: Mapping[str, object]  # JSON values
    attributes: Mapping[str, object]
    requires: Sequence[str] = ()  # names of the resources it requires


def owners_tx(session: Session, found: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(type, physical id) -> the name of the live stack whose extant row
    has it, for those of ``found`` some stack has."""
    if not found:
        return {}
    S = models.Stack
    rows = session.execute(
        sa.select(Resource.type, Resource.physical_id, S.name)
        .join(S, S.id == Resource.stack_id)
        .where(Resource.physical_id.in_(sorted({p for _t, p in found})),
               Resource.deleted_at.is_(None), S.deleted_at.is_(None),
               sa.not_(sa.and_(Resource.action == vocab.STACK_DELETE,
                               Resource.status == vocab.STACK_COMPLETE)))).all()
    wanted = set(found)
    return {(t, p): name for t, p, name in rows if p is not None and (t, p) in wanted}


def owners(db: Database, found: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    with db.reading() as session:
        return owners_tx(session, found)


@retry_on_conflict
def adopt(db: Database, name: str, template: dict[str, JSONValue], resources: Sequence[Adopted],
          disable_rollback: bool = False, timeout_seconds: int | None = None) -> models.Stack:
    """A COMPLETE stack over existing physical resources, in one
    transaction: the physical rows are locked (FOR UPDATE) and checked to
    be no live stack's under that lock, so two adopts of one share cannot
    both win. Raises StackExists, Refused."""
    with db.session() as session:
        for type_, ids in _by_type(resources).items():
            model = PHYSICAL_MODEL[type_]
            col = model.__table__.c.id
            session.execute(sa.select(col).where(col.in_(ids)).with_for_update()).all()
        taken = owners_tx(session, [(r.type, r.physical_id) for r in resources])
        if taken:
            (type_, pid), other = sorted(taken.items())[0]
            raise Refused(f"{type_} {pid} belongs to stack {other}")
        stack = db_stacks.stack_create_tx(session, name, disable_rollback)
        template_id = db_stacks.template_create_tx(session, template, stack.id)
        rows = {r.name: db_stacks.resource_new(stack.id, r.name, r.type, template_id)
                for r in resources}
        for r in resources:
            row = rows[r.name]
            row.physical_id, row.action = r.physical_id, vocab.STACK_CREATE
            row.properties = cast("dict[str, JSONValue]", dict(r.properties))
            row.attributes = cast("dict[str, JSONValue]", dict(r.attributes))
        db_stacks.resources_add_tx(session, rows.values())
        for r in resources:
            rows[r.name].requires = sorted(rows[d].id for d in r.requires)
        session.flush()
        traversal = str(uuid.uuid4())
        won = db_stacks.stack_swap_traversal_tx(session, stack.id, None, traversal, {
            "action": vocab.STACK_CREATE, "status": vocab.STACK_COMPLETE,
            "status_reason": f"Stack ADOPT completed ({len(resources)} resources adopted)",
            "template_id": template_id, "current_deps": _deps(rows, resources),
            "traversal_started_at": api.DB_NOW, "timeout_seconds": timeout_seconds or None})
        if not won:  # the row was inserted above, in this transaction
            raise RuntimeError(f"stack {stack.id} changed while it was adopted")
        session.refresh(stack)
        session.expunge(stack)
        return stack


def _by_type(resources: Sequence[Adopted]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in resources:
        out.setdefault(r.type, []).append(r.physical_id)
    return out


def _deps(rows: Mapping[str, Resource], resources: Sequence[Adopted]) -> dict[str, object]:
    """The graph ``current_deps`` holds (``Graph.to_json``'s form): the
    update nodes, each after the ones it requires, as a create would have
    left it (``stack show``'s progress counts its resources)."""
    order = {r.name: i for i, r in enumerate(resources)}
    return {"nodes": [[rows[r.name].id, True] for r in resources],
            "edges": [[order[d], order[r.name]] for r in resources for d in r.requires]}


__all__ = ["Abandoned", "Adopted", "Refused", "abandon", "adopt", "owners",
           "resource_mark_unhealthy"]
