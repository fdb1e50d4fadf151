"""The one handler of every operation that is one driver call and one outcome
(most of ``operation_table.TABLE``): the spec says the statuses, the driver
method and the messages; what is left to say per operation is here, as two
small tables:

- ``DRIVER_ARGS``: the arguments of each spec's driver method, built from
  the re-read row (drivers/base.py documents them);
- ``DONE``: what a success writes besides the spec's ``success`` status (a
  delete's record going, a share going with its last instance, a server's
  backend details).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.manager import kinds, operation_table, views
from sharemgr.manager.op_errors import OperationFailed, Stale
from sharemgr.manager.operations import Step, deleted
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

Row = models.ShareInstance | models.ShareSnapshotInstance | models.ShareServer \
    | models.ShareGroup | models.ShareGroupSnapshot | models.ShareBackup


def carry_out(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """Carry out ``op`` by its spec, through ``Operations.run``: lock,
    re-read, call the spec's driver method, write the outcome."""
    spec = operation_table.spec(op.kind, op.action)
    kind = kinds.kind(op.kind)
    row0 = db_api.get(ops.db, kind.model, op.ident)
    if row0 is None:
        raise Stale(f"{kind.what} {op.ident} is gone")
    host = kind.host_of(ops.db, row0)
    if host is None:
        raise Stale(f"{kind.what} {op.ident} is on no backend")
    assert spec.method is not None, spec.key
    method = getattr(ops.driver_for(host), spec.method)
    args, done = DRIVER_ARGS[spec.key], DONE.get(spec.key, _status)
    force = spec.forcible and bool(op.args.get("force"))
    return ops.run(op, Step(
        kind.model, row0.id, f"{spec.verb} of {kind.what} {row0.id}",
        lambda row, _read: method(*args(ops, row)),
        lambda row, result: done(ops, spec, row, result, force), force=force), held)


# What a success writes -------------------------------------------------------------

Done = Callable[["Operations", operation_table.Spec, Row, object, bool], list[Change]]


def _status(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
            force: bool) -> list[Change]:
    values = deleted() if spec.success == vocab.DELETED else {"status": spec.success}
    return [(type(row), row.id, {"status": row.status}, values)]


def _share_gone(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                force: bool) -> list[Change]:
    assert isinstance(row, models.ShareInstance)
    return ops.share_gone_changes(row)


def _replica_made(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                  force: bool) -> list[Change]:
    made = result if isinstance(result, dict) else {}
    return [(models.ShareInstance, row.id, {"status": row.status}, {
        "status": vocab.AVAILABLE,
        "replica_state": made.get("replica_state") or vocab.REPLICA_IN_SYNC,
        "export_locations": views.export_locations(made.get("export_locations")),
    })]


def _snapshot_made(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                   force: bool) -> list[Change]:
    values: dict[str, object] = {"status": vocab.AVAILABLE, "progress": "100%"}
    if isinstance(result, dict) and result.get("provider_location"):
        values["provider_location"] = str(result["provider_location"])
    return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, values)]


def _snapshot_gone(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                   force: bool) -> list[Change]:
    assert isinstance(row, models.ShareSnapshotInstance)
    return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, deleted()),
            (models.ShareSnapshot, row.snapshot_id, {"deleted_at": None},
             {"deleted_at": models.utcnow()})]


def _server_set_up(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                   force: bool) -> list[Change]:
    return [(models.ShareServer, row.id, {"status": row.status},
             {"status": vocab.ACTIVE, "backend_details": result or {}})]


def _group_gone(ops: Operations, spec: operation_table.Spec, row: Row, result: object,
                force: bool) -> list[Change]:
    changes = _status(ops, spec, row, result, force)
    if force:
        # A forced group delete takes its group snapshots' records along
        # (Manila's force-delete does); their backend objects are not asked.
        gsnaps = db_api.query(ops.db, models.ShareGroupSnapshot, {"share_group_id": row.id})
        if gsnaps:
            LOG.warning("forced delete of share group %s removes the records of its "
                        "group snapshots %s; they may remain on backend %s",
                        row.id, ", ".join(g.id for g in gsnaps), getattr(row, "host", None))
        changes += [(models.ShareGroupSnapshot, g.id, {"status": g.status}, deleted())
                    for g in gsnaps]
    return changes


