"""The DB API: every query of sharemgr lives in db/.

Status changes go through ``conditional_update``, which issues
``UPDATE ... WHERE id = :id AND <column> = :expected`` and reports whether
this caller won. Functions take the ``Database`` first; functions whose name
ends in ``_tx`` take an open ``Session`` so callers can group several writes
into one transaction.
"""

from __future__ import annotations

import collections
import functools
import importlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sharemgr.db import capacity, clock, given_rows, models, quiet, records
from sharemgr.db.engine import ColumnLimitError, Database, limit_problem

# Re-exported ("x as x"): the request queue and the plain inserts have
# modules of their own, and callers keep importing these names from here.
from sharemgr.db.inserts import insert_rows_tx as insert_rows_tx
from sharemgr.db.inserts import insert_statement as insert_statement
from sharemgr.db.models import M
from sharemgr.db.request_queue import NewRequest as NewRequest
from sharemgr.db.request_queue import request_add_tx as request_add_tx
from sharemgr.db.request_queue import request_claim as request_claim
from sharemgr.db.request_queue import request_finish as request_finish
from sharemgr.db.request_queue import request_list as request_list
from sharemgr.db.request_queue import request_release as request_release
from sharemgr.db.request_queue import requests_add_tx as requests_add_tx
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import Session

utcnow = models.utcnow

# A row's primary key: a uuid, or a number the database made (requests,
# stack resources).
Ident = str | int
# Column values by column name: what a change writes, or what it expects
# (a value, None, or a collection of allowed values); SQLAlchemy binds them.
Columns = Mapping[str, object]
# An expected value that is one of several (``IN``).
_MANY = (list, tuple, set, frozenset)


def _criteria(model: object, expected: Columns) -> list[sa.ColumnElement[bool]]:
    """``column = value`` (``IN``, ``IS NULL``) per item, on ``model``'s
    attributes: a mapped class's, or a table's columns (``table.c``)."""
    out: list[sa.ColumnElement[bool]] = []
    for column, value in expected.items():
        attr = getattr(model, column)
        if isinstance(value, _MANY):
            out.append(attr.in_(list(value)))
        elif value is None:
            out.append(attr.is_(None))
        else:
            out.append(attr == value)
    return out


class _PlusOne:
    def __repr__(self) -> str:
        return "PLUS_ONE"


# A value for conditional_update_tx: the column's value plus one, in SQL
# (a lock's or a row's version key), in a statement built once.
PLUS_ONE = _PlusOne()


@dataclass(frozen=True)
class Computed:
    """A value for conditional_update_tx computed in SQL by ``expr``, an
    expression built once (a module's constant) whose bound parameters are
    ``params``: the statement that writes it is then built once per shape
    too, where an expression built per call makes a statement, and its
    cache key, per call (which costs more than running it)."""

    expr: sa.ColumnElement[Any]
    params: Mapping[str, object]


# The database's time (db/clock.py), for a time other engines judge by that
# clock (a traversal's start, which its stack's timeout counts from).
DB_NOW = Computed(clock.now(), {})


def _stamped(model: type[models.HasTable], values: Columns) -> Columns:
    """``values`` with ``updated_at`` set to now, where the model has one and
    the caller did not set it: what every conditional update writes. A
    status change of a fenced resource also bumps its fencing token
    (doc/reconciliation.rst, "Fencing"): an outcome read under an older
    token can no longer be written over it."""
    if hasattr(model, "updated_at") and "updated_at" not in values:
        values = {**values, "updated_at": utcnow()}
    if "status" in values and "fence" not in values and hasattr(model, "fence"):
        values = {**values, "fence": PLUS_ONE}
    return values


def _test(value: object) -> str:
    """How a column is compared with an expected value: the statement's shape."""
    if value is None:
        return "null"
    return "in" if isinstance(value, _MANY) else "eq"


# Statements that write Computed values, by shape and the expressions' ids;
# each entry holds its expressions, so an id in a key is never reused while
# the entry lives. Bounded: expressions built per call would fill it.
_COMPUTED_STMTS: dict[tuple[object, ...], tuple[sa.Update, tuple[sa.ColumnElement[Any], ...]]] = {}
_COMPUTED_MAX = 512


