"""Stack events: one row per status change of a stack or of one of its
resource rows (doc/convergence.rst, "Events").

An event is written by the function of db/stacks.py that makes the change,
after its conditional update won and in its transaction: one ``INSERT ...
SELECT`` of the row as the update left it (no read, one statement), so a
change is never committed without its event nor an event without its change.
Order is the autoincrement ``id`` (AUTOINCREMENT on SQLite: a purged id is
never handed out again), never the time.

The newest ``Database.max_events_per_stack`` events of a stack are kept: the
older ones are deleted in the transaction that records a stack's terminal
status (the end of a traversal, a check), so between two ends the table holds
at most the cap plus the events of the traversal under way. A stack whose
DELETE completed loses all of its events with its rows (``delete_gone_tx``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models, records, tables
from sharemgr.db.engine import Database
from sqlalchemy.orm import Session

Event = models.StackEvent

# Heat's default for its option of the same name (manager/options.py).
DEFAULT_KEPT = 1000

_e, _r, _s = tables.stack_events, tables.stack_resources, tables.stacks

def _resource_events(which: sa.ColumnElement[bool]) -> sa.Insert:
    """The events of the rows ``which`` picks, as their updates left them."""
    return sa.insert(_e).from_select(
        ["stack_id", "resource_name", "resource_id", "physical_id", "action", "status",
         "reason", "traversal_id", "created_at"],
        sa.select(_r.c.stack_id, _r.c.name, _r.c.id, _r.c.physical_id, _r.c.action,
                  _r.c.status, _r.c.status_reason, _r.c.current_traversal,
                  sa.bindparam("now", type_=tables.DateTime))
        .where(which).order_by(_r.c.id))


# Built once with parameters: every started and ended action writes one; a
# report that ends many nodes writes theirs in one.
_RESOURCE_EVENT = _resource_events(_r.c.id == sa.bindparam("rid"))
_RESOURCE_EVENTS = _resource_events(_r.c.id.in_(sa.bindparam("rids", expanding=True)))

_STACK_EVENT = sa.insert(_e).from_select(
    ["stack_id", "action", "status", "reason", "traversal_id", "created_at"],
    sa.select(_s.c.id, _s.c.action, _s.c.status, _s.c.status_reason, _s.c.current_traversal,
              sa.bindparam("now", type_=tables.DateTime))
    .where(_s.c.id == sa.bindparam("sid")))

# The id of the oldest event kept: the cap-th newest of the stack (the
# (stack_id, id) index, read backwards; no count).
_NTH_NEWEST = (sa.select(_e.c.id).where(_e.c.stack_id == sa.bindparam("sid"))
               .order_by(_e.c.id.desc()).limit(1).offset(sa.bindparam("skip")))


def kept(session: Session) -> int:
    """The cap of the database the session is of (``Database.session``
    puts the Database in ``session.info``); 0: keep all."""
    db = session.info.get("database")
    return int(getattr(db, "max_events_per_stack", DEFAULT_KEPT))


def resource_event_tx(session: Session, resource_id: int) -> None:
    """The event of a status change of a stack resource row, as its
    conditional update just left it, in the caller's transaction."""
    session.execute(_RESOURCE_EVENT, {"rid": resource_id, "now": models.utcnow()})


def resource_events_tx(session: Session, resource_ids: Iterable[int]) -> None:
    """:func:`resource_event_tx` of several rows in one statement (in the
    order of their ids)."""
    rids = sorted(set(resource_ids))
    if rids:
        session.execute(_RESOURCE_EVENTS, {"rids": rids, "now": models.utcnow()})


def stack_event_tx(session: Session, stack_id: str, status: str) -> None:
    """The event of a stack's status change, in the caller's transaction; a
    terminal ``status`` (COMPLETE, FAILED) also trims the stack's events to
    the cap (:func:`purge_tx`)."""
    session.execute(_STACK_EVENT, {"sid": stack_id, "now": models.utcnow()})
    if status != vocab.STACK_IN_PROGRESS:
        purge_tx(session, stack_id, kept(session))


