"""The database's clock: the one clock every engine judges leases by.

Engines on several hosts have clocks that disagree; a lease written by one
engine's clock and judged by another's is taken over early by an engine
whose clock runs ahead. So a lease's times are computed in the statement
that writes them (``after(seconds)``), and compared in the statement that
judges them (``now()``), by the database server, whatever the engines'
clocks say. Naive UTC with microseconds, as every timestamp column holds.

On SQLite the database's clock is the clock of the process running the
statement (one host: the embedded setup has one clock anyway); its ``now``
has milliseconds, written with six digits as SQLAlchemy writes them, so
that text comparison orders the two alike.
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sharemgr.db.engine import Database
from sharemgr.db.tables import DateTime
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class now(FunctionElement[datetime.datetime]):  # noqa: N801 (used as a SQL function)
    """The database server's current UTC time."""

    type = DateTime
    inherit_cache = True
    name = "sharemgr_now"


class after(FunctionElement[datetime.datetime]):  # noqa: N801
    """The database server's current UTC time plus ``seconds`` (a bound or a
    column expression, fractional seconds allowed; negative for before)."""

    type = DateTime
    inherit_cache = True
    name = "sharemgr_after"


@compiles(now)
def _now_sqlite(element: now, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    return "strftime('%Y-%m-%d %H:%M:%f000', 'now')"


@compiles(now, "postgresql")
def _now_postgresql(element: now, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    # statement_timestamp(): the time this statement began, not its
    # transaction's (a transaction that waited on a lock is not older).
    return "(statement_timestamp() AT TIME ZONE 'UTC')"


@compiles(now, "mysql")
@compiles(now, "mariadb")
def _now_mysql(element: now, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    return "UTC_TIMESTAMP(6)"


def _seconds(element: after, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    (arg,) = list(element.clauses)
    return compiler.process(arg, **kw)


@compiles(after)
def _after_sqlite(element: after, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    return ("strftime('%Y-%m-%d %H:%M:%f000', 'now', "
            f"printf('%+.3f seconds', {_seconds(element, compiler, **kw)}))")


@compiles(after, "postgresql")
def _after_postgresql(element: after, compiler: sa.sql.compiler.SQLCompiler,
                      **kw: object) -> str:
    return (f"((statement_timestamp() AT TIME ZONE 'UTC') + "
            f"CAST({_seconds(element, compiler, **kw)} AS DOUBLE PRECISION) "
            "* INTERVAL '1 second')")


@compiles(after, "mysql")
@compiles(after, "mariadb")
def _after_mysql(element: after, compiler: sa.sql.compiler.SQLCompiler, **kw: object) -> str:
    return (f"TIMESTAMPADD(MICROSECOND, CAST(ROUND({_seconds(element, compiler, **kw)} "
            "* 1000000) AS SIGNED), UTC_TIMESTAMP(6))")


_READ = sa.select(now())


def read(db: Database) -> datetime.datetime:
    """The database's time now (one round trip)."""
    with db.reading() as session:
        return read_tx(session)


def read_tx(session: sa.orm.Session) -> datetime.datetime:
    """The database's time now, in this transaction."""
    now_ = session.scalar(_READ)
    assert now_ is not None  # a SELECT of a function: one row
    return now_
