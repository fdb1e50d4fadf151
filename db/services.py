"""The engines' records: each engine's services row (start, heartbeat, stop,
clean-up of the dead) and its backends' states (migration 0008)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import sqlalchemy as sa
from sharemgr.db import clock, models, records
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict

utcnow = models.utcnow


@retry_on_conflict
def service_register(db: Database, host: str, binary: str, engine_id: str) -> None:
    # The times by the database's clock, as every heartbeat after them.
    with db.session() as session:
        session.add(models.Service(host=host, binary=binary, engine_id=engine_id,
                                   started_at=clock.now(), heartbeat_at=clock.now()))


@retry_on_conflict
def service_heartbeat(db: Database, engine_id: str, out_of_group: str | None = None) -> bool:
    """The engine's heartbeat, with why it is out of the engines group
    (None: it is a member), for ``sharectl service list``."""
    with db.session() as session:
        stmt = (  # a plain UPDATE (see conditional_update_tx)
            sa.update(models.Service.__table__)
            .where(models.Service.__table__.c.engine_id == engine_id)
            .values(heartbeat_at=clock.now(),  # its age is read by the same clock
                    out_of_group=None if out_of_group is None else out_of_group[:255])
        )
        return records.rowcount(session.execute(stmt)) == 1


@retry_on_conflict
def service_stopped(db: Database, engine_id: str) -> None:
    with db.session() as session:
        session.execute(
            sa.update(models.Service)
            .where(models.Service.engine_id == engine_id)
            .values(stopped_at=clock.now())
        )


@retry_on_conflict
def service_list(db: Database, include_stopped: bool = True) -> list[models.Service]:
    return service_list_at(db, include_stopped)[0]


@retry_on_conflict
def service_list_at(db: Database, include_stopped: bool = True
                    ) -> tuple[list[models.Service], datetime.datetime]:
    """The engines' records and the database's time as they were read: what
    a heartbeat's age is counted by (heartbeats are written by that clock)."""
    stmt = sa.select(models.Service).order_by(models.Service.id)
    if not include_stopped:
        stmt = stmt.where(models.Service.stopped_at.is_(None))
    with db.session() as session:
        return list(session.scalars(stmt)), clock.read_tx(session)


@retry_on_conflict
def service_cleanup(db: Database, alive: set[str], older_than: float) -> list[str]:
    """Delete the records (and backend states) of engines not in ``alive``
    whose last sign of life (stop, heartbeat, start) is at least
    ``older_than`` seconds old; their engine ids."""
    limit = clock.after(sa.literal(-float(older_than)))
    last = sa.func.coalesce(models.Service.stopped_at, models.Service.heartbeat_at,
                            models.Service.started_at)
    with db.session() as session:
        gone = [e for e in session.scalars(
            sa.select(models.Service.engine_id).where(last <= limit)) if e not in alive]
        if gone:
            session.execute(sa.delete(models.ServiceBackend).where(
                models.ServiceBackend.engine_id.in_(gone)))
            session.execute(sa.delete(models.Service).where(
                models.Service.engine_id.in_(gone)))
        return gone


@retry_on_conflict
def service_backend_set(db: Database, engine_id: str, backend: str, state: str,
                        reason: str | None = None) -> None:
    """Record one backend's state for this engine (only the engine writes
    its own rows: an update keyed on the row, an insert the first time)."""
    if reason is not None and len(reason) > models.BACKEND_REASON:
        reason = reason[: models.BACKEND_REASON - 3] + "..."
    values = {"state": state, "reason": reason, "updated_at": utcnow()}
    with db.session() as session:
        done = records.rowcount(session.execute(
            sa.update(models.ServiceBackend)
            .where(models.ServiceBackend.engine_id == engine_id,
                   models.ServiceBackend.backend == backend)
            .values(**values)
        ))
        if not done:
            session.add(models.ServiceBackend(engine_id=engine_id, backend=backend, **values))


@retry_on_conflict
def service_backends(db: Database,
                     engine_ids: Iterable[str]) -> dict[str, list[models.ServiceBackend]]:
    """engine id → its backends' rows, by backend name."""
    ids = list(engine_ids)
    out: dict[str, list[models.ServiceBackend]] = {e: [] for e in ids}
    if not ids:
        return out
    stmt = (sa.select(models.ServiceBackend)
            .where(models.ServiceBackend.engine_id.in_(ids))
            .order_by(models.ServiceBackend.engine_id, models.ServiceBackend.backend))
    with db.reading() as session:
        for row in session.scalars(stmt):
            out[row.engine_id].append(row)
    return out