def _computed_stmt(table: sa.Table, tests: tuple[tuple[str, str], ...],
                   columns: tuple[tuple[str, bool], ...],
                   computed: Mapping[str, sa.ColumnElement[Any]]) -> sa.Update:
    key = (table, tests, columns, tuple((n, id(e)) for n, e in computed.items()))
    found = _COMPUTED_STMTS.get(key)
    if found is None:
        if len(_COMPUTED_STMTS) >= _COMPUTED_MAX:
            _COMPUTED_STMTS.clear()
        found = _COMPUTED_STMTS[key] = (_update_stmt(table, tests, columns).values(computed),
                                        tuple(computed.values()))
    return found[0]


@functools.lru_cache(maxsize=512)
def _update_stmt(table: sa.Table, tests: tuple[tuple[str, str], ...],
                 columns: tuple[tuple[str, bool], ...]) -> sa.Update:
    """``UPDATE table SET <columns> WHERE id = :w_id AND <tests>``, built once
    per shape with parameters: building a statement and its cache key at each
    call costs more than running it. On the table and its columns, not the
    mapped class: a plain UPDATE, without the ORM's bulk-update machinery
    (the session's objects are not synchronized); one mapped attribute in the
    WHERE would bring that back."""
    c = table.c
    where = [c.id == sa.bindparam("w_id")]
    for name, test in tests:
        if test == "null":
            where.append(c[name].is_(None))
        elif test == "in":
            where.append(c[name].in_(sa.bindparam(f"w_{name}", expanding=True)))
        else:
            where.append(c[name] == sa.bindparam(f"w_{name}"))
    return sa.update(table).where(*where).values(
        {n: c[n] + 1 if plus_one else sa.bindparam(f"v_{n}") for n, plus_one in columns})


# Rows per multi-row UPDATE (``conditional_update_many_tx``,
# ``conditional_update_rows_tx``): a reconciliation pass's batch is mostly one
# change on many rows; each row is a parameter or a VALUES row.
MANY_AT_ONCE = 500


@functools.lru_cache(maxsize=128)
def _update_many_stmt(table: sa.Table, tests: tuple[str, ...],
                      columns: tuple[tuple[str, bool], ...]) -> sa.Update:
    """``UPDATE table SET <columns> WHERE id IN (:ids) AND <col = :w_col>
    RETURNING id``: the rows that matched, built once per shape."""
    c = table.c
    return (sa.update(table)
            .where(c.id.in_(sa.bindparam("ids", expanding=True)),
                   *[c[n] == sa.bindparam(f"w_{n}") for n in tests])
            .values({n: c[n] + 1 if plus_one else sa.bindparam(f"v_{n}")
                     for n, plus_one in columns})
            .returning(c.id))


def conditional_update_many_tx(session: Session, model: type[models.HasTable], ids: Sequence[Ident],
                               expected: Columns, values: Columns) -> set[Ident]:
    """:func:`conditional_update_tx` of the same change on many rows in one
    statement (``UPDATE … RETURNING``: PostgreSQL, SQLite); each row is still
    checked against ``expected`` (plain values), and the ids of the rows that
    matched are returned."""
    stamped = _stamped(model, values)
    stmt = _update_many_stmt(model.__table__, tuple(expected),
                             tuple((n, v is PLUS_ONE) for n, v in stamped.items()))
    params = {"ids": list(ids), **{f"w_{n}": v for n, v in expected.items()},
              **{f"v_{n}": v for n, v in stamped.items() if v is not PLUS_ONE}}
    return set(session.scalars(stmt, params))


