"""User messages (common/messages.py): written in the transaction that ends
the request they are about, listed, shown, deleted and reaped."""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sharemgr.common import messages as M
from sharemgr.db import models, records
from sharemgr.db.engine import Database
from sharemgr.db.resource_keys import request_keys
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import InstrumentedAttribute, Session

# Whose user-facing id a request's resource carries: (model, column).
_PARENT: dict[str, tuple[type[models.Live], InstrumentedAttribute[str]]] = {
    "share_instance": (models.ShareInstance, models.ShareInstance.share_id),
    "snapshot_instance": (models.ShareSnapshotInstance,
                          models.ShareSnapshotInstance.snapshot_id),
}


def record_tx(session: Session, request_id: int, detail_id: str, ttl: float = M.DEFAULT_TTL
              ) -> str | None:
    """A message about request ``request_id``, which this transaction has
    just ended failed or abandoned; None when its kind leaves none."""
    req = session.execute(
        sa.select(models.Request.resource_type, models.Request.resource_id,
                  models.Request.action, models.Request.error)
        .where(models.Request.id == request_id)).one_or_none()
    if req is None or not M.wanted(req.resource_type, req.action):
        return None
    resource_id = req.resource_id
    if req.resource_type in _PARENT:
        model, column = _PARENT[req.resource_type]
        resource_id = session.scalar(sa.select(column).where(model.id == req.resource_id)) \
            or resource_id
    now = models.utcnow()
    ident = models.new_id()
    session.execute(sa.insert(models.Message.__table__).values(
        id=ident, created_at=now, expires_at=now + datetime.timedelta(seconds=ttl),
        resource_type=M.USER_TYPES[req.resource_type], resource_id=resource_id,
        action_id=M.ACTION_IDS[req.action], detail_id=detail_id,
        message_level=M.LEVEL_ERROR, request_id=request_id, detail=req.error))
    return ident


@retry_on_conflict
def record_about(db: Database, resource_type: str, resource_id: str, action_id: str,
                 detail_id: str, detail: str | None, level: str = M.LEVEL_WARNING,
                 ttl: float = M.DEFAULT_TTL) -> str:
    """A message about what the manager did on its own (no request of the
    user's: a drift check's repair); ``resource_type`` is the type users
    know (``share``)."""
    now = models.utcnow()
    ident = models.new_id()
    with db.session() as session:
        session.execute(sa.insert(models.Message.__table__).values(
            id=ident, created_at=now, expires_at=now + datetime.timedelta(seconds=ttl),
            resource_type=resource_type, resource_id=resource_id, action_id=action_id,
            detail_id=detail_id, message_level=level, request_id=None, detail=detail))
    return ident


@retry_on_conflict
def message_list(db: Database, resource_id: str | None = None, limit: int | None = None
                 ) -> list[models.Message]:
    """Unexpired messages, newest first; ``resource_id`` a share, snapshot,
    replica or any resource a message names (a share's include its
    replicas')."""
    stmt = (sa.select(models.Message).where(models.Message.expires_at > models.utcnow())
            .order_by(models.Message.created_at.desc(), models.Message.id))
    if limit:
        stmt = stmt.limit(limit)
    with db.reading() as session:
        if resource_id:
            stmt = stmt.where(models.Message.resource_id.in_(request_keys(session,
                                                                          resource_id)))
        return list(session.scalars(stmt))


@retry_on_conflict
def message_get(db: Database, ident: str) -> models.Message | None:
    with db.reading() as session:
        return session.scalar(sa.select(models.Message).where(
            models.Message.id == ident, models.Message.expires_at > models.utcnow()))


@retry_on_conflict
def message_delete(db: Database, ident: str) -> bool:
    with db.session() as session:
        return records.rowcount(session.execute(sa.delete(models.Message).where(
            models.Message.id == ident))) == 1


@retry_on_conflict
def reap(db: Database) -> int:
    """Delete the expired messages; how many."""
    with db.session() as session:
        return records.rowcount(session.execute(sa.delete(models.Message).where(
            models.Message.expires_at <= models.utcnow())))
