"""Queries about share resources that the manager and the CLI need."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, quiet, records
from sharemgr.db.engine import Database
from sharemgr.db.models import H, S
from sharemgr.db.records import Record
from sqlalchemy.orm import InstrumentedAttribute, Session


def host_match(column: InstrumentedAttribute[str] | InstrumentedAttribute[str | None], host: str
               ) -> sa.ColumnElement[bool]:
    """'host@backend' itself or one of its pools ('host@backend#pool'), never
    'host@backend2'."""
    escaped = host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return sa.or_(column == host, column.like(escaped + "#%", escape="\\"))


def primary_instance(db: Database, share_id: str) -> models.ShareInstance | None:
    """The share's primary instance: the oldest live one that is not a
    secondary replica."""
    stmt = (
        sa.select(models.ShareInstance)
        .where(
            models.ShareInstance.share_id == share_id,
            models.ShareInstance.deleted_at.is_(None),
            sa.or_(models.ShareInstance.replica_state.is_(None),
                   models.ShareInstance.replica_state == vocab.REPLICA_ACTIVE),
        )
        .order_by(models.ShareInstance.created_at, models.ShareInstance.id)
        .limit(1)
    )
    with db.reading() as session:
        return session.scalars(stmt).first()


# Built once with a parameter: a share operation re-reads its row at each
# step, and building the statement cost more than running it.
_INSTANCE_WITH_SHARE = (
    sa.select(models.ShareInstance, models.Share)
    .outerjoin(models.Share, models.Share.id == models.ShareInstance.share_id)
    .where(models.ShareInstance.id == sa.bindparam("id"),
           models.ShareInstance.deleted_at.is_(None))
    .execution_options(populate_existing=True)
)


def instance_with_share_tx(session: Session, instance_id: str
                           ) -> tuple[models.ShareInstance | None, models.Share | None]:
    """A live share instance and its share (deleted or not), in one
    statement of the caller's transaction: what a share operation re-reads
    under its lock and gives the driver."""
    found = session.execute(_INSTANCE_WITH_SHARE, {"id": instance_id}).first()
    return (None, None) if found is None else (found[0], found[1])


_INSTANCES_WITH_SHARES = (
    sa.select(models.ShareInstance, models.Share)
    .outerjoin(models.Share, models.Share.id == models.ShareInstance.share_id)
    .where(models.ShareInstance.id.in_(sa.bindparam("ids", expanding=True)),
           models.ShareInstance.deleted_at.is_(None))
    .execution_options(populate_existing=True)
)


def instances_with_shares(db: Database, instance_ids: Sequence[str]
                          ) -> dict[str, tuple[models.ShareInstance, models.Share | None]]:
    """``instance_with_share_tx`` of several instances, in one statement of a
    read-only transaction of its own (a stack's batch of creates re-reads
    them so, under their locks); an instance gone or deleted is absent."""
    with db.reading() as session:
        return {inst.id: (inst, share) for inst, share in
                session.execute(_INSTANCES_WITH_SHARES, {"ids": list(instance_ids)})}


def snapshot_instance_of(db: Database, snapshot_id: str) -> models.ShareSnapshotInstance | None:
    stmt = (
        sa.select(models.ShareSnapshotInstance)
        .where(models.ShareSnapshotInstance.snapshot_id == snapshot_id,
               models.ShareSnapshotInstance.deleted_at.is_(None))
        .order_by(models.ShareSnapshotInstance.created_at)
        .limit(1)
    )
    with db.reading() as session:
        return session.scalars(stmt).first()


def _share_to_delete_stmt() -> records.Query:
    s, si = models.Share.__table__, models.ShareInstance.__table__
    snap = models.ShareSnapshot.__table__
    snapshots = (sa.select(sa.func.count()).select_from(snap)
                 .where(snap.c.share_id == s.c.id, snap.c.deleted_at.is_(None))
                 .scalar_subquery())
    bk = models.ShareBackup.__table__
    backups = (sa.select(sa.func.count()).select_from(bk)
               .where(bk.c.share_id == s.c.id, bk.c.deleted_at.is_(None))
               .scalar_subquery())
    gs, gm = models.ShareGroupSnapshot.__table__, models.ShareGroupSnapshotMember.__table__
    held = (sa.select(sa.func.count(sa.distinct(gs.c.id)))
            .select_from(gs.join(gm, gm.c.share_group_snapshot_id == gs.c.id))
            .where(gm.c.share_id == s.c.id, gs.c.deleted_at.is_(None))
            .scalar_subquery())
    return (sa.select(s, si, snapshots.label("snapshots"), backups.label("backups"),
                      held.label("group_snapshots"))
            .select_from(s.outerjoin(si, sa.and_(si.c.share_id == s.c.id,
                                                 si.c.deleted_at.is_(None))))
            .where(s.c.id == sa.bindparam("id"), s.c.deleted_at.is_(None))
            .order_by(si.c.created_at, si.c.id))


# Built once, on the tables (no ORM): a stack's delete reads it per resource,
# and building and running it through the ORM was a tenth of such a delete.
_SHARE_TO_DELETE = _share_to_delete_stmt()


class ToDelete(NamedTuple):
    """A share to delete: its row, its live instances, the numbers of its
    live snapshots and backups and of the live group snapshots holding it."""

    share: Record | None
    live: list[Record]
    snapshots: int
    backups: int
    group_snapshots: int


NOT_LIVE = ToDelete(None, [], 0, 0, 0)


def share_to_delete(db: Database, share_id: str) -> ToDelete:
    """A live share, its live instances (oldest first) and the numbers of
    its live snapshots, backups and group snapshots, in one statement: what a delete's plan
    checks (a stack's delete makes one per resource), as read-only records.
    ``NOT_LIVE`` when the share is not live."""
    s, si = models.Share.__table__, models.ShareInstance.__table__
    with db.connect() as conn:
        rows = conn.execute(_SHARE_TO_DELETE, {"id": share_id}).all()
    if not rows:
        return NOT_LIVE
    pairs = [records.pair(r, s, si) for r in rows]
    return ToDelete(pairs[0][0], [inst for _share, inst in pairs if inst is not None],
                    int(rows[0].snapshots or 0), int(rows[0].backups or 0),
                    int(rows[0].group_snapshots or 0))


def _gone_if_last() -> sa.ColumnElement[Any]:
    si, s = models.ShareInstance.__table__, models.Share.__table__
    live = sa.exists().where(si.c.share_id == sa.bindparam("g_share"), si.c.deleted_at.is_(None))
    return sa.case((live, s.c.deleted_at),
                   else_=sa.func.coalesce(s.c.deleted_at,
                                         sa.bindparam("g_now", type_=s.c.deleted_at.type)))


# Built once (db_api.Computed): a share's delete writes it.
_GONE_IF_LAST = _gone_if_last()


def share_gone_with_last_instance(share_id: str) -> list[db_api.Change]:
    """Changes that delete the share once no live instance is left, to end
    a change list that deletes one of its instances: decided in SQL, in the
    writing transaction. A read before that transaction (as this was) is a
    transaction more per delete, and two deletes of a share's last two
    instances could each see the other's instance and both keep the share.
    The share's row is written first (``quiet.anchor``): on PostgreSQL and
    MariaDB a second such transaction waits there for the first, and the
    decision, a statement of its own (READ COMMITTED: a fresh snapshot),
    sees the first's delete. Both changes match any row of the share, so
    the list never loses on them."""
    gone = db_api.Computed(_GONE_IF_LAST, {"g_share": share_id, "g_now": models.utcnow()})
    return [quiet.anchor(share_id), (models.Share, share_id, {}, {"deleted_at": gone})]


def group_shares(db: Database, group_id: str) -> list[models.Share]:
    """The group's live shares, oldest first."""
    with db.reading() as session:
        return list(session.scalars(
            sa.select(models.Share).where(models.Share.share_group_id == group_id,
                                          models.Share.deleted_at.is_(None))
            .order_by(models.Share.created_at, models.Share.id)))


def group_snapshot_members(db: Database, group_snapshot_id: str
                           ) -> list[models.ShareGroupSnapshotMember]:
    """The shares a group snapshot was taken of, oldest share first."""
    m = models.ShareGroupSnapshotMember
    with db.reading() as session:
        return list(session.scalars(sa.select(m).where(m.share_group_snapshot_id
                                                       == group_snapshot_id)
                                    .order_by(m.created_at, m.share_id)))


def live_count(db: Database, model: type[models.Live], **filters: object) -> int:
    stmt = sa.select(sa.func.count()).select_from(model).where(model.deleted_at.is_(None))
    for column, value in filters.items():
        stmt = stmt.where(getattr(model, column) == value)
    with db.reading() as session:
        return session.scalar(stmt) or 0


def _children_on_host(db: Database, child: type[S], parent: type[H],
                      link: InstrumentedAttribute[str], host: str, statuses: list[str] | None
                      ) -> list[tuple[S, H]]:
    """Live ``child`` rows whose ``parent`` (which carries the host) is on
    ``host``, as (child, parent) pairs."""
    stmt = (
        sa.select(child, parent)
        .join(parent, link == parent.id)
        .where(host_match(parent.host, host), child.deleted_at.is_(None))
    )
    if statuses is not None:
        stmt = stmt.where(child.status.in_(statuses))
    with db.reading() as session:
        return [(found, of) for found, of in session.execute(stmt)]


def snapshot_instances_on_host(
    db: Database, host: str, statuses: list[str] | None = None
) -> list[tuple[models.ShareSnapshotInstance, models.ShareInstance]]:
    """Snapshot instances whose share instance lives on ``host``."""
    return _children_on_host(db, models.ShareSnapshotInstance, models.ShareInstance,
                             models.ShareSnapshotInstance.share_instance_id, host, statuses)


def group_snapshots_on_host(
    db: Database, host: str, statuses: list[str] | None = None
) -> list[tuple[models.ShareGroupSnapshot, models.ShareGroup]]:
    """Group snapshots whose share group lives on ``host``."""
    return _children_on_host(db, models.ShareGroupSnapshot, models.ShareGroup,
                             models.ShareGroupSnapshot.share_group_id, host, statuses)


def backend_info_hash(db: Database, host: str) -> str | None:
    with db.reading() as session:
        row = session.get(models.BackendInfo, host)
        return row.info_hash if row else None


def set_backend_info_hash(db: Database, host: str, info_hash: str) -> None:
    """Insert or update ``host``'s row in one statement (an upsert): engines
    of one host starting together all write it, and a read-then-insert
    lets two of them insert (IntegrityError on the primary key)."""
    db_api.upsert(db, models.BackendInfo, "host", {
        "host": host, "info_hash": info_hash, "updated_at": models.utcnow()})


def on_host(
    db: Database, model: type[H], host: str,
    statuses: list[str] | tuple[str, ...] | None = None,
    extra: Mapping[str, object] | None = None,
) -> list[H]:
    """Live rows of ``model`` on ``host`` ('host@backend'), pools included,
    and never 'host@backend2'."""
    stmt = sa.select(model).where(model.deleted_at.is_(None), host_match(model.host, host))
    if statuses is not None:
        stmt = stmt.where(model.status.in_(list(statuses)))
    for column, value in (extra or {}).items():
        stmt = stmt.where(getattr(model, column) == value)
    with db.reading() as session:
        return list(session.scalars(stmt.order_by(model.created_at)))


def _backup_started() -> sa.ColumnElement[bool]:
    """Backups being created or restored whose driver call has started (their
    progress column set): the continue tasks' work."""
    backup = models.ShareBackup
    return sa.and_(backup.deleted_at.is_(None), sa.or_(
        sa.and_(backup.status == vocab.CREATING, backup.progress.is_not(None)),
        sa.and_(backup.status == vocab.RESTORING, backup.restore_progress.is_not(None))))


def clones_in_progress(db: Database, hosts: list[str]) -> list[models.ShareInstance]:
    """Share instances of these hosts whose create from a snapshot goes on
    in the backend after its call returned (status creating_from_snapshot,
    progress set): the status poll's work, in one query."""
    inst = models.ShareInstance
    stmt = sa.select(inst).where(sa.or_(*(host_match(inst.host, h) for h in hosts)),
                                 inst.deleted_at.is_(None),
                                 inst.status == vocab.CREATING_FROM_SNAPSHOT,
                                 inst.progress.is_not(None))
    with db.reading() as session:
        return list(session.scalars(stmt))


def backups_to_continue(db: Database, hosts: list[str]) -> list[models.ShareBackup]:
    """The started backups of these hosts, in one query."""
    stmt = sa.select(models.ShareBackup).where(models.ShareBackup.host.in_(hosts),
                                               _backup_started())
    with db.reading() as session:
        return list(session.scalars(stmt))


def backup_in_progress(db: Database, share_id: str) -> bool:
    """A live backup of the share whose create or restore has started."""
    stmt = sa.select(sa.func.count()).select_from(models.ShareBackup).where(
        models.ShareBackup.share_id == share_id, _backup_started())
    with db.reading() as session:
        return (session.scalar(stmt) or 0) > 0


def rows_by_id(db: Database, model: type[models.Live], ids: list[str] | set[str],
               include_deleted: bool = False, chunk: int = 500) -> dict[str, Any]:
    """Rows of ``model`` with these ids, by id, in one query per ``chunk``
    ids (the reconciliation pass reads a batch at once); soft-deleted rows
    only with ``include_deleted``."""
    ids = list(dict.fromkeys(i for i in ids if i is not None))
    # Rows of any class: the reconciler's kinds name theirs as a bare ``type``.
    found: dict[str, Any] = {}
    with db.reading() as session:
        for start in range(0, len(ids), chunk):
            stmt = sa.select(model).where(model.id.in_(ids[start:start + chunk]))
            if not include_deleted and hasattr(model, "deleted_at"):
                stmt = stmt.where(model.deleted_at.is_(None))
            found.update((row.id, row) for row in session.scalars(stmt))
    return found
