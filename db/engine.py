"""Engine and session handling for SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sharemgr.db import retry, stats
from sqlalchemy import event
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.engine.default import DefaultExecutionContext
    from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor
    from sqlalchemy.orm import Session, sessionmaker
    from sqlalchemy.pool import ConnectionPoolEntry
    from sqlalchemy.sql.compiler import SQLCompiler


class DatabaseUnavailable(Exception):
    """The database cannot be reached or used (one clear line for the user)."""


def safe_url(url: str) -> str:
    """The URL with its password masked, for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparsable database URL>"


def _sqlite_pragmas(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    # Autocommit at the driver level; SQLAlchemy's "begin" event below issues
    # BEGIN IMMEDIATE so that a read-then-write transaction never fails to
    # upgrade its lock when another process wrote in between.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get(_BEGIN, 'IMMEDIATE')}")


# The execution option a read-only transaction sets (``Database.reading``).
_BEGIN = "sharemgr_sqlite_begin"


# Column limits on SQLite ------------------------------------------------------
#
# SQLite stores a 400-character string in a VARCHAR(32) column and a 64-bit
# number in an INTEGER one; PostgreSQL and MariaDB (strict mode) refuse both.
# The test suite runs mostly on SQLite, so without this check a value that
# cannot fit is only found in production (e.g. 'peer:<engine id>' in a
# VARCHAR(32): the peer takeover failed on PostgreSQL and MariaDB only).

INT_RANGES = {  # (minimum, maximum) the column types hold on PostgreSQL/MariaDB
    "small": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "big": (-(2**63), 2**63 - 1),
}


class ColumnLimitError(ValueError):
    """A value does not fit its column (SQLite only; the servers refuse it
    themselves). Raised wrapped in ``sqlalchemy.exc.DataError``, as
    PostgreSQL's and MariaDB's refusals are."""


def column_limit(type_: object) -> tuple[str, int, int] | None:
    """('str', 0, length) for a String with a length, ('int', min, max) for an
    integer column, else None."""
    if isinstance(type_, sa.String) and type_.length:
        return ("str", 0, type_.length)
    if isinstance(type_, sa.Integer):
        size = ("big" if isinstance(type_, sa.BigInteger)
                else "small" if isinstance(type_, sa.SmallInteger) else "int")
        return ("int", *INT_RANGES[size])
    return None


# The written (INSERT VALUES / UPDATE SET) parameters of a compiled statement
# and their limits; compiled statements are cached and reused, so are these.
_LIMITS: weakref.WeakKeyDictionary[SQLCompiler, list[tuple[str, str, tuple[str, int, int]]]] = \
    weakref.WeakKeyDictionary()


def _written_limits(compiled: SQLCompiler) -> list[tuple[str, str, tuple[str, int, int]]]:
    try:
        return _LIMITS[compiled]
    except KeyError:
        pass
    statement = getattr(compiled, "statement", None)
    table = getattr(statement, "table", None)
    # A value given as a named parameter (``.values(name=bindparam("v"))``,
    # a statement built once, db/api.py) is written too: its key -> column.
    named = {value.key: getattr(column, "key", column)
             for column, value in (getattr(statement, "_values", None) or {}).items()
             if isinstance(value, sa.BindParameter)}
    limits = []
    for bind in compiled.binds.values():
        # Only binds of a column's new value (those SQLAlchemy made, "crud",
        # and the named ones), never those of a WHERE clause.
        written = bind._is_crud or bind.key in named
        limit = column_limit(bind.type) if written else None
        if limit is not None:
            name = compiled.bind_names.get(bind, bind.key)
            column = (f"{table.name}.{named[bind.key]}" if bind.key in named and table is not None
                      else _column_name(table, bind))
            limits.append((name, column, limit))
    _LIMITS[compiled] = limits
    return limits


def _column_name(table: sa.TableClause | None, bind: sa.BindParameter[object]) -> str:
    """'table.column' for the message. A value given to ``.values()`` has an
    anonymous bind name, but the column's own type object."""
    columns = getattr(table, "c", None)
    if table is None or columns is None:
        return str(bind.key)
    column = columns.get(bind.key) if isinstance(bind.key, str) else None
    if column is None:
        column = next((c for c in columns if c.type is bind.type), None)
    return f"{table.name}.{column.name if column is not None else '?'}"


def _refuse(column: str, limit: tuple[str, int, int], value: object) -> str | None:
    kind, low, high = limit
    if kind == "str":
        if isinstance(value, str) and len(value) > high:
            return (f"value too long for column {column} (VARCHAR({high})): "
                    f"{len(value)} characters, starting {value[:40]!r}")
    elif isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
        return f"value out of range for column {column} ({low}..{high}): {value}"
    return None


def limit_problem(column: sa.Column[object], value: object) -> str | None:
    """Why SQLite must refuse ``value`` for ``column``, or None: for a value
    the hook below does not see (a multi-row UPDATE's own values, written
    from a VALUES list rather than as the statement's parameters)."""
    limit = column_limit(column.type)
    return None if limit is None else _refuse(f"{column.table.name}.{column.name}", limit, value)


# Set on an execution context whose values were checked.
_CHECKED = "_sharemgr_limits_checked"


def _sqlite_check_limits(conn: sa.Connection, cursor: DBAPICursor, statement: str,
                         parameters: Sequence[object] | Mapping[str, object],
                         context: DefaultExecutionContext | None, executemany: bool) -> None:
    compiled = getattr(context, "compiled", None)
    if context is None or compiled is None or not (
            getattr(compiled, "isinsert", False) or getattr(compiled, "isupdate", False)):
        return
    limits = _written_limits(compiled)
    if not limits or getattr(context, _CHECKED, False):
        return
    # Every row of the statement at its first cursor call: an INSERT of
    # many rows may reach the cursor in many batches (insertmanyvalues),
    # each with the whole statement's parameters; checked again at each,
    # 1,000 rows cost a million checks.
    setattr(context, _CHECKED, True)  # an attribute of our own on SQLAlchemy's object
    for params in context.compiled_parameters or ():
        for name, column, limit in limits:
            problem = _refuse(column, limit, params.get(name))
            if problem:
                raise sa.exc.DataError(statement, parameters, ColumnLimitError(problem))


# How each server is told to end a transaction left idle (seconds).
_IDLE_TRANSACTION_LIMIT = {
    "postgresql": "SET idle_in_transaction_session_timeout = '{seconds}s'",
    "mysql": "SET SESSION idle_transaction_timeout = {seconds}",  # MariaDB 10.3+
}


def _idle_transaction_limit(dialect: str, seconds: int
                            ) -> Callable[[DBAPIConnection, ConnectionPoolEntry], None]:
    """A connection's hook that makes the server end its transactions left
    idle for ``seconds``: a process paused or cut off inside one would
    otherwise hold its row locks against every other engine for as long
    as it stays so."""
    statement = _IDLE_TRANSACTION_LIMIT[dialect].format(seconds=seconds)

    def limit(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(statement)
        cur.close()
        dbapi_conn.commit()  # a SET in a transaction rolled back is undone (PostgreSQL)

    return limit


class Database:
    """One engine and its session factory."""

    def __init__(self, url: str, connect_timeout: int = 10, pool_size: int = 10,
                 max_overflow: int | None = None, pool_timeout: int = 30,
                 recycle: int = 3600, idle_transaction_timeout: int = 0,
                 create: bool = True) -> None:
        """``pool_size``, ``max_overflow`` (default twice ``pool_size``),
        ``pool_timeout`` and ``recycle`` (seconds; -1 never) shape the
        connection pool of PostgreSQL and MariaDB; a transaction left idle
        ``idle_transaction_timeout`` seconds is ended by their server (0:
        as the server says). ``create``: an SQLite file that is not there is
        made (else refused: a reader in the wrong folder, or with another
        configuration, would make an empty one and read it)."""
        self.url = url
        try:
            parsed = make_url(url)
        except Exception as exc:
            raise DatabaseUnavailable(f"invalid database URL {safe_url(url)}: {exc}")
        self.dialect = parsed.get_backend_name()
        kwargs: dict[str, object] = {"future": True}
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                folder = os.path.dirname(os.path.abspath(parsed.database))
                if not create and not os.path.exists(parsed.database):
                    raise DatabaseUnavailable(
                        f"no database at {os.path.abspath(parsed.database)}: run 'sharectl "
                        "db sync' to make it, or, for a daemon's, give sharectl its "
                        "configuration (--config-file; the default state_path is the folder "
                        "the daemon was started in)")
                try:
                    os.makedirs(folder, exist_ok=True)
                except OSError as exc:  # under a file, permission denied
                    raise DatabaseUnavailable(
                        f"cannot create the folder of database {safe_url(url)}: "
                        f"{exc.strerror or exc}: {folder}")
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        else:
            kwargs.update(pool_size=pool_size, pool_pre_ping=True, pool_timeout=pool_timeout,
                          pool_recycle=recycle,
                          max_overflow=pool_size * 2 if max_overflow is None else max_overflow)
            kwargs["connect_args"] = {"connect_timeout": connect_timeout}
            if self.dialect == "mysql":
                kwargs["isolation_level"] = "READ COMMITTED"
        try:
            self.engine = sa.create_engine(parsed, **kwargs)
        except Exception as exc:  # missing DBAPI module, bad options
            raise DatabaseUnavailable(f"cannot use database {safe_url(url)}: {exc}")
        if self.dialect != "sqlite" and idle_transaction_timeout > 0:
            event.listen(self.engine, "connect",
                         _idle_transaction_limit(self.dialect, idle_transaction_timeout))
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
            event.listen(self.engine, "before_cursor_execute", _sqlite_check_limits)
        self._session_factory: sessionmaker[Session] | None = None
        self.stats = stats.from_environment(self.engine)
        # How a transaction that lost a conflict is run again (db/retry.py).
        self.retry = retry.Policy()
        # The events kept per stack (``max_events_per_stack``; 0: all), read
        # through ``session.info`` by db/stack_events.py.
        self.max_events_per_stack = 1000

    @property
    def _sessions(self) -> sessionmaker[Session]:
        # The ORM is imported by the first session, not with the engine: a
        # reader of plain tables (``connect``) needs none of it.
        if self._session_factory is None:
            from sqlalchemy.orm import sessionmaker

            self._session_factory = sessionmaker(self.engine, expire_on_commit=False,
                                                 info={"database": self})
        return self._session_factory

    @property
    def skip_locked(self) -> bool:
        """Whether SELECT ... FOR UPDATE SKIP LOCKED is available."""
        return self.dialect in ("postgresql", "mysql")

    @property
    def update_returning(self) -> bool:
        """Whether UPDATE ... RETURNING is available (not on MariaDB)."""
        return self.dialect in ("postgresql", "sqlite")

    def check(self) -> None:
        """Connect once; raise DatabaseUnavailable with one line if that fails."""
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:
            cause = str(getattr(exc, "orig", exc)).strip().splitlines()
            raise DatabaseUnavailable(
                f"cannot connect to database {safe_url(self.url)}: "
                f"{cause[0] if cause else type(exc).__name__}"
            )

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with self._sessions() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def reading(self) -> Iterator[Session]:
        """A transaction that only reads. On SQLite its BEGIN is deferred:
        in WAL mode a reader neither waits for the writer nor holds it up,
        where BEGIN IMMEDIATE would queue every read behind every write.
        A write in it would fail to take the lock: use ``session``."""
        with self._sessions() as session, session.begin():
            if self.dialect == "sqlite":
                session.connection(execution_options={_BEGIN: "DEFERRED"})
            yield session

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        """A read-only transaction on a plain connection (Core, no ORM
        session), begun as ``reading`` begins its own."""
        with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                conn = conn.execution_options(**{_BEGIN: "DEFERRED"})
            with conn.begin():
                yield conn

    def dispose(self) -> None:
        if self.stats is not None:
            self.stats.write()
        self.engine.dispose()


def after_commit(session: Session, fn: Callable[[], None]) -> None:
    """Run ``fn`` once the session's transaction commits (never if it rolls
    back): for effects outside the database, such as metrics, that must
    count only what was written."""
    event.listen(session, "after_commit", lambda _session: fn(), once=True)
