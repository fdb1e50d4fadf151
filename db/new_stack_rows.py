"""A preparation's new ``stack_resources`` rows, in two plain statements.

Made as mapped objects and flushed, 1,000 new rows were 1,000 INSERTs (the
ORM fetches each autoincrement key alone), and their objects' construction
and their ``requires`` written after cost as much again: about 40 % of a
1,000-share ``stack create``'s preparation (doc/performance.rst). Here
they are one INSERT of many rows whose RETURNING gives each row's key
with its name (unique among them: the order of RETURNING's rows is not
promised, and asking SQLAlchemy to keep it sends SQLite one INSERT per row
again), then one UPDATE per row that requires others, sent together.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models
from sqlalchemy.orm import Session

_T = models.StackResource.__table__


@functools.cache
def _insert() -> sa.Insert:
    return sa.insert(_T).returning(_T.c.id, _T.c.name)


@functools.cache
def _requires() -> sa.Update:
    return (sa.update(_T).where(_T.c.id == sa.bindparam("rid"))
            .values(requires=sa.bindparam("req")))


def insert_tx(session: Session, stack_id: str, template_id: int | None,
              rows: Sequence[tuple[str, str, int | None]]) -> dict[str, int]:
    """New rows in ``INIT COMPLETE`` (not created on a backend yet), as
    ``stacks.resource_new`` makes them, free and requiring nothing: one
    per (name, type, the id of the row it replaces or None), names unique.
    Their ids by name."""
    if not rows:
        return {}
    now = models.utcnow()
    made = session.execute(_insert(), [
        {"stack_id": stack_id, "name": name, "type": type_, "template_id": template_id,
         "properties": {}, "attributes": {}, "action": vocab.STACK_INIT,
         "status": vocab.STACK_COMPLETE, "atomic_key": 0, "engine_id": None,
         "requires": [], "replaces": replaces, "created_at": now}
        for name, type_, replaces in rows])
    return {name: rid for rid, name in made}


def require_tx(session: Session, requires: Mapping[int, Sequence[int]]) -> None:
    """Each row's ``requires`` (row id: the ids it requires, sorted); one
    statement for all of them."""
    if requires:
        session.execute(_requires(), [{"rid": rid, "req": list(req)}
                                      for rid, req in requires.items()])
