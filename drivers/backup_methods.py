"""Backups in the share driver contract: create, restore and delete, each
started and then reported on. ``ShareDriver`` (drivers/base.py) inherits
it; drivers import everything from there."""

from __future__ import annotations

from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.drivers.shapes import Backup, ModelUpdate, Progress, Share


class BackupMethods:
    """The backup methods of :class:`~sharemgr.drivers.base.ShareDriver`."""

    # Backups ---------------------------------------------------------------

    def create_backup(self, share: Share, backup: Backup) -> ModelUpdate | None:
        """Start backing up ``share`` as ``backup``; progress comes from
        ``create_backup_continue``.

        :returns: ``None`` or a model update.
        :raises ShareResourceNotFound: the backend has no such share.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_backup")

    def create_backup_continue(self, share: Share, backup: Backup) -> Progress:
        """Report (and advance) a backup started by ``create_backup``.

        :returns: ``{"total_progress": "0".."100"}``; ``"100"`` means done.
        :raises ShareResourceNotFound: the backend has no such backup.
        :raises ShareBackendException: the backup failed.
        """
        raise OperationNotSupported("create_backup_continue")

    def restore_backup(self, backup: Backup, share: Share) -> None:
        """Start restoring ``backup`` into ``share``.

        :raises ShareResourceNotFound: no such backup or share.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("restore_backup")

    def restore_backup_continue(self, backup: Backup, share: Share) -> Progress:
        """Report (and advance) a restore started by ``restore_backup``.

        :returns: ``{"total_progress": "0".."100"}``.
        :raises ShareResourceNotFound: no such backup.
        :raises ShareBackendException: the restore failed.
        """
        raise OperationNotSupported("restore_backup_continue")

    def delete_backup(self, backup: Backup) -> None:
        """Delete a backup. Idempotent: a missing backup counts as deleted.

        :raises ShareBackendException: the backend refused or failed.
        """
        # base.py's _delete_unsupported, here where the base method is defined.
        if type(self).create_backup is BackupMethods.create_backup:
            return None  # it never creates backups: there is nothing to delete
        raise OperationNotSupported("delete_backup")

