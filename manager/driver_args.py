"""What each operation's driver method is given, by the spec's key: its
arguments built from the row the call re-read under its lock, and what that
read brought with it (a share instance's share); drivers/base.py documents
the shapes. ``views.py`` makes each dict; the rows they need besides are
read here."""

from __future__ import annotations

from collections.abc import Callable

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.drivers import shapes
from sharemgr.manager import hosts, views
from sharemgr.manager.kinds import Row
from sharemgr.manager.op_errors import OperationFailed, Stale
from sharemgr.manager.plans import Op

# (the database, the operation, the re-read row, what the read brought with it)
Args = Callable[[Database, Op, Row, object], tuple[object, ...]]


def server_dict(db: Database, server_id: str | None) -> dict[str, object] | None:
    if not server_id:
        return None
    row = db_api.get(db, models.ShareServer, server_id, include_deleted=True)
    return views.server(row) if row else None


def share_parts(db: Database, inst: models.ShareInstance, share: models.Share | None = None
                ) -> tuple[dict[str, object], dict[str, object] | None]:
    """The share and its server as the driver is given them (``share``: the
    instance's, when its re-read brought it; read by id otherwise)."""
    if share is None:
        share = db_api.get(db, models.Share, inst.share_id, include_deleted=True)
    return views.share(inst, share), server_dict(db, inst.share_server_id)


def snapshot_parts(db: Database, snap_inst: models.ShareSnapshotInstance
                   ) -> tuple[shapes.Snapshot, dict[str, object] | None]:
    snap = db_api.get(db, models.ShareSnapshot, snap_inst.snapshot_id, include_deleted=True)
    inst = db_api.get(db, models.ShareInstance, snap_inst.share_instance_id,
                      include_deleted=True)
    share = db_api.get(db, models.Share, inst.share_id, include_deleted=True)
    return views.snapshot(snap_inst, snap, inst, share), server_dict(db, inst.share_server_id)


def _with_share(inst: Row, read: object) -> tuple[models.ShareInstance, models.Share]:
    """The instance and the share its re-read brought (Stale: gone)."""
    assert isinstance(inst, models.ShareInstance)
    if not isinstance(read, models.Share):
        raise Stale(f"the share of instance {inst.id} is gone")
    return inst, read


def _new_share(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    """A share's create; from a snapshot (the spec's ``method_when``), the
    snapshot between the share and the server."""
    inst, share = _with_share(row, read)
    share_d, server = share_parts(db, inst, share)
    if inst.status != vocab.CREATING_FROM_SNAPSHOT:
        return share_d, server
    snap_inst = resources.snapshot_instance_of(db, share.snapshot_id) \
        if share.snapshot_id else None
    if snap_inst is None:
        raise OperationFailed(f"snapshot {share.snapshot_id} is gone")
    return share_d, snapshot_parts(db, snap_inst)[0], server


def _share_going(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    """A share's delete, on the backend its request names: an instance found
    on another is Stale, nothing written."""
    inst, share = _with_share(row, read)
    if op.host and (inst.host is None or hosts.host_of(inst.host) != hosts.host_of(op.host)):
        raise Stale(f"share instance {inst.id} is on {inst.host}, not {op.host}")
    return share_parts(db, inst, share)


def _share(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareInstance)
    return share_parts(db, row)


def _snapshot(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareSnapshotInstance)
    return snapshot_parts(db, row)


def _replica_and_active(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareInstance)
    rep_d, server = share_parts(db, row)
    active = resources.primary_instance(db, row.share_id)
    if active is None:
        raise OperationFailed(f"share {row.share_id} has no active instance")
    active_d, _ = share_parts(db, active)
    return rep_d, active_d, server


def _server(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareServer)
    return (views.server(row),)


def _server_and_details(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareServer)
    return views.server(row), dict(row.backend_details or {})


def _group(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareGroup)
    return views.group(row), server_dict(db, row.share_server_id)


def group_snapshot_parts(db: Database, row: Row) -> tuple[object, ...]:
    """A group snapshot's driver arguments: it, with its group and its
    members, and its group's share server."""
    assert isinstance(row, models.ShareGroupSnapshot)
    group = db_api.get(db, models.ShareGroup, row.share_group_id, include_deleted=True)
    if group is None:
        raise Stale(f"the share group of group snapshot {row.id} is gone")
    return (views.group_snapshot(row, group, resources.group_snapshot_members(db, row.id)),
            server_dict(db, group.share_server_id))


def _group_snapshot(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    return group_snapshot_parts(db, row)


def _backup(db: Database, op: Op, row: Row, read: object) -> tuple[object, ...]:
    assert isinstance(row, models.ShareBackup)
    return (views.backup(row),)


_SI, _REP, _SNAP = vocab.SHARE_INSTANCE, vocab.REPLICA, vocab.SNAPSHOT_INSTANCE
_SRV, _GRP, _GSNAP = vocab.SHARE_SERVER, vocab.SHARE_GROUP, vocab.GROUP_SNAPSHOT
_CREATE, _DELETE, _UNMANAGE = vocab.ACTION_CREATE, vocab.ACTION_DELETE, vocab.ACTION_UNMANAGE

# By the spec's key: the method its row's status names (``Spec.methods``) is called.
ARGS: dict[tuple[str, str], Args] = {
    (_SI, _CREATE): _new_share,
    (_SI, _DELETE): _share_going,
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
    (_SI, _UNMANAGE): lambda db, op, row, read: _share(db, op, row, read)[:1],
    (_SNAP, _UNMANAGE): lambda db, op, row, read: _snapshot(db, op, row, read)[:1],
    # Manila's (server_details, security_services): sharemgr has no security services.
    (_SRV, _UNMANAGE): lambda db, op, row, read: (
        _server_and_details(db, op, row, read)[1], []),
}

# Operations whose request names the backend: nothing is read before the
# lock; the share is read with the instance under it (a stack's create and
# delete make one per resource).
REQUEST_NAMES_BACKEND = frozenset({(_SI, _CREATE), (_SI, _DELETE)})
# Their re-read under the lock, by the spec's key (the others': by id).
READS = {key: resources.instance_with_share_tx for key in REQUEST_NAMES_BACKEND}
