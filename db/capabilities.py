"""Backend capabilities: each backend's last ``get_share_stats()`` report.

One ``backend_stats`` row per ``host@backend``. Every engine serving the
backend writes it (the last report wins); intake reads one row per request by
its primary key.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping

import sqlalchemy as sa
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict

# A report read is reused this long by the process that read it: a stack of
# a thousand shares checks one backend's capabilities a thousand times, and
# the reports change every ``backend_stats_interval`` (60 s by default). An
# engine's own refresh replaces its copy at once (``save``).
MAX_AGE_SECONDS = 1.0
_cache: weakref.WeakKeyDictionary[Database, dict[str, tuple[float, models.BackendStats | None]]] = \
    weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _remember(db: Database, host: str, row: models.BackendStats | None) -> None:
    with _cache_lock:
        _cache.setdefault(db, {})[host] = (time.monotonic() + MAX_AGE_SECONDS, row)


def save(db: Database, host: str, stats: Mapping[str, object], engine_id: str) -> None:
    """Insert or replace ``host``'s report in one statement (an upsert), so
    engines of one host refreshing together never collide on the key."""
    values = {"host": host, "stats": stats, "engine_id": engine_id,
              "updated_at": models.utcnow()}
    db_api.upsert(db, models.BackendStats, "host", values)
    _remember(db, host, models.BackendStats(**values))


def get(db: Database, host: str) -> models.BackendStats | None:
    """The report of ``host@backend`` (no pool part), or None; a copy read
    less than ``MAX_AGE_SECONDS`` ago by this process is reused."""
    with _cache_lock:
        expires, row = _cache.get(db, {}).get(host, (0.0, None))
    if expires > time.monotonic():
        return row
    with db.reading() as session:
        row = session.get(models.BackendStats, host)
        if row is not None:
            session.expunge(row)
    _remember(db, host, row)
    return row


@retry_on_conflict
def all_stats(db: Database) -> list[models.BackendStats]:
    """Every backend's report, by host."""
    with db.reading() as session:
        stmt = sa.select(models.BackendStats).order_by(models.BackendStats.host)
        return list(session.scalars(stmt))
