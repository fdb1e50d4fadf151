"""The read-only half of the share driver contract: what a backend can do
and holds (capabilities, statuses, the listing for drift). Every method
reads only. ``ShareDriver`` (drivers/base.py) inherits it; drivers import
everything from there."""

from __future__ import annotations

from sharemgr.drivers.shapes import (
    GroupSnapshot,
    ListedShare,
    Replica,
    Share,
    ShareGroup,
    ShareServer,
    ShareStats,
    Snapshot,
    StatusAnswer,
    StatusReport,
)

STATUS_METHODS = (
    "get_share_status",
    "get_snapshot_status",
    "get_replica_status",
    "get_share_group_status",
    "get_share_group_snapshot_status",
)

# The optional batch form of each status method: one backend call for many
# resources (reconciliation after a crash asks about thousands at once).
BATCH_STATUS_METHODS: dict[str, str] = {
    "get_share_status": "get_share_statuses",
    "get_snapshot_status": "get_snapshot_statuses",
    "get_replica_status": "get_replica_statuses",
    "get_share_group_status": "get_share_group_statuses",
    "get_share_group_snapshot_status": "get_share_group_snapshot_statuses",
}



class ReadMethods:
    """The read methods of :class:`~sharemgr.drivers.base.ShareDriver`."""

    # Capabilities ----------------------------------------------------------

    def get_share_stats(self, refresh: bool = False) -> ShareStats:
        """What this backend can do and how much room it has (Manila's shape).

        ``{"share_backend_name", "vendor_name", "driver_version",
        "storage_protocol", "driver_handles_share_servers",
        "snapshot_support", "create_share_from_snapshot_support",
        "replication_type" (None, "readable", "writable" or "dr"),
        "share_group_support", "pools": [{"pool_name", "total_capacity_gb",
        "free_capacity_gb", ...}]}``. The manager calls it periodically and
        stores the answer; intake refuses what the answer rules out. An empty
        dict (the default) reports nothing: every request is sent as before.
        """
        return {}

    # Optional status methods ------------------------------------------------
    # Reconciliation asks these for ground truth after a crash. Each returns a
    # dict with at least "status" ("available" when healthy, "error", or a
    # transient Manila status) and raises ShareResourceNotFound for an object
    # the backend does not have. A driver without one raises NotImplementedError
    # and the manager falls back to marking the resource error. They read only.

    def get_share_status(
        self, share: Share, share_server: ShareServer | None = None
    ) -> StatusReport:
        """:returns: ``{"status", "size", "export_locations"}`` of a share instance."""
        raise NotImplementedError("get_share_status")

    def get_snapshot_status(
        self, snapshot: Snapshot, share_server: ShareServer | None = None
    ) -> StatusReport:
        """:returns: ``{"status", ...}`` of a snapshot instance."""
        raise NotImplementedError("get_snapshot_status")

    def get_replica_status(
        self, replica: Replica, share_server: ShareServer | None = None
    ) -> StatusReport:
        """:returns: ``{"status", "replica_state", "export_locations", ...}``."""
        raise NotImplementedError("get_replica_status")

    def get_share_group_status(
        self, group: ShareGroup, share_server: ShareServer | None = None
    ) -> StatusReport:
        """:returns: ``{"status", ...}`` of a share group."""
        raise NotImplementedError("get_share_group_status")

    def get_share_group_snapshot_status(
        self, group_snapshot: GroupSnapshot, share_server: ShareServer | None = None
    ) -> StatusReport:
        """:returns: ``{"status", ...}`` of a group snapshot."""
        raise NotImplementedError("get_share_group_snapshot_status")

    # Optional listing ------------------------------------------------------------
    # Drift detection (doc/reconciliation.rst, "Drift") asks for the backend's
    # share objects to find orphans: objects named like this manager's that no
    # share instance claims. Read only, like the status methods.

    def list_shares(self) -> list[ListedShare]:
        """:returns: the share objects (shares and replicas) on this backend
            that this driver's naming says belong to the manager, each
            ``{"id": share instance id, "name", "size", "status",
            "export_locations"}`` (only ``id`` is required). Objects of other
            owners are left out: the driver knows its own naming.

        :raises NotImplementedError: the driver cannot list (the default):
            drift detection then finds no orphans.
        """
        raise NotImplementedError("list_shares")

    # Optional batch status methods ------------------------------------------
    # Each takes a list of (resource, share_server) pairs, the arguments of
    # its single method, and answers for many resources in one backend call:
    # ``{id: answer}`` where answer is what the single method returns for that
    # resource, or the ShareResourceNotFound it raises. Ids left out are asked
    # one by one with the single method; NotImplementedError (the default) or
    # any other exception means the manager asks every resource one by one.

    def get_share_statuses(
        self, shares: list[tuple[Share, ShareServer | None]]
    ) -> dict[str, StatusAnswer]:
        """:returns: ``{share instance id: get_share_status answer}``.

        :raises NotImplementedError: the driver has no batch form.
        """
        raise NotImplementedError("get_share_statuses")

    def get_snapshot_statuses(
        self, snapshots: list[tuple[Snapshot, ShareServer | None]]
    ) -> dict[str, StatusAnswer]:
        """:returns: ``{snapshot instance id: get_snapshot_status answer}``."""
        raise NotImplementedError("get_snapshot_statuses")

    def get_replica_statuses(
        self, replicas: list[tuple[Replica, ShareServer | None]]
    ) -> dict[str, StatusAnswer]:
        """:returns: ``{replica id: get_replica_status answer}``."""
        raise NotImplementedError("get_replica_statuses")

    def get_share_group_statuses(
        self, groups: list[tuple[ShareGroup, ShareServer | None]]
    ) -> dict[str, StatusAnswer]:
        """:returns: ``{group id: get_share_group_status answer}``."""
        raise NotImplementedError("get_share_group_statuses")

    def get_share_group_snapshot_statuses(
        self, group_snapshots: list[tuple[GroupSnapshot, ShareServer | None]]
    ) -> dict[str, StatusAnswer]:
        """:returns: ``{group snapshot id: get_share_group_snapshot_status answer}``."""
        raise NotImplementedError("get_share_group_snapshot_statuses")
