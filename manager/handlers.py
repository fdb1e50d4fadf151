"""Which function carries out each (kind, action) of a request: the table
``Operations.perform`` dispatches through and the request runner registers,
made from the operation table. Every operation the table says is carried out
goes through ``operations.by_table`` unless it has a handler of its own
(``OWN``): those are more than one driver call and one outcome."""

from __future__ import annotations

from collections.abc import Iterable

from sharemgr.common import vocab
from sharemgr.manager import (
    backup_ops,
    manage_ops,
    migration_ops,
    replica_ops,
    revert_ops,
    share_ops,
)
from sharemgr.manager.operation_table import TABLE, Spec
from sharemgr.manager.operations import OpHandler, by_table

OWN: dict[tuple[str, str], OpHandler] = {
    # The share's size goes with the instance's status; queued rules after.
    (vocab.SHARE_INSTANCE, vocab.ACTION_EXTEND): share_ops.resize_share,
    (vocab.SHARE_INSTANCE, vocab.ACTION_SHRINK): share_ops.resize_share,
    # Each rule's outcome is its own conditional update.
    (vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS): share_ops.update_access,
    # Two-phase: the periodic *_continue tasks finish them; a failure
    # returns the share too.
    (vocab.BACKUP, vocab.ACTION_CREATE): backup_ops.create_backup,
    (vocab.BACKUP, vocab.ACTION_RESTORE): backup_ops.restore_backup,
    # The driver is given the request's options; its answer is checked.
    (vocab.SHARE_INSTANCE, vocab.ACTION_MANAGE): manage_ops.manage_existing,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_MANAGE): manage_ops.manage_existing_snapshot,
    (vocab.SHARE_SERVER, vocab.ACTION_MANAGE): manage_ops.manage_server,
    # Two rows (the share and its snapshot); the replicas' states.
    (vocab.SHARE_INSTANCE, vocab.ACTION_REVERT): revert_ops.revert,
    (vocab.REPLICA, vocab.ACTION_PROMOTE): replica_ops.promote,
    (vocab.REPLICA, vocab.ACTION_RESYNC): replica_ops.resync,
    # A migration's three requests: the source and the destination instance.
    (vocab.SHARE_INSTANCE, vocab.ACTION_MIGRATION_START): migration_ops.start,
    (vocab.SHARE_INSTANCE, vocab.ACTION_MIGRATION_COMPLETE): migration_ops.complete,
    (vocab.SHARE_INSTANCE, vocab.ACTION_MIGRATION_CANCEL): migration_ops.cancel,
}

def handlers_of(table: Iterable[Spec]) -> dict[tuple[str, str], OpHandler]:
    """Every carried operation of ``table``: its own handler, or ``by_table``."""
    return {spec.key: OWN.get(spec.key, by_table) for spec in table if spec.carried}


HANDLERS = handlers_of(TABLE)
