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
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def is_current(db: Database) -> bool:
    return current(db) == head()
