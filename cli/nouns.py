"""How sharectl shows each resource type: its columns, rows and status.

One ``Noun`` per CLI noun; the generic list/show/delete/reset-state commands
and ``--wait`` work from these. What each resource kind is (its row, lock and
statuses) is in ``manager/kinds.py``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.db import models
    from sharemgr.db.engine import Database
    from sharemgr.db.records import Record
    from sharemgr.manager.intake import Intake

# The database modules (SQLAlchemy) are imported by the functions that query:
# 'sharectl --help' loads every command and needs none of them.

# One resource as 'show' prints it, column -> value; every row has a status.
Row = Mapping[str, object]


class ShareRow(TypedDict):
    id: str
    name: str | None
    size: int
    proto: str
    status: str  # its primary instance's; error when it has none
    host: str | None
    instance_id: str | None
    export_locations: Sequence[object]
    access_rules_status: str | None
    task_state: str | None  # a migration's (doc/migration.rst)
    progress: str | None  # a migration's copy, or a create from a snapshot still copying
    drift: Mapping[str, object] | None  # what the last drift check found (None: it agreed)
    share_server_id: str | None
    snapshot_id: str | None
    share_group_id: str | None
    created_at: datetime.datetime


class InstanceRow(TypedDict):
    id: str
    share_id: str
    host: str
    status: str
    replica_state: str | None
    task_state: str | None
    share_server_id: str | None
    export_locations: Sequence[object]
    drift: Mapping[str, object] | None
    created_at: datetime.datetime


class SnapshotRow(TypedDict):
    id: str
    share_id: str
    name: str | None
    size: int
    status: str  # its live instance's; error when it has none
    instance_id: str | None
    share_instance_id: str | None
    drift: Mapping[str, object] | None
    created_at: datetime.datetime


Deleter = Callable[["Intake", str, bool], object]


@dataclass(frozen=True)
class Noun:
    noun: str  # CLI noun, e.g. "share-server"
    rtype: str  # constants resource type (reset-state, valid statuses)
    columns: tuple[str, ...]
    rows: Callable[[Database], Sequence[Row]]
    one: Callable[[Database, str], Row | None]
    delete: Deleter | None  # how the Intake deletes one (id, force)
    ok_statuses: tuple[str, ...] = (vocab.AVAILABLE,)

    def status(self, db: Database, ident: str) -> str:
        row = self.one(db, ident)
        if row is None:
            return vocab.DELETED
        status = row["status"]
        assert isinstance(status, str)  # a status column is never null
        return status

    def show(self, db: Database, ident: str) -> Row:
        from sharemgr.manager.intake import InvalidRequest

        row = self.one(db, ident)
        if row is None:
            raise InvalidRequest(f"no {self.noun} with id {ident!r}")
        return row


def _share_row(share: models.Share | Record, inst: models.ShareInstance | Record | None
               ) -> ShareRow:
    return {
        "id": share.id, "name": share.name, "size": share.size, "proto": share.share_proto,
        "status": inst.status if inst else vocab.ERROR, "host": inst.host if inst else None,
        "instance_id": inst.id if inst else None,
        "export_locations": inst.export_locations if inst else [],
        "access_rules_status": inst.access_rules_status if inst else None,
        "task_state": inst.task_state if inst else None,
        "progress": f"{inst.progress}%" if inst and inst.progress is not None else None,
        "drift": inst.drift if inst else None,
        "share_server_id": inst.share_server_id if inst else None,
        "snapshot_id": share.snapshot_id, "share_group_id": share.share_group_id,
        "created_at": share.created_at,
    }


def _share_one(db: Database, ident: str) -> ShareRow | None:
    from sharemgr.db import status_reads

    found = status_reads.share_with_status(db, ident)
    return None if found is None else _share_row(*found)


def _instance_row(inst: models.ShareInstance) -> InstanceRow:
    return {
        "id": inst.id, "share_id": inst.share_id, "host": inst.host, "status": inst.status,
        "replica_state": inst.replica_state, "task_state": inst.task_state,
        "share_server_id": inst.share_server_id, "export_locations": inst.export_locations,
        "drift": inst.drift, "created_at": inst.created_at,
    }


def _snapshot_row(snap: models.ShareSnapshot | Record,
                  inst: models.ShareSnapshotInstance | Record | None) -> SnapshotRow:
    return {
        "id": snap.id, "share_id": snap.share_id, "name": snap.name, "size": snap.size,
        "status": inst.status if inst else vocab.ERROR, "instance_id": inst.id if inst else None,
        "share_instance_id": inst.share_instance_id if inst else None,
        "drift": inst.drift if inst else None, "created_at": snap.created_at,
    }


def _snapshot_one(db: Database, ident: str) -> SnapshotRow | None:
    from sharemgr.db import status_reads

    found = status_reads.snapshot_with_status(db, ident)
    return None if found is None else _snapshot_row(*found)


def _replica_one(db: Database, ident: str) -> InstanceRow | None:
    inst = _instance(db, ident)
    return _instance_row(inst) if inst is not None and inst.replica_state else None


def _instance(db: Database, ident: str) -> models.ShareInstance | None:
    from sharemgr.db import api as db_api
    from sharemgr.db import models

    inst: models.ShareInstance | None = db_api.get(db, models.ShareInstance, ident)
    return inst


def _instance_one(db: Database, ident: str) -> InstanceRow | None:
    inst = _instance(db, ident)
    return _instance_row(inst) if inst is not None else None


def _inst_rows(db: Database) -> list[InstanceRow]:
    from sharemgr.db import api as db_api
    from sharemgr.db import models

    return [_instance_row(i) for i in db_api.query(db, models.ShareInstance)]


def _share_rows(db: Database) -> list[ShareRow]:
    from sharemgr.db import status_reads

    return [_share_row(s, i) for s, i in status_reads.shares_with_status(db)]


def _snapshot_rows(db: Database) -> list[SnapshotRow]:
    from sharemgr.db import status_reads

    return [_snapshot_row(s, i) for s, i in status_reads.snapshots_with_status(db)]


def _plain(model_name: str, fields: tuple[str, ...]
           ) -> tuple[Callable[[Database], list[Row]], Callable[[Database, str], Row | None]]:
    """rows/one of a model whose own row holds everything shown."""

    def row(r: object) -> Row:
        return {f: getattr(r, f) for f in fields}

    def rows(db: Database) -> list[Row]:
        from sharemgr.db import api as db_api
        from sharemgr.db import models

        return [row(r) for r in db_api.query(db, getattr(models, model_name))]

    def one(db: Database, ident: str) -> Row | None:
        from sharemgr.db import api as db_api
        from sharemgr.db import models

        r = db_api.get(db, getattr(models, model_name), ident)
        return row(r) if r is not None else None

    return rows, one


_server_rows, _server_one = _plain(
    "ShareServer", ("id", "host", "status", "backend_details", "created_at"))
_group_rows, _group_one = _plain(
    "ShareGroup", ("id", "name", "host", "status", "share_server_id", "created_at"))
_gsnap_rows, _gsnap_one = _plain(
    "ShareGroupSnapshot", ("id", "name", "share_group_id", "status", "created_at"))


def _gsnap_with_members(db: Database, ident: str) -> Row | None:
    """A group snapshot as ``show`` gives it: with the shares it holds."""
    from sharemgr.db import resources

    row = _gsnap_one(db, ident)
    if row is None:
        return None
    return {**row, "members": [m.share_id for m in resources.group_snapshot_members(db, ident)]}


_backup_rows, _backup_one = _plain(
    "ShareBackup", ("id", "name", "share_id", "host", "status", "size", "progress",
                    "restore_progress", "created_at"))

NOUNS: dict[str, Noun] = {
    k.noun: k
    for k in (
        Noun("share", vocab.SHARE,
             ("id", "name", "size", "proto", "status", "host"),
             _share_rows, _share_one, lambda i, ident, force: i.delete_share(ident, force)),
        Noun("share-instance", vocab.SHARE_INSTANCE,
             ("id", "share_id", "host", "status", "replica_state"),
             _inst_rows, _instance_one,
             lambda i, ident, force: i.delete_share_instance(ident, force)),
        Noun("snapshot", vocab.SNAPSHOT, ("id", "share_id", "name", "size", "status"),
             _snapshot_rows, _snapshot_one,
             lambda i, ident, force: i.delete_snapshot(ident, force)),
        Noun("replica", vocab.REPLICA, ("id", "share_id", "host", "status", "replica_state"),
             lambda db: [r for r in _inst_rows(db) if r["replica_state"]],
             _replica_one, lambda i, ident, force: i.delete_replica(ident, force)),
        Noun("share-server", vocab.SHARE_SERVER, ("id", "host", "status"),
             _server_rows, _server_one,
             lambda i, ident, force: i.delete_share_server(ident, force), (vocab.ACTIVE,)),
        Noun("share-group", vocab.SHARE_GROUP, ("id", "name", "host", "status"),
             _group_rows, _group_one,
             lambda i, ident, force: i.delete_share_group(ident, force)),
        Noun("group-snapshot", vocab.GROUP_SNAPSHOT, ("id", "name", "share_group_id", "status"),
             _gsnap_rows, _gsnap_with_members,
             lambda i, ident, force: i.delete_group_snapshot(ident, force)),
        Noun("backup", vocab.BACKUP, ("id", "name", "share_id", "status", "progress"),
             _backup_rows, _backup_one, lambda i, ident, force: i.delete_backup(ident, force)),
    )
}
