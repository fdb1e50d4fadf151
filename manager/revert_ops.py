"""Reverting a share to its latest snapshot (Manila's revert): the plan and
the handler. The share instance goes ``reverting`` and the snapshot instance
``restoring``; the driver's ``revert_to_snapshot`` is called; success leaves
both ``available``, a failure the share ``reverting_error`` and the snapshot
``available`` (it is intact). A crash in between is settled by the spec's
rules (manager/operation_table.py): the share marked ``reverting_error``, the
snapshot marked ``available``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models, quiet
from sharemgr.db.engine import Database
from sharemgr.manager import access, driver_args, kinds, operation_table
from sharemgr.manager.op_errors import Stale
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op, Plan, Refused, need, share, snapshot

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations


def plan_revert(db: Database, snapshot_id: str) -> Plan:
    """Revert the snapshot's share to it: only to the share's latest snapshot,
    of the share's size, on a share without replicas (as Manila)."""
    snap, snap_inst = snapshot(db, snapshot_id)
    row, inst = share(db, snap.share_id)
    what = f"share {row.id} to snapshot {snapshot_id}"
    snaps = db_api.query(db, models.ShareSnapshot, {"share_id": row.id})
    latest = max(snaps, key=lambda s: (s.created_at, s.id)) if snaps else None
    if latest is None or latest.id != snap.id:
        raise Refused(f"cannot revert {what}: only the share's latest snapshot "
                      f"({latest.id if latest else 'none'}) can be reverted to")
    if snap.size != row.size:
        raise Refused(f"cannot revert {what}: the share is {row.size} GiB, the snapshot "
                      f"{snap.size} GiB (resize the share back first)")
    if any(kinds.is_secondary(i) for i in
           db_api.query(db, models.ShareInstance, {"share_id": row.id})):
        raise Refused(f"cannot revert {what}: the share has replicas")
    spec = operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_REVERT)
    need(inst.status, spec.starts_from, f"share {row.id}", "revert")
    need(snap_inst.status, (vocab.AVAILABLE,), f"snapshot {snapshot_id}", "revert to")
    return Plan(row.id, [], [
        (models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
         {"status": spec.transient[0]}),
        (models.ShareSnapshotInstance, snap_inst.id, {"status": vocab.AVAILABLE},
         {"status": vocab.RESTORING}),
        # Written only if the share is still the size checked above: a
        # resize that began and ended meanwhile left its instance available.
        quiet.anchor(row.id, {"size": row.size}),
    ], Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_REVERT, inst.host,
          {"snapshot_instance_id": snap_inst.id}), row=row)


def revert(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    spec = operation_table.spec(op.kind, op.action)
    inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if inst0 is None:
        raise Stale(f"share instance {op.ident} is gone")
    snap_id = str(op.args["snapshot_instance_id"])
    driver = ops.driver_for(inst0.host)

    def snap_back() -> Change:
        # The snapshot is intact whatever the revert did.
        return (models.ShareSnapshotInstance, snap_id, {"status": vocab.RESTORING},
                {"status": vocab.AVAILABLE})

    def call(inst: models.ShareInstance, _read: object) -> object:
        snap_inst = db_api.get(ops.db, models.ShareSnapshotInstance, snap_id)
        if snap_inst is None or snap_inst.status != vocab.RESTORING:
            raise Stale(f"snapshot instance {snap_id} is "
                        f"{getattr(snap_inst, 'status', 'gone')}, not restoring")
        snap_d, server = driver_args.snapshot_parts(ops.db, snap_inst)
        rules = [access.view(r) for r in db_access.rules_of(ops.db, inst.share_id)
                 if r.state == vocab.ACCESS_ACTIVE]
        driver.revert_to_snapshot(snap_d, rules, [], server)
        return None

    def failed(inst: models.ShareInstance, _exc: Exception) -> list[Change]:
        return [(models.ShareInstance, inst.id, {"status": inst.status}, spec.error_values()),
                snap_back()]

    return ops.run(op, Step(
        models.ShareInstance, inst0.id,
        f"{spec.verb} of share instance {inst0.id} to snapshot instance {snap_id}", call,
        lambda inst, _r: [(models.ShareInstance, inst.id, {"status": inst.status},
                           {"status": spec.success}), snap_back()],
        failed), held)
