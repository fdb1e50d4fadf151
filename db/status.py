"""What an operator's overview reads: the open requests per host (the queue
collector of /metrics) and the resources stuck in a transient status
(``sharectl status``). Each is one grouped query, never run on a request's
path.
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict

# The rows that hold a resource's status, by the type the CLI names.
STATUS_TABLES: dict[str, type[models.WithStatus]] = {
    vocab.SHARE_INSTANCE: models.ShareInstance,
    vocab.SNAPSHOT_INSTANCE: models.ShareSnapshotInstance,
    vocab.SHARE_SERVER: models.ShareServer,
    vocab.SHARE_GROUP: models.ShareGroup,
    vocab.GROUP_SNAPSHOT: models.ShareGroupSnapshot,
    vocab.BACKUP: models.ShareBackup,
}


def transient_statuses(rtype: str) -> tuple[str, ...]:
    return tuple(s for s in vocab.VALID_STATUSES[rtype] if s in vocab.TRANSIENT_STATUSES)


@retry_on_conflict
def request_counts(db: Database) -> dict[tuple[str | None, str], int]:
    """``{(host, status): n}`` of the open (pending, running) requests; host
    None for requests any engine may take."""
    r = models.Request
    stmt = (sa.select(r.host, r.status, sa.func.count())
            .where(r.status.in_(vocab.REQUEST_OPEN))
            .group_by(r.host, r.status))
    with db.session() as session:
        return {(host, status): n for host, status, n in session.execute(stmt)}


@retry_on_conflict
def stuck_counts(db: Database, older_than: datetime.timedelta,
                 now: datetime.datetime | None = None) -> dict[str, int]:
    """``{resource type: n}`` of live rows in a transient status whose last
    change (updated_at, else created_at) is older than ``older_than``: one
    UNION ALL of a grouped count per table. Types with none are left out."""
    cutoff = (now or models.utcnow()) - older_than
    parts = []
    for rtype, model in STATUS_TABLES.items():
        changed = sa.func.coalesce(model.updated_at, model.created_at)
        parts.append(
            sa.select(sa.literal(rtype).label("rtype"), sa.func.count().label("n"))
            .select_from(model)
            .where(model.status.in_(transient_statuses(rtype)),
                   model.deleted_at.is_(None), changed < cutoff))
    stmt = sa.union_all(*parts)
    with db.session() as session:
        return {rtype: n for rtype, n in session.execute(stmt) if n}
