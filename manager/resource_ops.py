"""The operations of snapshots, share servers, share groups and group
snapshots (``Operations.perform`` dispatches to them through
``handlers.HANDLERS``), each written through ``Operations.run``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.manager import views
from sharemgr.manager.operations import Stale, deleted
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)


def _snap_host(ops: Operations, ident: str) -> tuple[models.ShareSnapshotInstance, str]:
    snap_inst = db_api.get(ops.db, models.ShareSnapshotInstance, ident)
    if snap_inst is None:
        raise Stale(f"snapshot instance {ident} is gone")
    inst = db_api.get(ops.db, models.ShareInstance, snap_inst.share_instance_id,
                      include_deleted=True)
    return snap_inst, inst.host


def create_snapshot(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    snap0, host = _snap_host(ops, op.ident)
    driver = ops.driver_for(host)

    def ok(row: models.ShareSnapshotInstance, update: Any) -> list[Change]:
        values: dict[str, Any] = {"status": vocab.AVAILABLE, "progress": "100%"}
        if isinstance(update, dict) and update.get("provider_location"):
            values["provider_location"] = str(update["provider_location"])
        return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, values)]

    return ops.run(
        vocab.SNAPSHOT_INSTANCE, models.ShareSnapshotInstance, snap0.id, (vocab.CREATING,),
        lambda row: driver.create_snapshot(*ops.snapshot_parts(row)),
        ok, {"status": vocab.ERROR}, f"create of snapshot instance {snap0.id}",
        held=held,
        method="create_snapshot",
    )


def delete_snapshot(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    snap0, host = _snap_host(ops, op.ident)
    driver = ops.driver_for(host)

    def gone(row: models.ShareSnapshotInstance, _r: Any) -> list[Change]:
        return [
            (models.ShareSnapshotInstance, row.id, {"status": row.status}, deleted()),
            (models.ShareSnapshot, row.snapshot_id, {"deleted_at": None},
             {"deleted_at": models.utcnow()}),
        ]

    return ops.run(
        vocab.SNAPSHOT_INSTANCE, models.ShareSnapshotInstance, snap0.id, (vocab.DELETING,),
        lambda row: driver.delete_snapshot(*ops.snapshot_parts(row)),
        gone, {"status": vocab.ERROR_DELETING}, f"delete of snapshot instance {snap0.id}",
        held=held,
        method="delete_snapshot", force=bool(op.args.get("force")),
    )


def create_share_server(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0 = db_api.get(ops.db, models.ShareServer, op.ident)
    if row0 is None:
        raise Stale(f"share server {op.ident} is gone")
    driver = ops.driver_for(row0.host)
    return ops.run(
        vocab.SHARE_SERVER, models.ShareServer, row0.id, (vocab.CREATING,),
        lambda row: driver.setup_server(views.server(row)),
        lambda row, details: [(models.ShareServer, row.id, {"status": row.status},
                               {"status": vocab.ACTIVE, "backend_details": details or {}})],
        {"status": vocab.ERROR}, f"setup of share server {row0.id}",
        held=held,
        method="setup_server",
    )


def delete_share_server(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0 = db_api.get(ops.db, models.ShareServer, op.ident)
    if row0 is None:
        raise Stale(f"share server {op.ident} is gone")
    driver = ops.driver_for(row0.host)
    return ops.run(
        vocab.SHARE_SERVER, models.ShareServer, row0.id, (vocab.DELETING,),
        lambda row: driver.teardown_server(views.server(row), dict(row.backend_details or {})),
        lambda row, _r: [(models.ShareServer, row.id, {"status": row.status}, deleted())],
        {"status": vocab.ERROR}, f"teardown of share server {row0.id}",
        held=held,
        method="teardown_server", force=bool(op.args.get("force")),
    )


def create_share_group(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0 = db_api.get(ops.db, models.ShareGroup, op.ident)
    if row0 is None:
        raise Stale(f"share group {op.ident} is gone")
    driver = ops.driver_for(row0.host)
    return ops.run(
        vocab.SHARE_GROUP, models.ShareGroup, row0.id, (vocab.CREATING,),
        lambda row: driver.create_share_group(views.group(row),
                                              ops.server_dict(row.share_server_id)),
        lambda row, _r: [(models.ShareGroup, row.id, {"status": row.status},
                          {"status": vocab.AVAILABLE})],
        {"status": vocab.ERROR}, f"create of share group {row0.id}",
        held=held,
        method="create_share_group",
    )


def delete_share_group(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0 = db_api.get(ops.db, models.ShareGroup, op.ident)
    if row0 is None:
        raise Stale(f"share group {op.ident} is gone")
    driver = ops.driver_for(row0.host)
    force = bool(op.args.get("force"))

    def gone(row: models.ShareGroup, _r: Any) -> list[Change]:
        changes: list[Change] = [(models.ShareGroup, row.id, {"status": row.status},
                                  deleted())]
        if force:
            # A forced group delete takes its group snapshots' records along
            # (Manila's force-delete does); their backend objects are not asked.
            gsnaps = db_api.query(ops.db, models.ShareGroupSnapshot,
                                  {"share_group_id": row.id})
            if gsnaps:
                LOG.warning("forced delete of share group %s removes the records of its "
                            "group snapshots %s; they may remain on backend %s",
                            row.id, ", ".join(g.id for g in gsnaps), row.host)
            changes += [(models.ShareGroupSnapshot, g.id, {"status": g.status},
                         deleted()) for g in gsnaps]
        return changes

    return ops.run(
        vocab.SHARE_GROUP, models.ShareGroup, row0.id, (vocab.DELETING,),
        lambda row: driver.delete_share_group(views.group(row),
                                              ops.server_dict(row.share_server_id)),
        gone,
        {"status": vocab.ERROR}, f"delete of share group {row0.id}",
        held=held,
        method="delete_share_group", force=force,
    )


def _gsnap(ops: Operations, ident: str) -> tuple[models.ShareGroupSnapshot, models.ShareGroup]:
    row = db_api.get(ops.db, models.ShareGroupSnapshot, ident)
    if row is None:
        raise Stale(f"group snapshot {ident} is gone")
    return row, db_api.get(ops.db, models.ShareGroup, row.share_group_id, include_deleted=True)


def create_group_snapshot(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0, group = _gsnap(ops, op.ident)
    driver = ops.driver_for(group.host)
    return ops.run(
        vocab.GROUP_SNAPSHOT, models.ShareGroupSnapshot, row0.id, (vocab.CREATING,),
        lambda row: driver.create_share_group_snapshot(
            views.group_snapshot(row, group), ops.server_dict(group.share_server_id)),
        lambda row, _r: [(models.ShareGroupSnapshot, row.id, {"status": row.status},
                          {"status": vocab.AVAILABLE})],
        {"status": vocab.ERROR}, f"create of group snapshot {row0.id}",
        held=held,
        method="create_share_group_snapshot",
    )


def delete_group_snapshot(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    row0, group = _gsnap(ops, op.ident)
    driver = ops.driver_for(group.host)
    return ops.run(
        vocab.GROUP_SNAPSHOT, models.ShareGroupSnapshot, row0.id, (vocab.DELETING,),
        lambda row: driver.delete_share_group_snapshot(
            views.group_snapshot(row, group), ops.server_dict(group.share_server_id)),
        lambda row, _r: [(models.ShareGroupSnapshot, row.id, {"status": row.status},
                          deleted())],
        {"status": vocab.ERROR}, f"delete of group snapshot {row0.id}",
        held=held,
        method="delete_share_group_snapshot", force=bool(op.args.get("force")),
    )
