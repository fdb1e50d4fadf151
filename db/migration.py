"""Schema migrations with alembic (``sharectl db sync`` / ``db version``)."""

from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sharemgr.db.engine import Database

MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    return cfg


def head() -> str:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current(db: Database) -> str | None:
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(db: Database, revision: str = "head") -> None:
    cfg = _config()
    with db.engine.connect() as conn:
        sqlite = db.dialect == "sqlite"
        if sqlite:
            # Batch migrations rebuild tables (copy, drop, rename); with foreign
            # keys enforced the drop of a referenced table fails. The pragma
            # only works outside a transaction, so on the raw connection.
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration broke foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


def is_current(db: Database) -> bool:
    return current(db) == head()
