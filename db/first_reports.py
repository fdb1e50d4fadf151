"""Many SyncPoints' first reports in one statement.

A point that waits for one sender (most points of a graph: a row's
clean-up waits for its update, each root's own point for that root) is
written once per traversal, from key 0 to 1 with ``{sender: data}``: the
CAS of ``sync_points.cas_tx`` with a known key. A batch's report writes
those of all its nodes together, each still checked against key 0:
``UPDATE sync_points … FROM given … RETURNING`` (the rows one JSON
parameter, ``given_rows.py``), on PostgreSQL and SQLite. Nobody else
writes such a point in its traversal, so the statement's lock order among
them cannot deadlock with another engine's; a point found already written
(its sender reporting again) or gone is left to the caller's read.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sqlalchemy as sa
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import given_rows, models
from sqlalchemy.orm import Session

__all__ = ["first_reports_tx"]

_SP = models.SyncPoint.__table__


def _columns() -> tuple[tuple[str, sa.types.TypeEngine[object]], ...]:
    c = _SP.c
    return (("e", c.entity_id.type), ("t", c.traversal_id.type), ("u", c.is_update.type),
            ("data", c.input_data.type))


@functools.lru_cache(maxsize=8)
def _statement(dialect: sa.Dialect) -> sa.Update:
    # The traversal is each given row's, not a constant: PostgreSQL, which
    # knows nothing of a new traversal's id, would read its points by it.
    c = _SP.c
    given = given_rows.given(dialect, _columns())
    return (sa.update(_SP)
            .where(c.entity_id == given.c.e, c.traversal_id == given.c.t,
                   c.is_update == given.c.u, c.atomic_key == 0,
                   *given_rows.looked_up(dialect, c.entity_id, given.c.e))
            .values(input_data=given.c.data, atomic_key=1, updated_at=sa.bindparam("now"))
            .returning(c.entity_id, c.is_update))


def first_reports_tx(session: Session, traversal_id: str,
                     points: Sequence[tuple[int | str, bool, dict[str, JSONValue]]]
                     ) -> set[tuple[str, bool]] | None:
    """Write each point ``(entity, is_update, {sender: data})`` of
    ``traversal_id`` that no report has written yet; the (entity as text,
    is_update) of those written. None, writing nothing, on a database
    without ``UPDATE … RETURNING`` (MariaDB): the caller writes them one
    by one."""
    if not session.info["database"].update_returning:
        return None
    dialect = session.get_bind().dialect
    given = given_rows.params(dialect, _columns(), [(str(e), traversal_id, bool(u), data)
                                                    for e, u, data in points])
    rows = session.execute(_statement(dialect), {**given, "now": models.utcnow()})
    return {(str(e), bool(u)) for e, u in rows}
