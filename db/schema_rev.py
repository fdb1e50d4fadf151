"""The schema revision a database is at, and the newest this release has,
read without alembic (its import is a fifth of a second, which every
sharectl command would pay for a check that almost always passes).
``db/migration.py`` says the rest: why a revision that differs may or may
not run."""

from __future__ import annotations

import os

import sqlalchemy as sa
from sharemgr.db.engine import Database

VERSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations", "versions")


def _head() -> str:
    # The migrations are one line, each file NNNN_*.py of revision "NNNN"
    # (tests/unit/db/test_schema_rev.py holds alembic's head to it).
    return max(name[:4] for name in os.listdir(VERSIONS) if name[:4].isdigit())


HEAD = _head()


def current(db: Database) -> str | None:
    """The database's revision; None when it has no schema."""
    try:
        with db.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except sa.exc.DBAPIError:  # no such table: an empty database
        return None
