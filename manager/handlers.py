"""Which function carries out each (kind, action) of a request: the table
``Operations.perform`` dispatches through, and the request runner registers
(one place to add an operation's handler)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.manager import backup_ops, resource_ops, share_ops
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

Handler = Callable[["Operations", Op, bool], "list[Change] | None"]

HANDLERS: dict[tuple[str, str], Handler] = {
    (vocab.SHARE_INSTANCE, vocab.ACTION_CREATE): share_ops.create_share,
    (vocab.SHARE_INSTANCE, vocab.ACTION_DELETE): share_ops.delete_share,
    (vocab.SHARE_INSTANCE, vocab.ACTION_EXTEND): share_ops.resize_share,
    (vocab.SHARE_INSTANCE, vocab.ACTION_SHRINK): share_ops.resize_share,
    (vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS): share_ops.update_access,
    (vocab.REPLICA, vocab.ACTION_CREATE): share_ops.create_replica,
    (vocab.REPLICA, vocab.ACTION_DELETE): share_ops.delete_replica,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_CREATE): resource_ops.create_snapshot,
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_DELETE): resource_ops.delete_snapshot,
    (vocab.SHARE_SERVER, vocab.ACTION_CREATE): resource_ops.create_share_server,
    (vocab.SHARE_SERVER, vocab.ACTION_DELETE): resource_ops.delete_share_server,
    (vocab.SHARE_GROUP, vocab.ACTION_CREATE): resource_ops.create_share_group,
    (vocab.SHARE_GROUP, vocab.ACTION_DELETE): resource_ops.delete_share_group,
    (vocab.GROUP_SNAPSHOT, vocab.ACTION_CREATE): resource_ops.create_group_snapshot,
    (vocab.GROUP_SNAPSHOT, vocab.ACTION_DELETE): resource_ops.delete_group_snapshot,
    (vocab.BACKUP, vocab.ACTION_CREATE): backup_ops.create_backup,
    (vocab.BACKUP, vocab.ACTION_DELETE): backup_ops.delete_backup,
    (vocab.BACKUP, vocab.ACTION_RESTORE): backup_ops.restore_backup,
}
