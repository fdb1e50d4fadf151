"""Inserting mapped rows as plain INSERTs, without the ORM's unit of work:
one cached statement per table, parents before children."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import sqlalchemy as sa
from sharemgr.db import models, records
from sqlalchemy.orm import Session


@functools.cache
def _insert_order() -> dict[sa.Table, int]:
    # The tables' foreign-key order; the schema is fixed once imported, and
    # ``sorted_tables`` sorts anew at every use.
    return {t: i for i, t in enumerate(models.Base.metadata.sorted_tables)}


@functools.cache
def insert_statement(table: sa.Table) -> sa.Insert:
    """One INSERT statement object per table, its values given at execution
    (built once: building and caching one per call costs more than running it)."""
    return sa.insert(table)


def insert_rows_tx(session: Session, rows: Iterable[models.Base]) -> None:
    """Insert new mapped objects as plain INSERTs on their tables, without
    the ORM's unit of work: parents before children (the foreign keys'
    order, as a flush would), a column left unset takes its default, and a
    primary key the database or a default made is set on the object. The
    rows of a table whose keys are all given and whose columns are the same
    go in one ``executemany`` (a batch of stack creates' shares)."""
    order = _insert_order()
    groups: dict[tuple[sa.Table, tuple[str, ...]], list[dict[str, object]]] = {}
    for obj in sorted(rows, key=lambda o: order[type(o).__table__]):
        table = type(obj).__table__
        values = {c.name: obj.__dict__[c.name] for c in table.c if c.name in obj.__dict__
                  # an unset key is made by the database or the default, as in a flush
                  and not (c.primary_key and obj.__dict__[c.name] is None)}
        if all(c.name in values for c in table.primary_key.columns):
            groups.setdefault((table, tuple(values)), []).append(values)
            continue
        _flush(session, groups)  # the parents first
        made = records.new_keys(session.execute(insert_statement(table), values))
        for column, value in zip(table.primary_key.columns, made, strict=True):
            if getattr(obj, column.name) is None:
                setattr(obj, column.name, value)
    _flush(session, groups)


def _flush(session: Session, groups: dict[tuple[sa.Table, tuple[str, ...]],
                                          list[dict[str, object]]]) -> None:
    """The rows gathered so far, a statement per table and set of columns,
    in the order they were gathered (parents first)."""
    for (table, _columns), many in groups.items():
        session.execute(insert_statement(table), many if len(many) > 1 else many[0])
    groups.clear()
