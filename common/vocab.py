"""Manila's status strings and the tables built from them.

The strings are Manila's (manila/common/constants.py), so operators see the
statuses they know. The tables are data: which statuses each resource type may
take (``reset-state`` accepts exactly these) and which are transient.
"""

# Generic statuses.
NEW = "new"
CREATING = "creating"
CREATING_FROM_SNAPSHOT = "creating_from_snapshot"
AVAILABLE = "available"
ACTIVE = "active"
INACTIVE = "inactive"
ERROR = "error"
DELETING = "deleting"
DEFERRED_DELETING = "deferred_deleting"
DELETED = "deleted"
ERROR_DELETING = "error_deleting"
ENSURING = "ensuring"
EXTENDING = "extending"
EXTENDING_ERROR = "extending_error"
SHRINKING = "shrinking"
SHRINKING_ERROR = "shrinking_error"
SHRINKING_POSSIBLE_DATA_LOSS_ERROR = "shrinking_possible_data_loss_error"
MANAGING = "manage_starting"
MANAGE_ERROR = "manage_error"
UNMANAGING = "unmanage_starting"
UNMANAGE_ERROR = "unmanage_error"
UNMANAGED = "unmanaged"
RESTORING = "restoring"
REVERTING = "reverting"
REVERTING_ERROR = "reverting_error"
REPLICATION_CHANGE = "replication_change"
SERVER_MIGRATING = "server_migrating"
SERVER_MIGRATING_TO = "server_migrating_to"
SERVER_NETWORK_CHANGE = "network_change"
BACKUP_CREATING = "backup_creating"
BACKUP_RESTORING = "backup_restoring"
BACKUP_RESTORING_ERROR = "backup_restoring_error"

# Replica states (share_instances.replica_state).
REPLICA_ACTIVE = "active"
REPLICA_IN_SYNC = "in_sync"
REPLICA_OUT_OF_SYNC = "out_of_sync"
REPLICA_ERROR = "error"
REPLICA_STATES = (REPLICA_ACTIVE, REPLICA_IN_SYNC, REPLICA_OUT_OF_SYNC, REPLICA_ERROR)

# Task states that mean another workflow (migration, data copy) owns the instance.
BUSY_TASK_STATES = frozenset(
    {
        "migration_starting",
        "migration_in_progress",
        "migration_completing",
        "migration_driver_starting",
        "migration_driver_in_progress",
        "migration_driver_phase1_done",
        "data_copying_starting",
        "data_copying_in_progress",
        "data_copying_completing",
        "data_copying_completed",
    }
)

# Resource types, as the requests table and the CLI name them.
SHARE_SERVER = "share_server"
SHARE = "share"
SHARE_INSTANCE = "share_instance"
REPLICA = "replica"
SNAPSHOT = "snapshot"
SNAPSHOT_INSTANCE = "snapshot_instance"
SHARE_GROUP = "share_group"
GROUP_SNAPSHOT = "group_snapshot"
BACKUP = "backup"
RECONCILE = "reconcile"  # requests for a reconciliation pass

# Every status each resource type may take; reset-state accepts these.
VALID_STATUSES: dict[str, tuple[str, ...]] = {
    SHARE_INSTANCE: (
        CREATING, CREATING_FROM_SNAPSHOT, AVAILABLE, ERROR, DELETING,
        DEFERRED_DELETING, ERROR_DELETING, ENSURING, EXTENDING, EXTENDING_ERROR,
        SHRINKING, SHRINKING_ERROR, SHRINKING_POSSIBLE_DATA_LOSS_ERROR, MANAGING,
        MANAGE_ERROR, UNMANAGING, UNMANAGE_ERROR, RESTORING, REVERTING, REVERTING_ERROR,
        REPLICATION_CHANGE, SERVER_MIGRATING, SERVER_MIGRATING_TO, BACKUP_CREATING,
        BACKUP_RESTORING, BACKUP_RESTORING_ERROR, INACTIVE,
    ),
    SNAPSHOT_INSTANCE: (
        CREATING, AVAILABLE, ERROR, DELETING, ERROR_DELETING, MANAGING, MANAGE_ERROR,
        UNMANAGING, UNMANAGE_ERROR, RESTORING,
    ),
    SHARE_SERVER: (
        CREATING, ACTIVE, ERROR, DELETING, MANAGING, MANAGE_ERROR, UNMANAGING,
        UNMANAGE_ERROR, SERVER_MIGRATING, SERVER_MIGRATING_TO, SERVER_NETWORK_CHANGE,
        INACTIVE,
    ),
    SHARE_GROUP: (CREATING, AVAILABLE, ERROR, DELETING),
    GROUP_SNAPSHOT: (CREATING, AVAILABLE, ERROR, DELETING),
    BACKUP: (CREATING, AVAILABLE, ERROR, DELETING, RESTORING),
}
# A replica is a share instance; a share's and a snapshot's status are those of
# their (primary) instance.
VALID_STATUSES[REPLICA] = VALID_STATUSES[SHARE_INSTANCE]
VALID_STATUSES[SHARE] = VALID_STATUSES[SHARE_INSTANCE]
VALID_STATUSES[SNAPSHOT] = VALID_STATUSES[SNAPSHOT_INSTANCE]

# Statuses in which an operation is under way: no new operation is accepted.
TRANSIENT_STATUSES = frozenset(
    {
        CREATING, CREATING_FROM_SNAPSHOT, DELETING, DEFERRED_DELETING, ENSURING,
        EXTENDING, SHRINKING, MANAGING, UNMANAGING, RESTORING, REVERTING,
        REPLICATION_CHANGE, SERVER_MIGRATING, SERVER_MIGRATING_TO,
        SERVER_NETWORK_CHANGE, BACKUP_CREATING, BACKUP_RESTORING,
    }
)

ERROR_STATUSES = frozenset(
    {
        ERROR, ERROR_DELETING, EXTENDING_ERROR, SHRINKING_ERROR,
        SHRINKING_POSSIBLE_DATA_LOSS_ERROR, MANAGE_ERROR, UNMANAGE_ERROR,
        REVERTING_ERROR, BACKUP_RESTORING_ERROR,
    }
)

# Request statuses.
REQUEST_PENDING = "pending"
REQUEST_RUNNING = "running"
REQUEST_DONE = "done"
REQUEST_FAILED = "failed"
REQUEST_ABANDONED = "abandoned"

ENGINE_GROUP = b"sharemgr-engines"

# The largest share size, in GiB, that sharemgr accepts: the largest number
# the size columns (a 32-bit signed INTEGER) hold on SQLite, PostgreSQL and
# MariaDB alike, so a size valid on one database is valid on all. Larger
# sizes are refused before anything is written or any driver is called.
MAX_SHARE_SIZE_GB = 2**31 - 1  # 2147483647 GiB, about 2 EiB
