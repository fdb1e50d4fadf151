"""The words sharemgr's rows and requests are written in, in one place.

Resource statuses are Manila's strings, so operators see the statuses they
know; the tables built from them are data (which statuses each resource type
may take, which are transient). Then the request vocabulary (types, actions,
statuses) and the stack vocabulary (Heat's actions and statuses). This module
imports nothing from sharemgr: every layer may use it.
"""

from typing import Final

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
# A share instance being moved to another backend, and the one it moves to.
MIGRATING = "migrating"
MIGRATING_TO = "migrating_to"

# Share protocols, as Manila names them.
PROTOCOLS = ("NFS", "CIFS", "CEPHFS", "GLUSTERFS", "HDFS", "MAPRFS")

# Replica states (share_instances.replica_state).
REPLICA_ACTIVE = "active"
REPLICA_IN_SYNC = "in_sync"
REPLICA_OUT_OF_SYNC = "out_of_sync"
REPLICA_ERROR = "error"
REPLICA_STATES = (REPLICA_ACTIVE, REPLICA_IN_SYNC, REPLICA_OUT_OF_SYNC, REPLICA_ERROR)

# Access rules (Manila's share access): a rule's state, the instance's
# access_rules_status, and what a rule may say.
ACCESS_QUEUED_TO_APPLY = "queued_to_apply"
ACCESS_APPLYING = "applying"
ACCESS_ACTIVE = "active"
ACCESS_QUEUED_TO_DENY = "queued_to_deny"
ACCESS_DENYING = "denying"
ACCESS_ERROR: Final = "error"  # Final: the literal a refused rule's answer names
ACCESS_DELETED = "deleted"  # denied and gone from the backend (row kept, deleted_at set)
ACCESS_RULE_STATES = (ACCESS_QUEUED_TO_APPLY, ACCESS_APPLYING, ACCESS_ACTIVE,
                      ACCESS_QUEUED_TO_DENY, ACCESS_DENYING, ACCESS_ERROR, ACCESS_DELETED)
# States of a rule whose change has not reached the backend yet.
ACCESS_IN_FLIGHT = (ACCESS_QUEUED_TO_APPLY, ACCESS_APPLYING, ACCESS_QUEUED_TO_DENY,
                    ACCESS_DENYING)
ACCESS_RULES_SYNCING = "syncing"
ACCESS_RULES_STATUSES = (ACCESS_ACTIVE, ACCESS_RULES_SYNCING, ACCESS_ERROR)
ACCESS_TYPES = ("ip", "user", "cert", "cephx")
ACCESS_LEVELS = ("rw", "ro")

# A share migration's task states (share_instances.task_state), Manila's.
MIGRATION_STARTING = "migration_starting"
MIGRATION_IN_PROGRESS = "migration_in_progress"
MIGRATION_COMPLETING = "migration_completing"
MIGRATION_SUCCESS = "migration_success"
MIGRATION_ERROR = "migration_error"
MIGRATION_CANCELLED = "migration_cancelled"
MIGRATION_CANCEL_IN_PROGRESS = "migration_cancel_in_progress"
MIGRATION_DRIVER_STARTING = "migration_driver_starting"
MIGRATION_DRIVER_IN_PROGRESS = "migration_driver_in_progress"
MIGRATION_DRIVER_PHASE1_DONE = "migration_driver_phase1_done"
MIGRATION_ENDED = (MIGRATION_SUCCESS, MIGRATION_ERROR, MIGRATION_CANCELLED)
# A host-assisted migration's (the engine copies the data): Manila's.
DATA_COPYING_STARTING = "data_copying_starting"
DATA_COPYING_IN_PROGRESS = "data_copying_in_progress"
DATA_COPYING_COMPLETING = "data_copying_completing"
DATA_COPYING_COMPLETED = "data_copying_completed"
DATA_COPYING = (DATA_COPYING_STARTING, DATA_COPYING_IN_PROGRESS, DATA_COPYING_COMPLETED)