def conditional_update_rows_tx(session: Session, model: type[models.HasTable],
                               rows: Sequence[tuple[Ident, Columns, Columns]]
                               ) -> set[Ident]:
    """PostgreSQL, SQLite: many rows' conditional updates of one shape (the same
    expected and set columns; each row ``(id, expected, values)`` with its
    own values) in one ``UPDATE … FROM given RETURNING id`` (the rows one
    JSON parameter: db/given_rows.py), each row still checked against its
    own ``expected`` (plain values; a column expected None is expected NULL
    in every row; a column set ``PLUS_ONE`` is so in every row); the ids of
    the rows that matched."""
    table = model.__table__
    c = table.c
    _, first_expected, first_values = rows[0]
    nulls = tuple(n for n, v in first_expected.items() if v is None)
    tests = tuple(n for n in first_expected if n not in nulls)
    plus_one = tuple(n for n, v in first_values.items() if v is PLUS_ONE)
    columns = tuple(n for n in first_values if n not in plus_one)
    dialect = session.get_bind().dialect
    if dialect.name == "sqlite":
        # SQLite keeps any length: the values are checked here as a plain
        # UPDATE's are.
        for _ident, _expected, values in rows:
            for n in columns:
                problem = limit_problem(c[n], values[n])
                if problem:
                    raise sa.exc.DataError(None, None, ColumnLimitError(problem))
    shape = (("id", c.id.type), *[(f"w_{n}", c[n].type) for n in tests],
             *[(f"v_{n}", c[n].type) for n in columns])
    stmt, stamp = _update_rows_stmt(dialect, table, shape, tests, nulls, columns, plus_one,
                                    tuple(_stamped(model, dict.fromkeys(first_values))))
    given = given_rows.params(dialect, shape, [
        (ident, *[expected[n] for n in tests], *[values[n] for n in columns])
        for ident, expected, values in rows])
    return set(session.scalars(stmt, {**given, **({"stamp": utcnow()} if stamp else {})}))


@functools.lru_cache(maxsize=128)
def _update_rows_stmt(dialect: sa.Dialect, table: sa.Table,
                      shape: tuple[tuple[str, sa.types.TypeEngine[object]], ...],
                      tests: tuple[str, ...], nulls: tuple[str, ...], columns: tuple[str, ...],
                      plus_one: tuple[str, ...], stamped: tuple[str, ...]
                      ) -> tuple[sa.Update, bool]:
    """``conditional_update_rows_tx``'s statement, built once per shape (its
    cache key with it); whether it stamps ``updated_at`` (the parameter
    ``stamp``)."""
    c = table.c
    given = given_rows.given(dialect, shape)
    new: dict[str, object] = {n: given.c[f"v_{n}"] for n in columns}
    new.update({n: c[n] + 1 for n in plus_one})
    stamp = "updated_at" in stamped and "updated_at" not in columns
    if stamp:
        new["updated_at"] = sa.bindparam("stamp", type_=c.updated_at.type)
    if "fence" in stamped and "fence" not in columns and "fence" not in plus_one:
        new["fence"] = c.fence + 1
    stmt = (sa.update(table)
            .where(c.id == given.c.id, *[c[n] == given.c[f"w_{n}"] for n in tests],
                   *[c[n].is_(None) for n in nulls],
                   *given_rows.looked_up(dialect, c.id, given.c.id))
            .values(new)
            .returning(c.id))
    return stmt, stamp


def _plain(value: object) -> bool:
    return isinstance(value, (str, int, float, bool))


def applied_together_tx(session: Session, groups: Sequence[Sequence[Change]]) -> dict[int, bool]:
    """The one-change groups of one shape (the same columns expected, the
    same of them expected NULL, the same set), applied together per up to
    ``MANY_AT_ONCE`` rows in one ``UPDATE … FROM given RETURNING id``, each
    row with its own values (a pass writes each share's export locations;
    ``PLUS_ONE`` is part of the shape) and still checked against what it
    was read with; {group index: applied}. A row named by more than one
    group, or another value computed in SQL, is left to the one by one path,
    in order; nothing on a database without ``UPDATE … RETURNING`` (MariaDB)."""
    if not session.info["database"].update_returning:
        return {}
    seen: collections.Counter[tuple[type[models.HasTable], Ident]] = collections.Counter(
        (change[0], change[1]) for group in groups for change in group)
    # (model, the expected columns, the set columns) -> the groups of that shape
    buckets: dict[tuple[type[models.HasTable], tuple[str, ...], tuple[str, ...],
                        tuple[str, ...], tuple[str, ...]], list[int]] = {}
    for i, group in enumerate(groups):
        if len(group) != 1:
            continue
        model, ident, expected, values = group[0]
        if seen[(model, ident)] > 1 \
                or not all(v is None or _plain(v) for v in expected.values()) \
                or any(isinstance(v, (sa.ClauseElement, Computed)) for v in values.values()):
            continue
        nulls = tuple(n for n, v in expected.items() if v is None)
        plus_one = tuple(n for n, v in values.items() if v is PLUS_ONE)
        buckets.setdefault((model, tuple(expected), nulls, tuple(values), plus_one),
                           []).append(i)
    out: dict[int, bool] = {}
    for (model, *_shape), members in buckets.items():
        if len(members) < 2:
            continue
        for at in range(0, len(members), MANY_AT_ONCE):
            part = members[at:at + MANY_AT_ONCE]
            won = conditional_update_rows_tx(session, model, [groups[i][0][1:] for i in part])
            out.update((i, groups[i][0][1] in won) for i in part)
    return out


