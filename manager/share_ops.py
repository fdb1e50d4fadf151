"""The share operations with more to them than one driver call and one
outcome (``handlers.OWN``): a share's extend and shrink (its replicas too),
access rules. Their statuses, methods and messages come from the operation
table; a share's create and delete are the table's alone
(``operations.by_table``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import messages, vocab
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.drivers.exceptions import ShareBackendException, ShareShrinkingPossibleDataLoss
from sharemgr.manager import driver_args, kinds, operation_table
from sharemgr.manager.access_sync import flush_access, sync_access
from sharemgr.manager.op_errors import OperationFailed, Stale
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)


def resize_share(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if inst0 is None:
        raise Stale(f"share instance {op.ident} is gone")
    driver = ops.driver_for(inst0.host)
    new_size = int(op.args["new_size"])
    spec = operation_table.spec(op.kind, op.action)
    assert spec.method is not None
    name = spec.method
    method = getattr(driver, name)

    def call(inst: models.ShareInstance, _read: object) -> object:
        share_d, server = driver_args.share_parts(ops.db, inst)
        # Replica-aware, as Manila's: every secondary replica takes the size
        # too (its backend's driver; the share's size is theirs). Each is
        # taken first, so its call carries a newer fencing token than any
        # earlier resize's: one left running by a taken-over resize cannot
        # land after this one (doc/reconciliation.rst, "Fencing"). Read and
        # taken before the first driver call: a database away there changes
        # nothing (``Operations.run`` gives the request back), where after
        # it the share ended in error with its backend resized.
        seen = {rep.id: rep.status
                for rep in db_api.query(ops.db, models.ShareInstance, {"share_id": inst.share_id})
                if rep.id != inst.id and kinds.is_secondary(rep)}
        taken = db_leases.take_rows(ops.db, models.ShareInstance, seen) if seen else {}
        replicas = []
        for rep_id in sorted(seen):
            rep = taken.get(rep_id)
            if rep is None:
                LOG.warning("resize of share %s: replica %s changed meanwhile (no longer %s); "
                            "left to whoever changed it", inst.share_id, rep_id, seen[rep_id])
                continue
            replicas.append((rep, *driver_args.share_parts(ops.db, rep)))
        method(share_d, new_size, server)
        for rep, rep_d, rep_server in replicas:
            try:
                getattr(ops.driver_for(rep.host), name)(rep_d, new_size, rep_server)
            except ShareShrinkingPossibleDataLoss as exc:
                # The active replica has shrunk already: not a refusal that
                # changed nothing (error_changes), a failure.
                raise ShareBackendException(f"replica {rep.id}: {exc}") from exc
        return None

    def error_changes(inst: models.ShareInstance, exc: Exception) -> list[Change]:
        # A shrink the backend refused to protect the data changed nothing:
        # the share is available again, as in Manila (the message says why).
        values = {"status": vocab.AVAILABLE} if isinstance(
            exc, ShareShrinkingPossibleDataLoss) else spec.error_values()
        return [(models.ShareInstance, inst.id, {"status": inst.status}, dict(values))]

    try:
        return ops.run(op, Step(
            models.ShareInstance, inst0.id,
            f"{spec.verb} of share instance {inst0.id} to {new_size}", call,
            lambda inst, _r: [
                (models.ShareInstance, inst.id, {"status": inst.status},
                 {"status": spec.success}),
                (models.Share, inst.share_id, {}, {"size": new_size}),
            ],
            error_changes, then=lambda inst, _changes: flush_access(ops, inst)), held)
    except OperationFailed as exc:
        if isinstance(exc.__cause__, ShareShrinkingPossibleDataLoss):
            raise OperationFailed(str(exc), messages.SHRINK_REFUSED) from None
        raise


# Not through ``Operations.run``: the instance's status does not change, and each
# rule's outcome is its own conditional update (a deny that came while the
# driver worked wins over the apply's outcome), not all or nothing.
def update_access(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """Send the share's rules to the driver: the queued ones as changes,
    with the full set; ``resync`` (ensure-resources) sends the full set
    even when nothing is queued."""
    inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if inst0 is None:
        raise Stale(f"share instance {op.ident} is gone")
    with contextlib.nullcontext() if held else ops.locked(vocab.SHARE_INSTANCE, inst0.id):
        inst = ops.fresh(models.ShareInstance, inst0.id, (vocab.AVAILABLE,), take=not held)
        sync_access(ops, inst, resync=bool(op.args.get("resync")))
    return None
