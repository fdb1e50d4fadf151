"""Share migration in the share driver contract, driver-assisted as Manila's:
the source backend's driver moves a share instance to a destination
instance on another backend it can reach (doc/migration.rst). A driver
that cannot lends the engine its shares' data for a host-assisted one
(``migration_data_path``).
``ShareDriver`` (drivers/base.py) inherits it; drivers import everything
from there.

Every method gets the source share instance and the destination one (the
dicts of every share call: ``id``, ``host``, ``size``, ``share_proto``,
``fence_token`` …), the source's snapshots with their destination ids
(``snapshot_mappings``: source snapshot instance id → destination id; empty
unless snapshots are preserved) and both share servers. The manager calls
them under the source instance's lock, one call at a time per migration,
and calls each again after a crash: they must be idempotent.
"""

from __future__ import annotations

from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.drivers.shapes import (
    MigrationCompatibility,
    MigrationUpdate,
    Progress,
    Share,
    ShareServer,
    Snapshot,
)

INCOMPATIBLE: MigrationCompatibility = {
    "compatible": False, "writable": False, "nondisruptive": False,
    "preserve_metadata": False, "preserve_snapshots": False}


class MigrationMethods:
    """The migration methods of :class:`~sharemgr.drivers.base.ShareDriver`."""

    def migration_check_compatibility(
            self, source_share: Share, destination_share: Share,
            share_server: ShareServer | None = None,
            destination_share_server: ShareServer | None = None) -> MigrationCompatibility:
        """Whether this driver can move ``source_share`` to
        ``destination_share`` (on another backend, maybe of another driver),
        and what it keeps meanwhile. Changes nothing.

        :returns: a ``MigrationCompatibility``; the base class answers
            incompatible, so a driver that implements nothing is never asked
            to migrate.
        """
        return dict(INCOMPATIBLE)  # type: ignore[return-value]

    def migration_start(self, source_share: Share, destination_share: Share,
                        source_snapshots: list[Snapshot], snapshot_mappings: dict[str, str],
                        share_server: ShareServer | None = None,
                        destination_share_server: ShareServer | None = None) -> None:
        """Begin moving the share: make the destination and start the copy
        (phase 1). The source stays served. Idempotent: a start of a
        migration already started changes nothing.

        :raises ShareBackendException: it cannot start; nothing is left on
            the destination.
        """
        raise OperationNotSupported("migration_start")

    def migration_continue(self, source_share: Share, destination_share: Share,
                           source_snapshots: list[Snapshot], snapshot_mappings: dict[str, str],
                           share_server: ShareServer | None = None,
                           destination_share_server: ShareServer | None = None) -> bool:
        """Drive phase 1 on (called periodically).

        :returns: True once the copy is done and ``migration_complete`` may
            switch the share over; False while it goes on.
        :raises ShareBackendException: the copy failed; the source is intact.
        """
        raise OperationNotSupported("migration_continue")

    def migration_complete(self, source_share: Share, destination_share: Share,
                           source_snapshots: list[Snapshot], snapshot_mappings: dict[str, str],
                           share_server: ShareServer | None = None,
                           destination_share_server: ShareServer | None = None
                           ) -> MigrationUpdate | None:
        """Phase 2: make the destination the share (its last changes
        copied, served with its export locations) and delete the source
        from its backend. Idempotent: once done, a second call answers the
        same.

        :returns: the destination's ``export_locations``.
        :raises ShareBackendException: it failed; the migration ends in
            error with the source left as it was.
        """
        raise OperationNotSupported("migration_complete")

    def migration_cancel(self, source_share: Share, destination_share: Share,
                         source_snapshots: list[Snapshot], snapshot_mappings: dict[str, str],
                         share_server: ShareServer | None = None,
                         destination_share_server: ShareServer | None = None) -> None:
        """Stop a migration before it completes and remove the destination;
        the source is left as it was. Idempotent: a destination already
        gone is success.
        """
        raise OperationNotSupported("migration_cancel")

    def migration_get_progress(self, source_share: Share, destination_share: Share,
                               source_snapshots: list[Snapshot],
                               snapshot_mappings: dict[str, str],
                               share_server: ShareServer | None = None,
                               destination_share_server: ShareServer | None = None
                               ) -> Progress:
        """How far phase 1 is: ``{"total_progress": "0".."100"}``."""
        raise OperationNotSupported("migration_get_progress")

    def migration_data_path(self, share: Share, share_server: ShareServer | None = None
                            ) -> str:
        """A host-assisted migration's view of a share's data: a folder on
        this host holding the share's files, which the engine's data mover
        reads (source) or writes (destination) directly. It stays valid
        while the share exists; the driver's own calls about the share
        still come meanwhile (access rules, delete). Changes nothing.

        :raises OperationNotSupported: the driver cannot lend its shares
            (the base class): no host-assisted migration from or to it.
        :raises ShareResourceNotFound: no such share.
        """
        raise OperationNotSupported("migration_data_path")