def applied_tx(session: Session, groups: Sequence[Sequence[Change]]) -> Iterator[bool]:
    """Whether each group of changes applied (all its changes matched): those
    of one shape together (``applied_together_tx``), the rest one by one,
    each as it is asked for (a caller that stops at the first lost writes
    no more: it rolls back)."""
    together = applied_together_tx(session, groups)
    for i, changes in enumerate(groups):
        yield together[i] if i in together else \
            all(conditional_update_tx(session, *change) for change in changes)


def conditional_update_tx(
    session: Session, model: type[models.HasTable], ident: Ident, expected: Columns,
    values: Columns,
) -> bool:
    stamped = _stamped(model, values)
    table = model.__table__
    if any(isinstance(v, sa.ClauseElement) for v in stamped.values()):
        # Another value computed in SQL (a stack's end: a CASE): built for
        # this call.
        c = table.c
        stmt = sa.update(table).where(c.id == ident, *_criteria(c, expected)).values(
            **{n: c[n] + 1 if v is PLUS_ONE else v for n, v in stamped.items()})
        return records.rowcount(session.execute(stmt)) == 1
    tests = tuple((name, _test(v)) for name, v in expected.items())
    computed = {n: v for n, v in stamped.items() if isinstance(v, Computed)}
    plain = {n: v for n, v in stamped.items() if n not in computed}
    columns = tuple((n, v is PLUS_ONE) for n, v in plain.items())
    stmt = _computed_stmt(table, tests, columns, {n: v.expr for n, v in computed.items()}) \
        if computed else _update_stmt(table, tests, columns)
    params = {"w_id": ident, **{f"v_{n}": v for n, v in plain.items() if v is not PLUS_ONE}}
    for extra in computed.values():
        params.update(extra.params)
    for name, test in tests:
        if test != "null":
            value = expected[name]
            params[f"w_{name}"] = list(value) if isinstance(value, _MANY) else value
    return records.rowcount(session.execute(stmt, params)) == 1



@retry_on_conflict
def conditional_update(
    db: Database, model: type[models.HasTable], ident: Ident, expected: Columns, values: Columns,
) -> bool:
    """Set ``values`` on row ``ident`` only if its columns match ``expected``
    (a value, None, or a collection of allowed values). True if this call won."""
    with db.session() as session:
        return conditional_update_tx(session, model, ident, expected, values)


@retry_on_conflict
def conditional_update_then(db: Database, first: Change, then: Change) -> bool:
    """``first``'s conditional update ``(model, id, expected, values)`` and,
    only if it won, ``then``'s, in one transaction: no reader sees one row
    changed without the other. Whether ``first`` won (``then`` may lose on
    its own: its row moved on)."""
    with db.session() as session:
        if not conditional_update_tx(session, *first):
            return False
        conditional_update_tx(session, *then)
        return True


