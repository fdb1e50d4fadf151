"""The dicts of the driver contract (doc/drivers.rst, "Arguments: plain
dicts", and the docstrings of ``base.ShareDriver``): what the manager passes
and what a driver answers. ``base`` re-exports every name.

A driver's answers are TypedDicts with the documented keys. The manager's
arguments stay open dicts: the manager builds them from its rows
(manager/views.py) with more keys than a driver reads (``fence_token``, the
parent's dict, ...), and a driver reads the keys it needs.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

from sharemgr.common.jsontypes import JSONValue
from sharemgr.drivers.exceptions import ShareResourceNotFound

# The manager's arguments, documented in doc/drivers.rst.
Share = dict[str, Any]
Snapshot = dict[str, Any]
Replica = dict[str, Any]
ShareServer = dict[str, Any]
ShareGroup = dict[str, Any]
GroupSnapshot = dict[str, Any]
Backup = dict[str, Any]
#: ``{"id", "access_type" ("ip", "user", "cert"), "access_to", "access_level" ("rw", "ro")}``
AccessRule = dict[str, Any]

#: What ``get_backend_info`` and ``setup_server`` return: stored as JSON.
JSONDict = dict[str, JSONValue]


class ExportLocation(TypedDict):
    path: str
    is_admin_only: bool
    preferred: bool


class ModelUpdate(TypedDict, total=False):
    """What a create may return for the manager to record; other keys are
    ignored."""

    status: str
    size: int
    export_locations: list[ExportLocation]


class ShareUpdate(TypedDict, total=False):
    """``ensure_shares``' answer for one share whose record must change."""

    status: Required[str]
    export_locations: list[ExportLocation]


class ManagedShare(TypedDict, total=False):
    """What ``manage_existing`` returns (Manila's shape)."""

    size: Required[int]  # GiB, a whole number of at least 1
    export_locations: list[ExportLocation]  # left out: the path the user gave is kept


class ManagedSnapshot(TypedDict, total=False):
    """What ``manage_existing_snapshot`` returns (Manila's shape)."""

    size: int  # GiB; left out, the share's size is recorded (as Manila)
    provider_location: str  # left out, the one the user gave is kept


class ReplicaUpdate(TypedDict):
    """What ``create_replica`` returns."""

    export_locations: list[ExportLocation]
    # "in_sync", "out_of_sync" or "error"; None (or none) is read as "in_sync"
    replica_state: str | None


class ReplicaState(TypedDict):
    """One replica's new state, as ``promote_replica`` answers it."""

    id: str
    replica_state: str


class Progress(TypedDict):
    """What ``create_backup_continue`` and ``restore_backup_continue`` return."""

    total_progress: str  # "0".."100"; "100" means done


class MigrationCompatibility(TypedDict):
    """What ``migration_check_compatibility`` answers (Manila's keys)."""

    compatible: bool  # False: the driver cannot move this share there
    writable: bool  # clients may write to the source while it moves
    nondisruptive: bool  # clients keep their export throughout
    preserve_metadata: bool  # modes, owners, times and xattrs kept
    preserve_snapshots: bool  # the share's snapshots move with it


class MigrationUpdate(TypedDict, total=False):
    """What ``migration_complete`` may answer for the destination."""

    export_locations: list[ExportLocation]


class RuleError(TypedDict):
    """``update_access``' answer for a rule the backend refused: its
    ``reason`` (one line) goes into the user message of the request."""

    state: Literal["error"]
    reason: NotRequired[str]


class RuleKey(TypedDict):
    """``update_access``' answer for a rule applied with a key the client
    needs (a cephx rule: Manila's ``access_key``)."""

    access_key: str


class StatusReport(TypedDict, total=False):
    """A status method's answer: ``status`` and what the method documents."""

    status: Required[str]  # Manila's: "available" when healthy, "error", a transient one
    size: int | None  # GiB; None (or no size) tells nothing: it is not recorded
    export_locations: list[ExportLocation]
    replica_state: str
    detail: str | None  # why it is not healthy, for a person reading the answer
    # False: the backend holds the share but its servers do not serve it as
    # last applied (no export, other clients); ``detail`` says how. Left
    # out: the driver cannot tell. Drift re-applies it (kind not_served).
    served: bool


# A batch status method's answer for one resource: what the single method
# returns, or the ShareResourceNotFound it raises.
StatusAnswer = StatusReport | ShareResourceNotFound


class ListedShare(TypedDict, total=False):
    """One share object of ``list_shares``; only ``id`` is required."""

    id: Required[str]  # the share instance id
    name: str | None
    size: int | None
    status: str
    export_locations: list[ExportLocation]


#: A capacity in GiB, or Manila's words "infinite" / "unknown".
Capacity = int | float | str


class PoolStats(TypedDict, total=False):
    pool_name: Required[str]
    total_capacity_gb: Required[Capacity]
    free_capacity_gb: Required[Capacity]
    allocated_capacity_gb: Capacity
    provisioned_capacity_gb: float
    reserved_percentage: float
    thin_provisioning: bool
    max_over_subscription_ratio: float


class ShareStats(TypedDict, total=False):
    """``get_share_stats``' answer, Manila's shape; ``{}`` reports nothing."""

    share_backend_name: str
    vendor_name: str
    driver_version: str
    storage_protocol: str
    driver_handles_share_servers: bool
    snapshot_support: bool
    create_share_from_snapshot_support: bool
    replication_type: str | None  # None, "readable", "writable" or "dr"
    # Backends that report the same one may hold replicas of each other's
    # shares (Manila's); without one, a share's replicas stay on its backend.
    replication_domain: str | None
    share_group_support: bool
    total_capacity_gb: Capacity  # a backend without pools reports its capacity here
    free_capacity_gb: Capacity
    pools: list[PoolStats]
    # What the backend's rules may say, per protocol (drivers/access_rules.py):
    # {"NFS": {"ip": {"ipv6_max_prefix": 99}}, ...}; intake refuses the rest.
    access_rule_limits: dict[str, dict[str, dict[str, object]]]
    # What its share migration keeps (manager/migration_plans.py): intake
    # refuses a flag not declared true. {"driver_assisted": True,
    # "writable": True, "preserve_snapshots": False, ...}
    migration_support: dict[str, bool]
