"""Backend capabilities: each backend's last ``get_share_stats()`` report.

One ``backend_stats`` row per ``host@backend``. Every engine serving the
backend writes it (the last report wins); intake reads one row per request by
its primary key.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db.engine import Database


def save(db: Database, host: str, stats: dict[str, Any], engine_id: str) -> None:
    """Insert or replace ``host``'s report in one statement (an upsert), so
    engines of one host refreshing together never collide on the key."""
    db_api.upsert(db, models.BackendStats, "host", {
        "host": host, "stats": stats, "engine_id": engine_id, "updated_at": models.utcnow()})


def get(db: Database, host: str) -> models.BackendStats | None:
    """The report of ``host@backend`` (no pool part), or None."""
    with db.session() as session:
        return session.get(models.BackendStats, host)


def all_stats(db: Database) -> list[models.BackendStats]:
    """Every backend's report, by host."""
    with db.session() as session:
        stmt = sa.select(models.BackendStats).order_by(models.BackendStats.host)
        return list(session.scalars(stmt))