@retry_on_conflict
def upsert(db: Database, model: type[models.HasTable], key: str, values: Columns) -> None:
    """Insert the row, or update it where its primary key ``key`` exists, in
    one statement: engines of one host writing together never collide on
    the key (a read-then-insert lets two of them insert)."""
    # The dialect's insert is imported here: a sharectl command that does
    # not write a report need not load every dialect (doc/performance.rst).
    dialect = importlib.import_module(f"sqlalchemy.dialects.{db.dialect}")
    table = model.__table__
    changed = {k: v for k, v in values.items() if k != key}
    if db.dialect == "mysql":
        stmt = dialect.insert(table).values(**values).on_duplicate_key_update(**changed)
    else:
        stmt = dialect.insert(table).values(**values).on_conflict_do_update(
            index_elements=[table.c[key]], set_=changed)
    with db.session() as session:
        session.execute(stmt)


def get_tx(session: Session, model: type[M], ident: Ident,
           include_deleted: bool = False) -> M | None:
    """Row ``ident`` in the caller's transaction; None if absent or (unless
    ``include_deleted``) soft-deleted."""
    row = session.get(model, ident)
    if row is None or (not include_deleted and getattr(row, "deleted_at", None)):
        return None
    return row


def get(db: Database, model: type[M], ident: Ident, include_deleted: bool = False) -> Any:
    # Untyped, not ``M | None`` as get_tx: callers in manager/, reconcile/
    # and cli/ read a row they know is there (a parent, include_deleted)
    # without checking for None; typed, they fail the type check.
    with db.reading() as session:
        return get_tx(session, model, ident, include_deleted)


@retry_on_conflict
def query(
    db: Database,
    model: type[M],
    filters: Columns | None = None,
    include_deleted: bool = False,
    order_by: str = "created_at",
    limit: int | None = None,
) -> list[M]:
    stmt = sa.select(model).where(*_criteria(model, filters or {}))
    # Columns not every model has, read by name.
    deleted_at, ident = getattr(model, "deleted_at", None), getattr(model, "id", None)
    if not include_deleted and deleted_at is not None:
        stmt = stmt.where(deleted_at.is_(None))
    stmt = stmt.order_by(getattr(model, order_by), *([ident] if ident is not None else []))
    if limit:
        stmt = stmt.limit(limit)
    with db.reading() as session:  # no write lock: periodic tasks list with it
        return list(session.scalars(stmt))


@retry_on_conflict
def add_all(db: Database, rows: Iterable[M]) -> list[M]:
    added = list(rows)
    with db.session() as session:
        session.add_all(added)
    return added




@retry_on_conflict
def add_with_request(db: Database, rows: Sequence[models.Base], request: NewRequest | None
                     ) -> int | None:
    """Insert ``rows`` and, if given, a request (``request_add_tx`` keywords)
    in one transaction. Returns the request id."""
    with db.session() as session:
        session.add_all(list(rows))
        session.flush()
        if request:
            return request_add_tx(session, **request).id
    return None


# One conditional update: (model, id, expected column values, new values).
Change = tuple[type[models.HasTable], Ident, Columns, Columns]


# Defined once, not in the function: a class statement per call was 1.3 % of
# a stack engine's CPU.
class _Lost(Exception):
    """A change of ``transition_with_request`` lost: its transaction rolls back."""


@retry_on_conflict
def transition_with_request(
    db: Database,
    changes: Sequence[Change],
    request: NewRequest | None,
    rows: Sequence[models.Base] = (),
    claims: Sequence[capacity.Claim] = (),
    conditions: Sequence[quiet.Condition] = (),
) -> bool:
    """Apply conditional updates ``(model, id, expected, values)``, insert
    ``rows`` and add a request, all or nothing: if any update loses, the
    transaction rolls back and False is returned. ``claims``: pool capacity
    the rows take, claimed first (db/capacity.py; NoRoom is raised);
    ``conditions``: checked after the updates (db/quiet.py; Busy is raised)."""
    try:
        with db.session() as session:
            for claim in claims:
                capacity.claim_tx(session, claim)
            for model, ident, expected, values in changes:
                if not conditional_update_tx(session, model, ident, expected, values):
                    raise _Lost()
            quiet.check_tx(session, conditions)
            if rows:
                session.add_all(list(rows))
                session.flush()
            if request:
                request_add_tx(session, **request)
    except _Lost:
        return False
    return True