DONE: dict[tuple[str, str], Done] = {
    (vocab.REPLICA, vocab.ACTION_CREATE): _replica_made,
    (vocab.REPLICA, vocab.ACTION_DELETE): _share_gone,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_CREATE): _snapshot_made,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_DELETE): _snapshot_gone,
    (vocab.SHARE_SERVER, vocab.ACTION_CREATE): _server_set_up,
    (vocab.SHARE_GROUP, vocab.ACTION_DELETE): _group_gone,
    # Unmanage: the records go as a delete's do; the objects stay.
    (vocab.SHARE_INSTANCE, vocab.ACTION_UNMANAGE): _share_gone,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_UNMANAGE): _snapshot_gone,
}


# What each driver method is given ---------------------------------------------------

Args = Callable[["Operations", Row], tuple[object, ...]]


def _share(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareInstance)
    return ops.share_parts(row)


def _snapshot(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareSnapshotInstance)
    return ops.snapshot_parts(row)


def _replica_and_active(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareInstance)
    rep_d, server = ops.share_parts(row)
    active = resources.primary_instance(ops.db, row.share_id)
    if active is None:
        raise OperationFailed(f"share {row.share_id} has no active instance")
    active_d, _ = ops.share_parts(active)
    return rep_d, active_d, server


def _server(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareServer)
    return (views.server(row),)


def _server_and_details(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareServer)
    return views.server(row), dict(row.backend_details or {})


def _group(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareGroup)
    return views.group(row), ops.server_dict(row.share_server_id)


def _group_snapshot(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareGroupSnapshot)
    group = db_api.get(ops.db, models.ShareGroup, row.share_group_id, include_deleted=True)
    if group is None:
        raise Stale(f"the share group of group snapshot {row.id} is gone")
    return views.group_snapshot(row, group), ops.server_dict(group.share_server_id)


def _backup(ops: Operations, row: Row) -> tuple[object, ...]:
    assert isinstance(row, models.ShareBackup)
    return (views.backup(row),)


_SI, _REP, _SNAP = vocab.SHARE_INSTANCE, vocab.REPLICA, vocab.SNAPSHOT_INSTANCE
_SRV, _GRP, _GSNAP = vocab.SHARE_SERVER, vocab.SHARE_GROUP, vocab.GROUP_SNAPSHOT
_CREATE, _DELETE, _UNMANAGE = vocab.ACTION_CREATE, vocab.ACTION_DELETE, vocab.ACTION_UNMANAGE

# By the spec's key: its ``method`` is the one called.
DRIVER_ARGS: dict[tuple[str, str], Args] = {
    (_REP, _CREATE): _replica_and_active,
    (_REP, _DELETE): _share,
    (_SNAP, _CREATE): _snapshot,
    (_SNAP, _DELETE): _snapshot,
    (_SRV, _CREATE): _server,
    (_SRV, _DELETE): _server_and_details,
    (_GRP, _CREATE): _group,
    (_GRP, _DELETE): _group,
    (_GSNAP, _CREATE): _group_snapshot,
    (_GSNAP, _DELETE): _group_snapshot,
    (vocab.BACKUP, _DELETE): _backup,
    (_SI, _UNMANAGE): lambda ops, row: _share(ops, row)[:1],
    (_SNAP, _UNMANAGE): lambda ops, row: _snapshot(ops, row)[:1],
    # Manila's (server_details, security_services): sharemgr has no security services.
    (_SRV, _UNMANAGE): lambda ops, row: (_server_and_details(ops, row)[1], []),
}
