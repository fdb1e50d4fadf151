"""Schema migrations with alembic (``sharectl db sync`` / ``db version``)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sharemgr.db import schema_rev
from sharemgr.db.engine import Database, DatabaseUnavailable
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    import sqlite3

MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    return cfg


def script() -> ScriptDirectory:
    """The migration scripts (loading them costs tens of milliseconds: a
    caller asking several questions passes one in)."""
    return ScriptDirectory.from_config(_config())


def head(scripts: ScriptDirectory | None = None) -> str:
    current = (scripts or script()).get_current_head()
    if current is None:
        raise RuntimeError("the migration scripts have no head")
    return current


def current(db: Database) -> str | None:
    return schema_rev.current(db)


# Concurrent ``db sync`` runs (two hosts' playbooks at once) take turns: the
# second waits for the first, then finds the schema at head. A PostgreSQL
# advisory lock (for the transaction the migration runs in) or a MariaDB
# named lock (for the connection), both named after the database: the
# server's other databases sync freely. SQLite needs none: the migration's
# transaction begins IMMEDIATE (db/engine.py), which takes the write lock.
SYNC_LOCK_KEY = 0x5348524D  # 'SHRM'
SYNC_LOCK_WAIT = 600  # seconds a MariaDB run waits for another's
_PG_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key, hashtext(current_database()))")
_MY_NAME = "CONCAT('sharemgr_sync_', LEFT(SHA1(DATABASE()), 40))"
_MY_LOCK = sa.text(f"SELECT GET_LOCK({_MY_NAME}, :wait)")
_MY_UNLOCK = sa.text(f"SELECT RELEASE_LOCK({_MY_NAME})")


def _take_sync_lock(conn: Connection, dialect: str) -> None:
    if dialect == "postgresql":
        conn.execute(_PG_LOCK, {"key": SYNC_LOCK_KEY})
    elif dialect in ("mysql", "mariadb"):
        if conn.execute(_MY_LOCK, {"wait": SYNC_LOCK_WAIT}).scalar() != 1:
            raise DatabaseUnavailable(
                f"another 'db sync' held the schema lock for {SYNC_LOCK_WAIT}s; try again")


def _drop_sync_lock(conn: Connection, dialect: str) -> None:
    if dialect in ("mysql", "mariadb"):
        # A lost connection took the lock with it: nothing to add to its error.
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            conn.execute(_MY_UNLOCK)


def upgrade(db: Database, revision: str = "head") -> None:
    cfg = _config()
    with db.engine.connect() as conn:
        sqlite = db.dialect == "sqlite"
        if sqlite:
            # Batch migrations rebuild tables (copy, drop, rename); with foreign
            # keys enforced the drop of a referenced table fails. The pragma
            # only works outside a transaction, so on the raw connection.
            _pragma(conn, "PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                _take_sync_lock(conn, db.dialect)
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if revision == "head":
                    _record_floor(conn)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration broke foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                _pragma(conn, "PRAGMA foreign_keys=ON")
            else:
                _drop_sync_lock(conn, db.dialect)


def is_current(db: Database) -> bool:
    return current(db) == head()


# Rolling upgrades ---------------------------------------------------------
#
# A migration module that says ``compat = "expand"`` only adds (tables,
# nullable columns, indexes): engines of the head before it work on the
# schema after it. ``db sync`` records the oldest head whose engines still
# work (``engine_floor`` in ``schema_info``); an engine whose head the
# database has passed reads it at start and runs if its own head is at or
# after the floor. An engine never runs on a database older than its head.

FLOOR = "engine_floor"


def _pragma(conn: Connection, sql: str) -> None:
    # On the DBAPI connection: SQLite takes these pragmas only outside a
    # transaction, and SQLAlchemy's connection would begin one.
    raw: sqlite3.Connection | None = conn.connection.driver_connection
    assert raw is not None, "an open connection has one"
    raw.execute(sql)


def floor(scripts: ScriptDirectory | None = None) -> str:
    """The oldest revision whose engines work on the head's schema: the
    head, walked back over the expand migrations just below it."""
    scripts = scripts or script()
    rev = scripts.get_revision(scripts.get_current_head() or "head")
    oldest = rev.revision
    while getattr(rev.module, "compat", "contract") == "expand" and rev.down_revision:
        down = rev.down_revision
        assert isinstance(down, str), "the migrations are one line, without merges"
        oldest, rev = down, scripts.get_revision(down)
    return oldest


def _record_floor(conn: Connection) -> None:
    table = sa.table("schema_info", sa.column("name"), sa.column("value"))
    conn.execute(sa.delete(table).where(table.c.name == FLOOR))
    conn.execute(sa.insert(table).values(name=FLOOR, value=floor()))


def _read_floor(db: Database) -> str | None:
    table = sa.table("schema_info", sa.column("name"), sa.column("value"))
    try:
        with db.connect() as conn:
            return conn.execute(sa.select(table.c.value).where(table.c.name == FLOOR)
                                ).scalar()
    except sa.exc.DBAPIError:  # no such table: synced by a release without it
        return None


def is_newer(at: str | None, scripts: ScriptDirectory | None = None) -> bool:
    """Whether revision ``at`` is one this release has never heard of (a
    later release's)."""
    if at is None:
        return False
    try:
        return (scripts or script()).get_revision(at) is None
    except Exception:  # alembic raises for a revision it cannot locate
        return True


def can_run(db: Database, who: str = "engine",
            scripts: ScriptDirectory | None = None) -> tuple[bool, str | None]:
    """Whether an engine (or ``who`` else) of this release may run on
    ``db``'s schema, and why not or the note to log (None: the schema is at
    this head)."""
    at, mine = current(db), schema_rev.HEAD
    if at == mine:
        return True, None
    if at is None:
        return False, "the database has no schema (it is empty): run 'sharectl db sync'"
    scripts = scripts or script()
    if not is_newer(at, scripts):
        return False, f"the database is at revision {at}, not {mine}: run 'sharectl db sync'"
    lowest = _read_floor(db)
    mine_and_older = {r.revision for r in scripts.iterate_revisions(mine, "base")}
    if lowest is not None and lowest in mine_and_older:
        return True, (f"the database is at revision {at}, newer than this {who}'s {mine}; "
                      f"{who}s from revision {lowest} on work on it (expand migrations "
                      "only): running")
    return False, (f"the database is at revision {at}, newer than this {who}'s {mine}, "
                   f"and needs {who}s from revision {lowest or at} on: upgrade this {who}")


def schema_diff(conn: Connection) -> list[object]:
    """What alembic finds between the connected database's schema and the
    models' (empty: the same). An object the models make on some dialects
    only (``ddl_if``, e.g. PostgreSQL's partial index of the claim) is
    compared on those only: alembic does not read ``ddl_if`` itself."""
    from alembic.autogenerate import compare_metadata
    from sharemgr.db import models

    def include(obj: object, _name: str | None, _type: str, _reflected: bool,
                _compare_to: object) -> bool:
        only = getattr(obj, "_ddl_if", None)  # SQLAlchemy keeps ddl_if() here
        dialect = getattr(only, "dialect", None)
        if dialect is None:
            return True
        return conn.dialect.name in ((dialect,) if isinstance(dialect, str) else dialect)

    context = MigrationContext.configure(conn, opts={"include_object": include})
    return list(compare_metadata(context, models.Base.metadata))
