"""Engine and session handling for SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


class DatabaseUnavailable(Exception):
    """The database cannot be reached or used (one clear line for the user)."""


def safe_url(url: str) -> str:
    """The URL with its password masked, for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparsable database URL>"


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
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


def _sqlite_begin(conn) -> None:  # noqa: ANN001
    conn.exec_driver_sql("BEGIN IMMEDIATE")


class Database:
    """One engine and its session factory."""

    def __init__(self, url: str, connect_timeout: int = 10, pool_size: int = 10) -> None:
        self.url = url
        try:
            parsed = make_url(url)
        except Exception as exc:
            raise DatabaseUnavailable(f"invalid database URL {safe_url(url)}: {exc}")
        self.dialect = parsed.get_backend_name()
        kwargs: dict = {"future": True}
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                folder = os.path.dirname(os.path.abspath(parsed.database))
                os.makedirs(folder, exist_ok=True)
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        else:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size * 2, pool_pre_ping=True)
            kwargs["connect_args"] = {"connect_timeout": connect_timeout}
            if self.dialect == "mysql":
                kwargs["isolation_level"] = "READ COMMITTED"
        try:
            self.engine = sa.create_engine(parsed, **kwargs)
        except Exception as exc:  # missing DBAPI module, bad options
            raise DatabaseUnavailable(f"cannot use database {safe_url(url)}: {exc}")
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def skip_locked(self) -> bool:
        """Whether SELECT ... FOR UPDATE SKIP LOCKED is available."""
        return self.dialect in ("postgresql", "mysql")

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

    def dispose(self) -> None:
        self.engine.dispose()
