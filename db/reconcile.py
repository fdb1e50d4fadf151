"""Queries of the reconciliation pass: open requests, abandonment, records."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import cast

import sqlalchemy as sa
from sharemgr.common import messages, vocab
from sharemgr.db import api as db_api
from sharemgr.db import clock, models, records, tables
from sharemgr.db import messages as db_messages
from sharemgr.db.engine import Database
from sharemgr.db.resources import host_match
from sharemgr.db.retry import retry_on_conflict


@retry_on_conflict
def open_requests(db: Database, hosts: list[str]
                  ) -> tuple[list[models.Request], datetime.datetime]:
    """Pending and running requests for these hosts, pools included (and
    host-less ones), and the database's time as they were read: what their
    leases are judged by (db/clock.py)."""
    stmt = sa.select(models.Request).where(
        models.Request.status.in_(vocab.REQUEST_OPEN),
        sa.or_(*[host_match(models.Request.host, h) for h in hosts], models.Request.host.is_(None)),
    )
    with db.reading() as session:
        now = clock.read_tx(session)
        return list(session.scalars(stmt.order_by(models.Request.id))), now


@retry_on_conflict
def last_request_args(db: Database, resource_type: str, resource_id: str, action: str
                      ) -> dict[str, object]:
    """The args of the newest ``action`` request of this resource, whatever
    its status ({} when there is none): how a delete a crash cut short was
    asked (forced or not)."""
    stmt = (sa.select(models.Request.args)
            .where(models.Request.resource_type == resource_type,
                   models.Request.resource_id == resource_id,
                   models.Request.action == action)
            .order_by(models.Request.id.desc()).limit(1))
    with db.reading() as session:
        return dict(session.scalar(stmt) or {})


@retry_on_conflict
def abandon_request(db: Database, request_id: int, dead_engine: str | None, note: str,
                    expired: bool = False, message_ttl: float = messages.DEFAULT_TTL) -> bool:
    """running → abandoned, only if the dead engine still owns it (with
    ``expired``: only if its lease has expired, the stuck rule; of several
    engines' passes exactly one wins and settles the resource). The user's
    message about it is written with it."""
    where = [models.Request.id == request_id, models.Request.status == vocab.REQUEST_RUNNING,
             models.Request.engine_id == dead_engine]
    if expired:
        where.append(models.Request.lease_expires_at < clock.now())
    stmt = (
        sa.update(models.Request)
        .where(*where)
        .values(status=vocab.REQUEST_ABANDONED, finished_at=models.utcnow(), error=note)
    )
    with db.session() as session:
        won = records.rowcount(session.execute(stmt)) == 1
        if won:
            db_messages.record_tx(session, request_id, messages.ENGINE_STOPPED, message_ttl)
        return won


@retry_on_conflict
def transitions(db: Database, groups: list[list[db_api.Change]]) -> list[bool]:
    """Apply many resources' outcomes in one transaction: each group is one
    resource's conditional updates ``(model, id, expected, values)`` (its
    status first, ``WHERE id = :id AND status = :seen``), all or nothing on
    its own. A group that loses (the row changed meanwhile) changes nothing
    and the others still apply. Returns, per group, whether it applied."""
    applied: list[bool] = []
    with db.session() as session:
        together = db_api.applied_together_tx(session, groups)
        for i, group in enumerate(groups):
            if i in together:
                applied.append(together[i])
                continue
            if len(group) == 1:
                applied.append(db_api.conditional_update_tx(session, *group[0]))
                continue
            # A savepoint: the status may win and a later change (the share's
            # size) lose; then neither may stay.
            nested = session.begin_nested()
            ok = all(db_api.conditional_update_tx(session, *change) for change in group)
            if ok:
                nested.commit()
            else:
                nested.rollback()
            applied.append(ok)
    return applied


@retry_on_conflict
def pass_start(db: Database, host: str, engine_id: str, trigger: str, dry_run: bool
               ) -> models.ReconcilePass:
    row = models.ReconcilePass(host=host, engine_id=engine_id, trigger=trigger, dry_run=dry_run,
                          started_at=models.utcnow(), summary={})
    with db.session() as session:
        session.add(row)
    return row


@retry_on_conflict
def pass_finish(db: Database, pass_id: int, summary: Mapping[str, object]) -> bool:
    """Record the outcome of a running pass (finished_at NULL → set); True
    if this call recorded it."""
    stmt = (
        sa.update(models.ReconcilePass)
        .where(models.ReconcilePass.id == pass_id, models.ReconcilePass.finished_at.is_(None))
        .values(summary=summary, finished_at=models.utcnow())
    )
    with db.session() as session:
        return records.rowcount(session.execute(stmt)) == 1


@retry_on_conflict
def pass_failed(db: Database, pass_id: int | None, host: str, engine_id: str, trigger: str,
                dry_run: bool, summary: Mapping[str, object]) -> int:
    """Record a pass that failed: finish its row, or, when it failed before
    its row was written (``pass_id`` None), add a finished one. The trigger
    is cut to its column if needed: a trigger that does not fit must not
    also lose the record of why. Returns the row's id."""
    if pass_id is not None:
        pass_finish(db, pass_id, summary)  # a row already finished keeps its record
        return pass_id
    limit = cast(sa.String, tables.reconcile_passes.c.trigger.type).length
    now = models.utcnow()
    row = models.ReconcilePass(host=host, engine_id=engine_id, trigger=trigger[:limit],
                          dry_run=dry_run, started_at=now, finished_at=now, summary=summary)
    with db.session() as session:
        session.add(row)
    return row.id


@retry_on_conflict
def passes(db: Database, host: str | None = None, limit: int = 1,
           pass_id: int | None = None, trigger: str | None = None,
           dry_run: bool | None = None) -> list[models.ReconcilePass]:
    """Newest first; ``dry_run`` False/True keeps only real/dry passes."""
    stmt = sa.select(models.ReconcilePass).order_by(models.ReconcilePass.id.desc()).limit(limit)
    if dry_run is not None:
        stmt = stmt.where(models.ReconcilePass.dry_run == dry_run)
    if trigger:
        stmt = stmt.where(models.ReconcilePass.trigger == trigger)
    if host:
        stmt = stmt.where(models.ReconcilePass.host == host)
    if pass_id is not None:
        stmt = stmt.where(models.ReconcilePass.id == pass_id)
    with db.reading() as session:
        return list(session.scalars(stmt))