# Task states that mean another workflow (migration, data copy) owns the instance.
BUSY_TASK_STATES = frozenset(
    {
        MIGRATION_STARTING,
        MIGRATION_IN_PROGRESS,
        MIGRATION_COMPLETING,
        MIGRATION_CANCEL_IN_PROGRESS,
        MIGRATION_DRIVER_STARTING,
        MIGRATION_DRIVER_IN_PROGRESS,
        MIGRATION_DRIVER_PHASE1_DONE,
        DATA_COPYING_STARTING,
        DATA_COPYING_IN_PROGRESS,
        DATA_COPYING_COMPLETING,
        DATA_COPYING_COMPLETED,
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
STACK_RESOURCE = "stack_resource"  # check requests of a stack traversal

# Every status each resource type may take; reset-state accepts these.
VALID_STATUSES: dict[str, tuple[str, ...]] = {
    SHARE_INSTANCE: (
        CREATING, CREATING_FROM_SNAPSHOT, AVAILABLE, ERROR, DELETING,
        DEFERRED_DELETING, ERROR_DELETING, ENSURING, EXTENDING, EXTENDING_ERROR,
        SHRINKING, SHRINKING_ERROR, SHRINKING_POSSIBLE_DATA_LOSS_ERROR, MANAGING,
        MANAGE_ERROR, UNMANAGING, UNMANAGE_ERROR, RESTORING, REVERTING, REVERTING_ERROR,
        REPLICATION_CHANGE, SERVER_MIGRATING, SERVER_MIGRATING_TO, BACKUP_CREATING,
        BACKUP_RESTORING, BACKUP_RESTORING_ERROR, INACTIVE, MIGRATING, MIGRATING_TO,
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
        SERVER_NETWORK_CHANGE, BACKUP_CREATING, BACKUP_RESTORING, MIGRATING, MIGRATING_TO,
    }
)

ERROR_STATUSES = frozenset(
    {
        ERROR, ERROR_DELETING, EXTENDING_ERROR, SHRINKING_ERROR,
        SHRINKING_POSSIBLE_DATA_LOSS_ERROR, MANAGE_ERROR, UNMANAGE_ERROR,
        REVERTING_ERROR, BACKUP_RESTORING_ERROR,
    }
)

# Error statuses of a resource whose data is still there: an extend, shrink,
# revert, restore, manage or unmanage that failed on a resource that held it.
# A stack never replaces such a resource (the replacement's delete would destroy
# what the failure kept): its node fails until an admin has looked and reset it.
ERRORS_KEEPING_DATA = ERROR_STATUSES - {ERROR, ERROR_DELETING}

# Request statuses.
# A backend of an engine (service_backends.state, sharectl service list).
BACKEND_INITIALIZING = "initializing"  # its first set-up has not ended
BACKEND_UP = "up"
BACKEND_FAILED = "failed"  # its set-up failed; retried with back-off
BACKEND_STATES = (BACKEND_INITIALIZING, BACKEND_UP, BACKEND_FAILED)

# A reconciliation pass as sharectl shows it (reconcile show, status).
PASS_RUNNING = "running"
PASS_FINISHED = "finished"
PASS_FAILED = "failed"  # some resource of it failed

# The health endpoint's overall status (/healthcheck).
HEALTH_OK = "OK"
HEALTH_DEGRADED = "DEGRADED"  # a backend failed, another serves
HEALTH_FAILED = "FAILED"

REQUEST_PENDING = "pending"
REQUEST_RUNNING = "running"
REQUEST_DONE = "done"
REQUEST_FAILED = "failed"
REQUEST_ABANDONED = "abandoned"
REQUEST_OPEN = (REQUEST_PENDING, REQUEST_RUNNING)
REQUEST_STATUSES = (REQUEST_PENDING, REQUEST_RUNNING, REQUEST_DONE, REQUEST_FAILED,
                    REQUEST_ABANDONED)

# Request actions (requests.action).
ACTION_CREATE = "create"
ACTION_DELETE = "delete"
ACTION_EXTEND = "extend"
ACTION_SHRINK = "shrink"
ACTION_RESTORE = "restore"
ACTION_UPDATE_ACCESS = "update_access"  # a share instance's access rules
ACTION_MANAGE = "manage"  # bring an existing backend object under sharemgr
ACTION_UNMANAGE = "unmanage"  # forget a resource, keeping it on the backend
ACTION_REVERT = "revert"  # a share instance to its latest snapshot
ACTION_PROMOTE = "promote"  # a replica made the active one
ACTION_RESYNC = "resync"  # a replica's update_replica_state, now
# A share's migration (manager/migration_ops.py): its source instance's.
ACTION_MIGRATION_START = "migration_start"
ACTION_MIGRATION_COMPLETE = "migration_complete"
ACTION_MIGRATION_CANCEL = "migration_cancel"
ACTION_RUN = "run"  # a reconciliation pass
ACTION_DRIFT = "drift"  # a drift check (reconcile/drift.py)
ACTION_STACK_CHECK = "check"  # sharectl stack check (reconcile/stack_check.py)
ACTION_CHECK = "check_resource"  # a stack node's check

# Stack actions and statuses (Heat's), for stacks and their resources.
STACK_INIT = "INIT"
STACK_CREATE = "CREATE"
STACK_UPDATE = "UPDATE"
STACK_DELETE = "DELETE"
STACK_ROLLBACK = "ROLLBACK"
STACK_CHECK = "CHECK"  # sharectl stack check: not a traversal (reconcile/stack_check.py)
STACK = "stack"  # requests about a whole stack (a check)
STACK_IN_PROGRESS = "IN_PROGRESS"
STACK_COMPLETE = "COMPLETE"
STACK_FAILED = "FAILED"
STACK_ACTIONS = (STACK_INIT, STACK_CREATE, STACK_UPDATE, STACK_DELETE, STACK_ROLLBACK)
RESOURCE_ACTIONS = (STACK_INIT, STACK_CREATE, STACK_UPDATE, STACK_DELETE)
STACK_STATUSES = (STACK_IN_PROGRESS, STACK_COMPLETE, STACK_FAILED)

ENGINE_GROUP = b"sharemgr-engines"

# The largest share size, in GiB, that sharemgr accepts: the largest number
# the size columns (a 32-bit signed INTEGER) hold on SQLite, PostgreSQL and
# MariaDB alike, so a size valid on one database is valid on all. Larger
# sizes are refused before anything is written or any driver is called.
MAX_SHARE_SIZE_GB = 2**31 - 1  # 2147483647 GiB, about 2 EiB
