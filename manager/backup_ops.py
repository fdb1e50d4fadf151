"""Backups, two-phase as Manila's: the request starts the driver's create or
restore (``Operations.run``), and the periodic ``*_continue`` tasks
(``continue_backups``) drive it to its end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.manager import driver_args, kinds, operation_table, views
from sharemgr.manager.op_errors import OperationFailed, Stale, log_failure
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations


def _backup(ops: Operations, ident: str) -> models.ShareBackup:
    row: models.ShareBackup | None = db_api.get(ops.db, models.ShareBackup, ident)
    if row is None:
        raise Stale(f"backup {ident} is gone")
    return row


def _backup_share(ops: Operations, backup: models.ShareBackup
                  ) -> tuple[dict[str, object], models.ShareInstance]:
    inst = resources.primary_instance(ops.db, backup.share_id)
    if inst is None:
        raise OperationFailed(f"share {backup.share_id} of backup {backup.id} is gone")
    share_d, _ = driver_args.share_parts(ops.db, inst)
    return share_d, inst


def create_backup(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    spec = operation_table.spec(op.kind, op.action)
    row0 = _backup(ops, op.ident)
    driver = ops.driver_for(row0.host)
    share_d, inst = _backup_share(ops, row0)

    def failed(row: models.ShareBackup, _exc: Exception) -> list[Change]:
        return [(models.ShareBackup, row.id, {"status": row.status}, spec.error_values()),
                (models.ShareInstance, inst.id, {"status": vocab.BACKUP_CREATING},
                 {"status": vocab.AVAILABLE})]

    return ops.run(op, Step(
        models.ShareBackup, row0.id, f"{spec.verb} of backup {row0.id}",
        lambda row, _read: driver.create_backup(share_d, views.backup(row)),
        lambda row, _r: [(models.ShareBackup, row.id, {"status": row.status},
                          {"progress": "0"})],
        failed), held)


def restore_backup(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    spec = operation_table.spec(op.kind, op.action)
    row0 = _backup(ops, op.ident)
    driver = ops.driver_for(row0.host)
    share_d, inst = _backup_share(ops, row0)

    def failed(row: models.ShareBackup, _exc: Exception) -> list[Change]:
        return [
            (models.ShareBackup, row.id, {"status": row.status}, spec.error_values()),
            (
                models.ShareInstance,
                inst.id,
                {"status": vocab.BACKUP_RESTORING},
                {"status": vocab.BACKUP_RESTORING_ERROR},
            ),
        ]

    return ops.run(op, Step(
        models.ShareBackup, row0.id, f"{spec.verb} of backup {row0.id}",
        lambda row, _read: driver.restore_backup(views.backup(row), share_d),
        lambda row, _r: [(models.ShareBackup, row.id, {"status": row.status},
                          {"restore_progress": "0"})],
        failed), held)


def continue_backups(ops: Operations, hosts: list[str]) -> None:
    """Periodic: drive create_backup_continue / restore_backup_continue
    for started backups of these hosts (any engine of the host may; the
    try-lock keeps it to one at a time)."""
    started = {b.id: b.status for b in resources.backups_to_continue(ops.db, hosts)}

    def act(ident: str) -> None:
        status = started[ident]
        column = "progress" if status == vocab.CREATING else "restore_progress"
        _continue_one(ops, ident, status, column)

    ops.coordinator.each_unlocked(kinds.kind(vocab.BACKUP).lock_name, started, act,
                                  "continue task")


def _continue_one(ops: Operations, ident: str, status: str, column: str) -> None:
    backup = db_api.get(ops.db, models.ShareBackup, ident)
    if backup is None or backup.status != status or getattr(backup, column) is None:
        return
    driver = ops.driver_for(backup.host)
    share_d, inst = _backup_share(ops, backup)
    creating = status == vocab.CREATING
    share_busy = vocab.BACKUP_CREATING if creating else vocab.BACKUP_RESTORING
    try:
        if creating:
            result = driver.create_backup_continue(share_d, views.backup(backup))
        else:
            result = driver.restore_backup_continue(views.backup(backup), share_d)
    except Exception as exc:
        log_failure(f"backup {ident}", operation_table.BACKUP_CONTINUE[
            vocab.ACTION_CREATE if creating else vocab.ACTION_RESTORE], exc)
        _settle_backup(ops, ident, status, inst.id, share_busy,
                            {"status": vocab.ERROR if creating else vocab.AVAILABLE},
                            vocab.AVAILABLE if creating else vocab.BACKUP_RESTORING_ERROR)
        return
    progress = _progress((result or {}).get("total_progress", "0"))
    if progress != "100":
        db_api.conditional_update(ops.db, models.ShareBackup, ident, {"status": status},
                                  {column: progress})
        return
    _settle_backup(ops, ident, status, inst.id, share_busy,
                        {"status": vocab.AVAILABLE, column: "100"}, vocab.AVAILABLE)


def _settle_backup(ops: Operations, ident: str, status: str, inst_id: str, share_busy: str,
                   backup_values: Mapping[str, object], share_status: str) -> None:
    """The backup's outcome; the share follows, in the same transaction,
    only if it is still held by the backup (an admin may have reset it),
    so a moved share never keeps the backup from settling. One
    transaction: a reconciliation pass in between saw a share held by a
    backup no longer in progress, and marked it error."""
    db_api.conditional_update_then(
        ops.db, (models.ShareBackup, ident, {"status": status}, backup_values),
        (models.ShareInstance, inst_id, {"status": share_busy}, {"status": share_status}))


def _progress(value: object) -> str:
    """A driver's ``total_progress`` as the backup's progress column holds
    it: a whole percentage when it is a number, else its text cut to fit."""
    try:
        return str(max(0, min(100, int(float(str(value).rstrip("%"))))))
    except (ValueError, OverflowError):  # 'abc', 'nan', 'inf'
        return str(value)[:32]