def purge_tx(session: Session, stack_id: str, keep: int) -> int:
    """Delete the stack's events older than its ``keep`` newest (0: none
    deleted). Two statements, each on the index: the threshold's id, then a
    range delete below it (MariaDB refuses a DELETE whose subquery reads
    its own table). Returns how many went."""
    if keep <= 0:
        return 0
    oldest = session.execute(_NTH_NEWEST, {"sid": stack_id, "skip": keep - 1}).scalar()
    if oldest is None:
        return 0
    return records.rowcount(session.execute(
        sa.delete(_e).where(_e.c.stack_id == stack_id, _e.c.id < oldest)))


def delete_gone_tx(session: Session, stack_id: str) -> int:
    """Delete every event of the stack if its row is deleted (a DELETE
    that completed): the events go with the stack."""
    gone = sa.exists().where(_s.c.id == stack_id, _s.c.deleted_at.is_not(None))
    return records.rowcount(session.execute(
        sa.delete(_e).where(_e.c.stack_id == stack_id, gone)))


def delete_tx(session: Session, stack_id: str) -> int:
    """Delete every event of the stack (whoever removes a stack's records)."""
    return records.rowcount(session.execute(sa.delete(_e).where(_e.c.stack_id == stack_id)))


# Reading ------------------------------------------------------------------------


def events(db: Database, stack_id: str, resource: str | None = None, after: int = 0,
           limit: int | None = None) -> list[Event]:
    """The stack's events (of resource ``resource`` only, if given) with an
    id above ``after``, oldest first."""
    stmt = sa.select(Event).where(Event.stack_id == stack_id, Event.id > after)
    if resource is not None:
        stmt = stmt.where(Event.resource_name == resource)
    stmt = stmt.order_by(Event.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    with db.reading() as session:
        rows = list(session.scalars(stmt))
        session.expunge_all()
        return rows


def event_get(db: Database, stack_id: str, event_id: int) -> Event | None:
    with db.reading() as session:
        row = session.execute(sa.select(Event).where(
            Event.stack_id == stack_id, Event.id == event_id)).scalar_one_or_none()
        if row is not None:
            session.expunge(row)
        return row


def failures(db: Database, stack_id: str) -> list[models.StackResource]:
    """The stack's resource rows that are FAILED now (Heat's ``stack failures
    list``), by name then id."""
    res = models.StackResource
    stmt = (sa.select(res).where(res.stack_id == stack_id, res.deleted_at.is_(None),
                                 res.status == vocab.STACK_FAILED)
            .order_by(res.name, res.id))
    with db.reading() as session:
        rows = list(session.scalars(stmt))
        session.expunge_all()
        return rows


@dataclass(frozen=True)
class Changes:
    """What one traversal did to each resource name, as its events record
    (:func:`changes`)."""

    added: frozenset[str]
    updated: frozenset[str]
    replaced: frozenset[str]
    deleted: frozenset[str]


def changes(events: Iterable[Event], traversal_id: str) -> Changes:
    """Per resource name, what the traversal ``traversal_id`` did, from its
    resource events (any status: an action begun counts): *replaced*, a
    CREATE of one row and a DELETE of another row of the name; *added*, a
    CREATE without such a DELETE; *deleted*, a DELETE without a CREATE;
    *updated*, an UPDATE (in place) without either. Names with no event
    were left unchanged (settled, or nothing to do)."""
    created: dict[str, set[int]] = {}
    deleted: dict[str, set[int]] = {}
    updated: set[str] = set()
    for e in events:
        if e.traversal_id != traversal_id or e.resource_name is None:
            continue
        rid = e.resource_id or 0
        if e.action == vocab.STACK_CREATE:
            created.setdefault(e.resource_name, set()).add(rid)
        elif e.action == vocab.STACK_DELETE:
            deleted.setdefault(e.resource_name, set()).add(rid)
        elif e.action == vocab.STACK_UPDATE:
            updated.add(e.resource_name)
    replaced = {n for n, rows in created.items() if deleted.get(n, set()) - rows}
    return Changes(
        added=frozenset(set(created) - replaced),
        updated=frozenset(updated - set(created) - set(deleted)),
        replaced=frozenset(replaced),
        deleted=frozenset(set(deleted) - set(created)),
    )
