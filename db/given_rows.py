"""Many rows' values handed to one statement as one JSON parameter.

A ``VALUES`` list of N rows is N × columns bound parameters, and SQLAlchemy
cannot cache such a statement: it is compiled again for every batch, and
that compilation was about half of a reconciliation pass's CPU (doc/
performance.rst). Here the rows are one JSON document, unpacked by the
database (SQLite's ``json_each``, PostgreSQL's ``jsonb_to_recordset``):
the statement has the same text for any number of rows and is compiled once.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

# The parameter the document is bound to.
PARAM = "given_rows"


def _ready(dialect: sa.Dialect, type_: sa.types.TypeEngine[object]
           ) -> Callable[[object], object]:
    # What a plain UPDATE would send: the column type's own conversion (a
    # JSON column's text, which PostgreSQL casts back to json in the
    # statement, so None is JSON's null there, not SQL's NULL; SQLite's
    # datetime text, a bool's 0/1); a datetime the driver would adapt goes
    # as ISO text, which PostgreSQL's record column reads as a timestamp.
    process = type_.dialect_impl(dialect).bind_processor(dialect)

    def ready(value: object) -> object:
        value = process(value) if process else value
        return value.isoformat() if isinstance(value, datetime.datetime) else value
    return ready


def _is_json(dialect: sa.Dialect, type_: sa.types.TypeEngine[object]) -> bool:
    return isinstance(type_.dialect_impl(dialect), sa.JSON)


@functools.lru_cache(maxsize=128)
def given(dialect: sa.Dialect, columns: tuple[tuple[str, sa.types.TypeEngine[object]], ...]
          ) -> sa.FromClause:
    """A FROM clause named ``given`` with ``columns`` (name, type), its rows
    the parameters ``params`` gives, built once per shape: a
    statement built on it is too, and its cache key is computed once.
    SQLite and PostgreSQL only."""
    param = sa.bindparam(PARAM, type_=sa.Text)
    if dialect.name == "sqlite":
        each = sa.func.json_each(param).table_valued("value")
        return sa.select(*[
            sa.func.json_extract(each.c.value, sa.literal_column(f"'$[{i}]'"), type_=t).label(n)
            for i, (n, t) in enumerate(columns)]).select_from(each).cte("given")
    if dialect.name == "postgresql":
        records = sa.func.jsonb_to_recordset(sa.cast(param, JSONB)).table_valued(
            *[sa.column(n, sa.Text() if _is_json(dialect, t) else t) for n, t in columns]
        ).render_derived(name="rows", with_types=True)
        return sa.select(*[
            (sa.cast(records.c[n], t) if _is_json(dialect, t) else records.c[n]).label(n)
            for n, t in columns]).select_from(records).cte("given")
    raise ValueError(f"no JSON rows on {dialect.name}")


@functools.lru_cache(maxsize=128)
def _readies(dialect: sa.Dialect, columns: tuple[tuple[str, sa.types.TypeEngine[object]], ...]
             ) -> tuple[Callable[[object], object], ...]:
    # Once per shape: each column type's processor, as ``given`` is.
    return tuple(_ready(dialect, t) for _, t in columns)


def params(dialect: sa.Dialect, columns: tuple[tuple[str, sa.types.TypeEngine[object]], ...],
           rows: Sequence[Sequence[object]]) -> dict[str, object]:
    """The parameter of ``given``'s clause of ``columns``: ``rows`` (values
    in the order of ``columns``) as one JSON document."""
    ready = _readies(dialect, columns)
    if dialect.name == "postgresql":
        return {PARAM: json.dumps([{n: r(v) for (n, _), r, v in zip(columns, ready, row,
                                                                    strict=True)}
                                   for row in rows])}
    return {PARAM: json.dumps([[r(v) for r, v in zip(ready, row, strict=True)] for row in rows])}


def looked_up(dialect: sa.Dialect, column: sa.ColumnElement[object],
              given_column: sa.ColumnElement[object]) -> list[sa.ColumnElement[bool]]:
    """The criteria that make PostgreSQL find a table's rows by ``column``
    (its key's first column), one index lookup per given row. Joined on it
    alone, the planner read the document as 100 rows and the table's other
    tests (``engine_id IS NULL``, a new traversal's id) as a few rows, with
    no statistics for them, and scanned all those, rescanning the document
    once per row: 30 to 100 ms for a batch of 16 against a few thousand
    rows. ``column = ANY(ARRAY(SELECT … FROM given))`` is an index's test it
    cannot read otherwise. Nothing elsewhere (SQLite looks each row up)."""
    if dialect.name != "postgresql":
        return []
    return [column == sa.any_(sa.func.array(sa.select(given_column).scalar_subquery()))]
