"""Queries of the reconciliation pass: open requests, abandonment, records."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.db.resources import host_match


def open_requests(db: Database, hosts: list[str]) -> list[models.Request]:
    """Pending and running requests for these hosts, pools included (and
    host-less ones)."""
    stmt = sa.select(models.Request).where(
        models.Request.status.in_(vocab.REQUEST_OPEN),
        sa.or_(*[host_match(models.Request.host, h) for h in hosts], models.Request.host.is_(None)),
    )
    with db.session() as session:
        return list(session.scalars(stmt.order_by(models.Request.id)))


def abandon_request(db: Database, request_id: int, dead_engine: str, note: str) -> bool:
    """running → abandoned, only if the dead engine still owns it."""
    stmt = (
        sa.update(models.Request)
        .where(models.Request.id == request_id, models.Request.status == vocab.REQUEST_RUNNING,
               models.Request.engine_id == dead_engine)
        .values(status=vocab.REQUEST_ABANDONED, finished_at=models.utcnow(), error=note)
    )
    with db.session() as session:
        return session.execute(stmt).rowcount == 1


def pass_start(db: Database, host: str, engine_id: str, trigger: str, dry_run: bool
               ) -> models.ReconcilePass:
    row = models.ReconcilePass(host=host, engine_id=engine_id, trigger=trigger, dry_run=dry_run,
                          started_at=models.utcnow(), summary={})
    with db.session() as session:
        session.add(row)
    return row


def pass_finish(db: Database, pass_id: int, summary: dict[str, Any]) -> bool:
    """Record the outcome of a running pass (finished_at NULL → set); True
    if this call recorded it."""
    stmt = (
        sa.update(models.ReconcilePass)
        .where(models.ReconcilePass.id == pass_id, models.ReconcilePass.finished_at.is_(None))
        .values(summary=summary, finished_at=models.utcnow())
    )
    with db.session() as session:
        return session.execute(stmt).rowcount == 1


def pass_failed(db: Database, pass_id: int | None, host: str, engine_id: str, trigger: str,
                dry_run: bool, summary: dict[str, Any]) -> int:
    """Record a pass that failed: finish its row, or, when it failed before
    its row was written (``pass_id`` None), add a finished one. The trigger
    is cut to its column if needed: a trigger that does not fit must not
    also lose the record of why. Returns the row's id."""
    if pass_id is not None:
        pass_finish(db, pass_id, summary)  # a row already finished keeps its record
        return pass_id
    limit = models.ReconcilePass.__table__.c.trigger.type.length
    now = models.utcnow()
    row = models.ReconcilePass(host=host, engine_id=engine_id, trigger=trigger[:limit],
                          dry_run=dry_run, started_at=now, finished_at=now, summary=summary)
    with db.session() as session:
        session.add(row)
    return row.id


def passes(db: Database, host: str | None = None, limit: int = 1,
           pass_id: int | None = None, trigger: str | None = None) -> list[models.ReconcilePass]:
    stmt = sa.select(models.ReconcilePass).order_by(models.ReconcilePass.id.desc()).limit(limit)
    if trigger:
        stmt = stmt.where(models.ReconcilePass.trigger == trigger)
    if host:
        stmt = stmt.where(models.ReconcilePass.host == host)
    if pass_id is not None:
        stmt = stmt.where(models.ReconcilePass.id == pass_id)
    with db.session() as session:
        return list(session.scalars(stmt))
