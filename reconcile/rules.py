"""What startup reconciliation does for each resource type and transient
status (spec 002, ARCHITECTURE §6), as data.

``query``: ask the backend with the optional status method; healthy →
``ok``, anything else (error, missing, not implemented, None, no status,
an exception, a healthy answer the manager cannot record such as a resize
without a usable size) → ``error``. ``delete``: retry the idempotent driver delete;
success → deleted, failure → ``error``. ``mark``: the operation cannot be
resumed: set ``error``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sharemgr.manager import constants as C

QUERY = "query"
DELETE = "delete"
MARK = "mark"


@dataclass(frozen=True)
class Rule:
    action: str
    error: str
    ok: str | None = None
    method: str | None = None  # the driver's status method for QUERY


def query(method: str, error: str = C.ERROR, ok: str = C.AVAILABLE) -> Rule:
    return Rule(QUERY, error, ok, method)


def delete(error: str) -> Rule:
    return Rule(DELETE, error, C.DELETED)


def mark(error: str) -> Rule:
    return Rule(MARK, error)


RULES: dict[str, dict[str, Rule]] = {
    C.SHARE_SERVER: {
        C.CREATING: mark(C.ERROR),
        C.MANAGING: mark(C.MANAGE_ERROR),
        C.UNMANAGING: mark(C.UNMANAGE_ERROR),
        C.SERVER_NETWORK_CHANGE: mark(C.ERROR),
        C.DELETING: delete(C.ERROR),
    },
    C.SHARE_INSTANCE: {
        C.CREATING: query("get_share_status"),
        C.CREATING_FROM_SNAPSHOT: query("get_share_status"),
        C.EXTENDING: query("get_share_status", C.EXTENDING_ERROR),
        C.SHRINKING: query("get_share_status", C.SHRINKING_ERROR),
        C.DELETING: delete(C.ERROR_DELETING),
        C.DEFERRED_DELETING: delete(C.ERROR_DELETING),
        C.MANAGING: mark(C.MANAGE_ERROR),
        C.UNMANAGING: mark(C.UNMANAGE_ERROR),
        C.RESTORING: mark(C.ERROR),
        C.REVERTING: mark(C.ERROR),
        C.REPLICATION_CHANGE: mark(C.ERROR),
        C.BACKUP_CREATING: mark(C.ERROR),
        C.BACKUP_RESTORING: mark(C.ERROR),
    },
    # A replica is a share instance: the share-instance rows that need no
    # driver apply to it (a promotion leaves the secondary being promoted in
    # replication_change, a revert leaves every replica in reverting); only
    # its create has a status method of its own.
    C.REPLICA: {
        C.CREATING: query("get_replica_status"),
        C.DELETING: delete(C.ERROR_DELETING),
        C.MANAGING: mark(C.MANAGE_ERROR),
        C.UNMANAGING: mark(C.UNMANAGE_ERROR),
        C.RESTORING: mark(C.ERROR),
        C.REVERTING: mark(C.ERROR),
        C.REPLICATION_CHANGE: mark(C.ERROR),
        C.BACKUP_CREATING: mark(C.ERROR),
        C.BACKUP_RESTORING: mark(C.ERROR),
    },
    C.SNAPSHOT_INSTANCE: {
        C.CREATING: query("get_snapshot_status"),
        C.DELETING: delete(C.ERROR_DELETING),
        C.MANAGING: mark(C.MANAGE_ERROR),
        C.UNMANAGING: mark(C.UNMANAGE_ERROR),
        C.RESTORING: mark(C.ERROR),
    },
    C.SHARE_GROUP: {
        C.CREATING: query("get_share_group_status"),
        C.DELETING: delete(C.ERROR),
    },
    C.GROUP_SNAPSHOT: {
        C.CREATING: query("get_share_group_snapshot_status"),
        C.DELETING: delete(C.ERROR),
    },
    # Backups in creating/restoring belong to the *_continue periodic tasks
    # once the driver call has started (progress set, see scan.left_alone);
    # one whose first call never happened can only be failed (creating) or
    # returned to available (restoring: the backup itself is intact).
    C.BACKUP: {
        C.DELETING: delete(C.ERROR),
        C.CREATING: mark(C.ERROR),
        C.RESTORING: mark(C.AVAILABLE),
    },
}

# Dependency order: servers first (shares need them), backups last.
STAGES = (
    C.SHARE_SERVER,
    C.SHARE_INSTANCE,
    C.REPLICA,
    C.SNAPSHOT_INSTANCE,
    C.SHARE_GROUP,
    C.GROUP_SNAPSHOT,
    C.BACKUP,
)
