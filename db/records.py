"""Rows read on plain tables (SQLAlchemy Core) as records: one attribute
per column, like a mapped object's, without the ORM's cost of building one
(a session, an identity map, instrumented attributes). For the hot reads of
the stack checks and for sharectl's status reads."""

from __future__ import annotations

from collections.abc import Collection
from types import SimpleNamespace
from typing import cast

import sqlalchemy as sa

Record = SimpleNamespace
# A row or a result of any columns.
Row = sa.Row[*tuple[object, ...]]
Result = sa.Result[*tuple[object, ...]]
# A SELECT of any columns (a helper that runs the statements of several).
Query = sa.Select[*tuple[object, ...]]


def columns(table: sa.Table, without: Collection[str] = ()) -> list[sa.Column[object]]:
    return [c for c in table.c if c.name not in without]


def pair(row: Row, parent: sa.Table, child: sa.Table, without: Collection[str] = ()
         ) -> tuple[Record, Record | None]:
    """A row of ``parent`` outer-joined with ``child`` as (parent, child)
    records (``without``: the parent's columns not read); child None when
    the join found none."""
    m = row._mapping
    first = Record(**{c.name: m[c] for c in columns(parent, without)})
    second = Record(**{c.name: m[c] for c in child.c}) if m[child.c.id] is not None else None
    return first, second


def rowcount(result: Result) -> int:
    """The rows an UPDATE or DELETE matched. Executing one returns a
    ``CursorResult``, which ``Session.execute`` is not typed to return."""
    return cast("sa.CursorResult[*tuple[object, ...]]", result).rowcount


def _inserted(result: Result) -> Row:
    made = cast("sa.CursorResult[*tuple[object, ...]]", result).inserted_primary_key
    assert made is not None, "not an INSERT"
    return cast(Row, made)


def new_key(result: Result) -> int:
    """The number the database made as the primary key of an INSERT of one
    row (an autoincrement id: a request's, a stack resource's)."""
    key = _inserted(result)[0]
    assert isinstance(key, int), "not a number the database made"
    return key


def new_keys(result: Result) -> tuple[object, ...]:
    """The primary key columns an INSERT of one row made."""
    return tuple(_inserted(result))
