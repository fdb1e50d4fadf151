"""The share driver contract.

A driver is a subclass of ``ShareDriver`` registered under the entry point
namespace ``sharemgr.share_drivers``. The manager creates one driver object per
enabled backend (config group) and calls the methods below, often from several
threads at once and, on one host, from several processes (engines) at once.

The manager passes plain dicts, never ORM objects (see doc/drivers.rst for every
shape). The ids in them are the ids of the *instances* the backend holds (share
instance, snapshot instance, ...); logical ids (``share_id``, ``snapshot_id``,
...) come along for naming and bookkeeping.

Error rules, for every method:

* A failure the driver understands raises a ``ShareBackendException``
  subclass; ``ShareResourceNotFound`` when the backend has no such object.
* Deletes are idempotent: deleting an object that is already gone succeeds.
* An operation the driver does not implement raises ``OperationNotSupported``
  (what the base class does); status methods raise plain ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Mapping

from oslo_config import cfg
from sharemgr.drivers.backup_methods import BackupMethods
from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.drivers.manage_methods import ManageMethods
from sharemgr.drivers.migration_methods import MigrationMethods
from sharemgr.drivers.read_methods import BATCH_STATUS_METHODS, STATUS_METHODS, ReadMethods

# The dicts of the contract, named here too: drivers read them as
# ``base.Share``, ``base.StatusAnswer``, ...
from sharemgr.drivers.shapes import (
    AccessRule,
    Backup,
    ExportLocation,
    GroupSnapshot,
    JSONDict,
    ListedShare,
    ManagedShare,
    ManagedSnapshot,
    MigrationCompatibility,
    MigrationUpdate,
    ModelUpdate,
    Progress,
    Replica,
    ReplicaState,
    ReplicaUpdate,
    RuleError,
    RuleKey,
    Share,
    ShareGroup,
    ShareServer,
    ShareStats,
    ShareUpdate,
    Snapshot,
    StatusAnswer,
    StatusReport,
)

# What drivers import from here: the class, the names of its status methods
# and the dicts of the contract. The methods are defined in groups beside this
# module (backup_methods, manage_methods, read_methods), the class is this one.
__all__ = [
    "BATCH_STATUS_METHODS", "STATUS_METHODS", "ShareDriver", "AccessRule", "Backup",
    "ExportLocation", "GroupSnapshot", "JSONDict", "ListedShare", "ManagedShare",
    "ManagedSnapshot", "MigrationCompatibility", "MigrationUpdate", "ModelUpdate", "Progress",
    "Replica", "ReplicaState", "ReplicaUpdate", "RuleError", "Share", "ShareGroup",
    "ShareServer", "ShareStats", "ShareUpdate", "Snapshot", "StatusAnswer", "StatusReport",
]


def _delete_unsupported(driver: object, create: str, delete: str) -> None:
    """The base class's ``delete``: a driver that keeps the base class's
    ``create`` (never creates that object kind) has none to delete, so
    deleting one (a row left by a failed create) succeeds and the row never
    blocks its parent; one that creates them and does not delete them is
    refused."""
    if getattr(type(driver), create) is not getattr(ShareDriver, create):
        raise OperationNotSupported(delete)


class ShareDriver(BackupMethods, ManageMethods, MigrationMethods, ReadMethods):
    """Base class of share drivers: the backend operations the manager uses.

    Subclasses override what their backend supports; every other operation
    raises ``OperationNotSupported``.
    """

    #: Options the loader registers on the backend's config group before it
    #: constructs the driver (and validates by reading them).
    driver_opts: list[cfg.Opt] = []

    #: The values of ``driver_handles_share_servers`` this driver works with
    #: (Manila's drivers pass the same list to their base class). The loader
    #: refuses a backend configured with another.
    supported_dhss_modes: tuple[bool, ...] = (False, True)

    #: Whether this driver honours fencing tokens (doc/drivers.rst,
    #: "Fencing"). Every dict the manager passes that names a backend object
    #: carries ``fence_token``: an int that grows each time an engine takes
    #: the resource (a claim, a take-over, a reconciliation), or None. A
    #: driver that honours them keeps, per backend object id and durably, the
    #: highest token it has accepted (also for an id it has no object for),
    #: and refuses every call about that id, status reads included, whose
    #: token is lower, by raising ``FencedCall`` before it changes anything;
    #: an equal or higher token is accepted and becomes the highest. With
    #: such a driver a call from an engine that lost the resource (paused
    #: past its lease, cut off) cannot take effect; without it the manager
    #: waits for the previous call's hard deadline before a take-over.
    honours_fencing: bool = False

    def __init__(
        self,
        configuration: cfg.ConfigOpts.GroupAttr,
        *,
        backend_name: str,
        host: str,
        engine_id: str,
        state_path: str,
    ) -> None:
        """Keep the configuration; no backend I/O here (that is ``do_setup``).

        :param configuration: the backend's config group (``conf[backend]``,
            an oslo.config GroupAttr) with the base backend options and this
            class's ``driver_opts`` registered.
        :param backend_name: name of the config group, e.g. ``"dummy"``.
        :param host: the manager's ``host``; resources belong to
            ``<host>@<backend_name>``.
        :param engine_id: id of the engine (process) that drives this object.
        :param state_path: the manager's ``state_path`` folder, for drivers
            that keep local state.
        :raises Exception: anything; the loader reports it as a load error.
        """
        self.configuration = configuration
        self.backend_name = backend_name
        self.host = host
        self.engine_id = engine_id
        self.state_path = state_path

    # Properties ---------------------------------------------------------

    @property
    def driver_handles_share_servers(self) -> bool:
        """Whether this backend creates share servers (DHSS), from config."""
        return bool(self.configuration.driver_handles_share_servers)

    @property
    def backend_host(self) -> str:
        """``<host>@<backend>``, the host string of this backend's resources."""
        return f"{self.host}@{self.backend_name}"

    @property
    def share_backend_name(self) -> str:
        """Name shown to users: ``share_backend_name`` or the group name."""
        return self.configuration.share_backend_name or self.backend_name

    # Set-up -------------------------------------------------------------

    def do_setup(self) -> None:
        """Connect to the backend and prepare it; called once at start.

        :raises ShareBackendException: the backend cannot be used.
        Idempotent: calling it again must do no harm.
        """

    def check_for_setup_error(self) -> None:
        """Check the backend is usable after ``do_setup``; called once at start.

        :raises ShareBackendException: with a message saying what is wrong.
        """

    def get_backend_info(self) -> JSONDict:
        """A description of the backend's configuration for ``ensure_shares``.

        The manager stores it and skips ``ensure_shares`` at start when it has
        not changed. An empty dict means "cannot tell", so the manager always
        runs ``ensure_shares``.

        :returns: a JSON-serialisable dict. Read-only.
        """
        return {}

    def ensure_shares(self, shares: list[Share]) -> dict[str, ShareUpdate]:
        """Check that existing shares are exported as recorded; fix what can be.

        :param shares: share instance dicts this backend should hold.
        :returns: ``{instance id: {"export_locations": [...], "status": ...}}``
            for the shares whose record must change; shares left out are kept
            as they are. The base class returns ``{}``.
        :raises ShareBackendException: the check as a whole failed.
        Idempotent.
        """
        return {}

    # Shares ---------------------------------------------------------------

    def create_share(
        self, share: Share, share_server: ShareServer | None = None
    ) -> list[ExportLocation]:
        """Create a share of ``share["size"]`` GiB with protocol ``share_proto``.

        :param share: share instance dict; its ``id`` names the backend object.
        :param share_server: the server dict on a DHSS backend (required
            there), ``None`` otherwise.
        :returns: export locations, dicts ``{"path": str, "is_admin_only":
            bool, "preferred": bool}``.
        :raises InvalidShareRequest: e.g. no share server on a DHSS backend.
        :raises ShareBackendException: the backend failed.
        Called again with the same id after a crash, a driver should return
        the existing share's export locations rather than fail.
        """
        raise OperationNotSupported("create_share")

    def create_share_from_snapshot(
        self, share: Share, snapshot: Snapshot, share_server: ShareServer | None = None
    ) -> list[ExportLocation] | dict[str, object]:
        """Create a share holding the data of ``snapshot``.

        :param share: the new share instance dict (``snapshot_id`` set).
        :param snapshot: snapshot instance dict the data comes from.
        :param share_server: as for ``create_share``.
        :returns: export locations, as ``create_share``; or, as Manila's
            drivers may, ``{"status": "available" | "creating_from_snapshot",
            "export_locations": [...], "progress": "40%"}``. With
            ``creating_from_snapshot`` the copy goes on in the backend after
            the call: the manager keeps the share in that status and asks
            ``get_share_status`` (which the driver must then have) every
            ``clone_poll_interval`` until it answers ``available`` (its
            export locations are recorded) or an error.
        :raises ShareResourceNotFound: the backend has no such snapshot.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_share_from_snapshot")

    def delete_share(self, share: Share, share_server: ShareServer | None = None) -> None:
        """Delete a share instance.

        :raises ShareBackendException: the backend refused or failed.
        Idempotent: a share that does not exist counts as deleted.
        """
        raise OperationNotSupported("delete_share")

    def extend_share(
        self, share: Share, new_size: int, share_server: ShareServer | None = None
    ) -> None:
        """Grow a share to ``new_size`` GiB (``share["size"]`` is the old size).

        :raises ShareResourceNotFound: the backend has no such share.
        :raises InvalidShareRequest: ``new_size`` is smaller than the size.
        :raises ShareBackendException: the backend failed.
        Idempotent for the same ``new_size``.
        """
        raise OperationNotSupported("extend_share")

    def shrink_share(
        self, share: Share, new_size: int, share_server: ShareServer | None = None
    ) -> None:
        """Shrink a share to ``new_size`` GiB.

        :raises ShareResourceNotFound: the backend has no such share.
        :raises InvalidShareRequest: ``new_size`` is larger than the size, or
            the data would not fit.
        :raises ShareBackendException: the backend failed.
        Idempotent for the same ``new_size``.
        """
        raise OperationNotSupported("shrink_share")

    # Snapshots --------------------------------------------------------------

    def create_snapshot(
        self, snapshot: Snapshot, share_server: ShareServer | None = None
    ) -> ModelUpdate | None:
        """Snapshot the share instance ``snapshot["share_instance_id"]``.

        :returns: ``None`` or a model update (``status``, ``size``,
            ``export_locations``; the manager ignores other keys).
        :raises ShareResourceNotFound: the backend has no such share.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_snapshot")

    def delete_snapshot(
        self, snapshot: Snapshot, share_server: ShareServer | None = None
    ) -> None:
        """Delete a snapshot instance.

        Idempotent: a snapshot that does not exist counts as deleted.
        :raises ShareBackendException: the backend refused or failed.
        """
        raise OperationNotSupported("delete_snapshot")

    # Replicas --------------------------------------------------------------

    def create_replica(
        self,
        replica: Replica,
        active_replica: Replica,
        share_server: ShareServer | None = None,
    ) -> ReplicaUpdate:
        """Create a replica (a share instance) of ``active_replica``.

        :returns: ``{"export_locations": [...], "replica_state": "in_sync" |
            "out_of_sync" | "error"}``.
        :raises ShareResourceNotFound: the backend has no active replica.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_replica")

    def delete_replica(self, replica: Replica, share_server: ShareServer | None = None) -> None:
        """Delete a replica. Idempotent: a missing replica counts as deleted.

        :raises ShareBackendException: the backend refused or failed.
        """
        _delete_unsupported(self, "create_replica", "delete_replica")

    def promote_replica(
        self,
        replica_list: list[Replica],
        replica: Replica,
        access_rules: list[AccessRule],
        share_server: ShareServer | None = None,
    ) -> list[ReplicaState]:
        """Make ``replica`` the active replica of its share (Manila's
        ``promote_replica``). ``replica_list``: every replica of the share,
        the active one included (``replica_state`` says which).

        :returns: the new ``{"id", "replica_state"}`` of each replica whose
            state changed: ``replica`` ``active``, the old active ``in_sync``
            or ``out_of_sync`` (missing ids keep their state).
        :raises ShareBackendException: the backend failed; the states are
            unknown (the manager marks ``replica``'s state ``error``).
        """
        raise OperationNotSupported("promote_replica")

    def update_replica_state(
        self,
        replica_list: list[Replica],
        replica: Replica,
        access_rules: list[AccessRule],
        share_server: ShareServer | None = None,
    ) -> str | None:
        """Bring a non-active ``replica`` up to date and say how it stands
        (Manila's ``update_replica_state``), called periodically
        (``replica_state_update_interval``) and by ``sharectl replica resync``.

        :returns: ``in_sync``, ``out_of_sync``, ``error``, or None (unchanged).
        :raises ShareResourceNotFound: the backend has no such replica.
        """
        raise OperationNotSupported("update_replica_state")

    def revert_to_snapshot(
        self,
        snapshot: Snapshot,
        share_access_rules: list[AccessRule],
        snapshot_access_rules: list[AccessRule],
        share_server: ShareServer | None = None,
    ) -> None:
        """Revert the share instance ``snapshot["share_instance_id"]`` to
        ``snapshot`` (Manila's ``revert_to_snapshot``); the manager only asks
        for the share's latest snapshot. The share takes the snapshot's size
        (``snapshot["size"]``).

        :raises ShareResourceNotFound: the backend has no such share or snapshot.
        :raises ShareBackendException: the backend failed (the share goes to
            ``reverting_error``, the snapshot back to ``available``).
        """
        raise OperationNotSupported("revert_to_snapshot")

    # Share groups ------------------------------------------------------------

    def create_share_group(
        self, group: ShareGroup, share_server: ShareServer | None = None
    ) -> ModelUpdate | None:
        """Create a share group.

        :returns: ``None`` or a model update (``status``).
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_share_group")

    def delete_share_group(
        self, group: ShareGroup, share_server: ShareServer | None = None
    ) -> None:
        """Delete a share group. Idempotent: a missing group counts as deleted.

        :raises ShareBackendException: the backend refused or failed.
        """
        _delete_unsupported(self, "create_share_group", "delete_share_group")

    def create_share_group_snapshot(
        self, group_snapshot: GroupSnapshot, share_server: ShareServer | None = None
    ) -> ModelUpdate | None:
        """Snapshot the group ``group_snapshot["share_group_id"]``: each share
        of ``group_snapshot["members"]`` (``share_id``, ``share_instance_id``,
        ``size``, ``share_proto``), together, as one consistent point.

        :returns: ``None`` or a model update (``status``).
        :raises ShareResourceNotFound: the backend has no such group.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("create_share_group_snapshot")

    def delete_share_group_snapshot(
        self, group_snapshot: GroupSnapshot, share_server: ShareServer | None = None
    ) -> None:
        """Delete a group snapshot. Idempotent: a missing one counts as deleted.

        :raises ShareBackendException: the backend refused or failed.
        """
        _delete_unsupported(self, "create_share_group_snapshot", "delete_share_group_snapshot")

    # Share servers (DHSS) ------------------------------------------------------

    def setup_server(
        self, server: ShareServer, network_info: Mapping[str, object] | None = None
    ) -> JSONDict:
        """Create the share server ``server["id"]`` on a DHSS backend.

        :param network_info: network allocations, when the manager has any.
        :returns: ``backend_details``, a JSON-serialisable dict the manager
            stores on the server and passes back in ``server["backend_details"]``.
        :raises InvalidShareRequest: the backend does not handle share servers.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("setup_server")

    def teardown_server(self, server: ShareServer, backend_details: Mapping[str, object]
                        ) -> None:
        """Delete a share server.

        :param backend_details: what ``setup_server`` returned (may be empty
            when set-up failed half-way).
        Idempotent: a missing server counts as deleted.
        :raises ShareBackendException: the backend refused (e.g. the server
            still holds shares) or failed.
        """
        _delete_unsupported(self, "setup_server", "teardown_server")

    # Access rules ------------------------------------------------------------

    def update_access(
        self,
        share: Share,
        access_rules: list[AccessRule],
        add_rules: list[AccessRule],
        delete_rules: list[AccessRule],
        share_server: ShareServer | None = None,
    ) -> Mapping[str, RuleError | RuleKey] | None:
        """Make the backend's export of ``share`` allow exactly ``access_rules``.

        Manila's shape. Each rule is ``{"id", "access_type" ("ip", "user",
        "cert", "cephx"), "access_to", "access_level" ("rw", "ro")}``. ``access_rules``
        is the full set the share should have; ``add_rules`` and
        ``delete_rules`` are what changed since the last call. When both are
        empty (recovery after a crash, ensure-resources) the driver must make
        the backend match ``access_rules`` exactly: the call is idempotent.

        :returns: None when every rule was applied, or ``{rule_id: {"state":
            "error"}}`` for the rules the backend refused (the others are
            taken as applied); a rule applied with a key the client needs
            (a cephx rule: Manila's ``access_key``) is answered
            ``{"access_key": key}``, stored on the rule and shown by
            ``sharectl access list``.
        :raises OperationNotSupported: the backend has no access control.
        """
        raise OperationNotSupported("update_access")
