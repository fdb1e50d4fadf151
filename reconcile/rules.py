"""What startup reconciliation does for each resource type and transient
status (doc/specs.rst, spec 002 and architecture §6), as data.

``query``: ask the backend with the optional status method; healthy →
``ok``, anything else (error, missing, not implemented, None, no status,
an exception, a healthy answer the manager cannot record such as a resize
without a usable size) → ``error``. ``delete``: retry the idempotent driver delete;
success → deleted, failure → ``error``; a delete whose request was forced
(its latest delete request's args hold ``force``) is retried forced and ends
in ``forced`` (deleted) whatever the driver says. ``mark``: the operation
cannot be resumed: set ``error``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sharemgr.common import vocab

QUERY = "query"
DELETE = "delete"
MARK = "mark"
RESEND = "resend"


@dataclass(frozen=True)
class Rule:
    action: str
    error: str
    ok: str | None = None
    method: str | None = None  # the driver's status method for QUERY
    forced: str | None = None  # DELETE: the outcome of a forced delete


def query(method: str, error: str = vocab.ERROR, ok: str = vocab.AVAILABLE) -> Rule:
    return Rule(QUERY, error, ok, method)


def delete(error: str) -> Rule:
    return Rule(DELETE, error, vocab.DELETED, forced=vocab.DELETED)


def mark(error: str) -> Rule:
    return Rule(MARK, error)


RULES: dict[str, dict[str, Rule]] = {
    vocab.SHARE_SERVER: {
        vocab.CREATING: mark(vocab.ERROR),
        vocab.MANAGING: mark(vocab.MANAGE_ERROR),
        vocab.UNMANAGING: mark(vocab.UNMANAGE_ERROR),
        vocab.SERVER_NETWORK_CHANGE: mark(vocab.ERROR),
        vocab.DELETING: delete(vocab.ERROR),
    },
    vocab.SHARE_INSTANCE: {
        vocab.CREATING: query("get_share_status"),
        vocab.CREATING_FROM_SNAPSHOT: query("get_share_status"),
        vocab.EXTENDING: query("get_share_status", vocab.EXTENDING_ERROR),
        vocab.SHRINKING: query("get_share_status", vocab.SHRINKING_ERROR),
        vocab.DELETING: delete(vocab.ERROR_DELETING),
        vocab.DEFERRED_DELETING: delete(vocab.ERROR_DELETING),
        vocab.MANAGING: mark(vocab.MANAGE_ERROR),
        vocab.UNMANAGING: mark(vocab.UNMANAGE_ERROR),
        vocab.RESTORING: mark(vocab.ERROR),
        vocab.REVERTING: mark(vocab.ERROR),
        vocab.REPLICATION_CHANGE: mark(vocab.ERROR),
        vocab.BACKUP_CREATING: mark(vocab.ERROR),
        vocab.BACKUP_RESTORING: mark(vocab.ERROR),
    },
    # A replica is a share instance: the share-instance rows that need no
    # driver apply to it (a promotion leaves the secondary being promoted in
    # replication_change, a revert leaves every replica in reverting); only
    # its create has a status method of its own.
    vocab.REPLICA: {
        vocab.CREATING: query("get_replica_status"),
        vocab.DELETING: delete(vocab.ERROR_DELETING),
        vocab.MANAGING: mark(vocab.MANAGE_ERROR),
        vocab.UNMANAGING: mark(vocab.UNMANAGE_ERROR),
        vocab.RESTORING: mark(vocab.ERROR),
        vocab.REVERTING: mark(vocab.ERROR),
        vocab.REPLICATION_CHANGE: mark(vocab.ERROR),
        vocab.BACKUP_CREATING: mark(vocab.ERROR),
        vocab.BACKUP_RESTORING: mark(vocab.ERROR),
    },
    vocab.SNAPSHOT_INSTANCE: {
        vocab.CREATING: query("get_snapshot_status"),
        vocab.DELETING: delete(vocab.ERROR_DELETING),
        vocab.MANAGING: mark(vocab.MANAGE_ERROR),
        vocab.UNMANAGING: mark(vocab.UNMANAGE_ERROR),
        vocab.RESTORING: mark(vocab.ERROR),
    },
    vocab.SHARE_GROUP: {
        vocab.CREATING: query("get_share_group_status"),
        vocab.DELETING: delete(vocab.ERROR),
    },
    vocab.GROUP_SNAPSHOT: {
        vocab.CREATING: query("get_share_group_snapshot_status"),
        vocab.DELETING: delete(vocab.ERROR),
    },
    # Backups in creating/restoring belong to the *_continue periodic tasks
    # once the driver call has started (progress set, see scan.left_alone);
    # one whose first call never happened can only be failed (creating) or
    # returned to available (restoring: the backup itself is intact).
    vocab.BACKUP: {
        vocab.DELETING: delete(vocab.ERROR),
        vocab.CREATING: mark(vocab.ERROR),
        vocab.RESTORING: mark(vocab.AVAILABLE),
    },
}

# Access rules a crash left on their way to the backend: ``resend`` calls
# update_access again with the share's full rule set (drivers must make it
# idempotent); each rule takes its outcome (``ok``), or ``error`` when the
# call fails or the backend refuses the rule. Run after the stages, once the
# shares are settled.
ACCESS_RULES: dict[str, Rule] = {
    vocab.ACCESS_QUEUED_TO_APPLY: Rule(RESEND, vocab.ACCESS_ERROR, vocab.ACCESS_ACTIVE,
                                       "update_access"),
    vocab.ACCESS_APPLYING: Rule(RESEND, vocab.ACCESS_ERROR, vocab.ACCESS_ACTIVE,
                                "update_access"),
    vocab.ACCESS_QUEUED_TO_DENY: Rule(RESEND, vocab.ACCESS_ERROR, vocab.ACCESS_DELETED,
                                      "update_access"),
    vocab.ACCESS_DENYING: Rule(RESEND, vocab.ACCESS_ERROR, vocab.ACCESS_DELETED,
                               "update_access"),
}

# Dependency order: servers first (shares need them), backups last.
STAGES = (
    vocab.SHARE_SERVER,
    vocab.SHARE_INSTANCE,
    vocab.REPLICA,
    vocab.SNAPSHOT_INSTANCE,
    vocab.SHARE_GROUP,
    vocab.GROUP_SNAPSHOT,
    vocab.BACKUP,
)
