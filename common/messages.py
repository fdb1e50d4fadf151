"""User messages (as Manila's): what asynchronous work that did not end well
tells the user, as data. A message names its action and its detail by ids
whose meaning is fixed for good (scripts match on them); the words are
composed from these tables when it is shown. SQL: db/messages.py."""

from __future__ import annotations

from sharemgr.common import vocab

# The request actions that leave a message when they fail or are abandoned;
# an id is never reused for another meaning.
ACTION_IDS: dict[str, str] = {
    vocab.ACTION_CREATE: "001",
    vocab.ACTION_DELETE: "002",
    vocab.ACTION_EXTEND: "003",
    vocab.ACTION_SHRINK: "004",
    vocab.ACTION_UPDATE_ACCESS: "005",
    vocab.ACTION_RESTORE: "006",
    vocab.ACTION_MANAGE: "007",
    vocab.ACTION_UNMANAGE: "008",
    vocab.ACTION_REVERT: "009",
    vocab.ACTION_PROMOTE: "010",
    vocab.ACTION_RESYNC: "011",
    vocab.ACTION_MIGRATION_START: "013",
    vocab.ACTION_MIGRATION_COMPLETE: "014",
    vocab.ACTION_MIGRATION_CANCEL: "015",
}
ACTION_NAMES: dict[str, str] = {
    "001": "create", "002": "delete", "003": "extend", "004": "shrink",
    "005": "update access rules", "006": "restore",
    "007": "manage", "008": "unmanage",
    "009": "revert to snapshot", "010": "promote", "011": "resync",
    "012": "serve again", "013": "start migration", "014": "complete migration",
    "015": "cancel migration",
}
# What a drift check did about a share its backend did not serve as
# recorded: no request of the user's, the check's own repair.
ACTION_REPAIR = "012"

UNEXPECTED = "001"
FAILED = "002"
ENGINE_STOPPED = "003"
TAKEN_OVER = "004"
SHRINK_REFUSED = "005"
NOT_SERVED = "006"
DETAILS: dict[str, str] = {
    UNEXPECTED: "an unexpected error ended it",
    FAILED: "it failed; the resource's status says what it is left in",
    ENGINE_STOPPED: "the engine running it stopped; reconciliation settled the resource "
                    "from what the backend holds (see its status and size)",
    TAKEN_OVER: "another engine took the resource over while the backend worked; this "
                "request's outcome was not written and the resource was checked again",
    SHRINK_REFUSED: "the backend refused it: the data in the share would not fit in the "
                    "new size; nothing changed and the share is available at its size",
    NOT_SERVED: "a drift check found its backend not serving it as recorded (the detail "
                "says how) and applied its export and access rules again",
}

LEVEL_ERROR = "ERROR"
LEVEL_WARNING = "WARNING"

# Whose resource a message names: the one the user knows (a share, not its
# instance), from the request's resource type.
USER_TYPES: dict[str, str] = {
    vocab.SHARE_INSTANCE: vocab.SHARE,
    vocab.SNAPSHOT_INSTANCE: vocab.SNAPSHOT,
    vocab.REPLICA: vocab.REPLICA,
    vocab.SHARE_SERVER: vocab.SHARE_SERVER,
    vocab.SHARE_GROUP: vocab.SHARE_GROUP,
    vocab.GROUP_SNAPSHOT: vocab.GROUP_SNAPSHOT,
    vocab.BACKUP: vocab.BACKUP,
}

# 30 days, as Manila's message_ttl.
DEFAULT_TTL = 30 * 24 * 3600


def wanted(resource_type: str, action: str) -> bool:
    """Whether a request of this kind leaves a message (a stack's checks and
    reconciliation requests do not: the stack and the pass record say)."""
    return resource_type in USER_TYPES and action in ACTION_IDS


def user_message(resource_type: str, action_id: str, detail_id: str) -> str:
    """The words of a message: '<action> <resource>: <detail>'."""
    action = ACTION_NAMES.get(action_id, f"action {action_id}")
    detail = DETAILS.get(detail_id, f"detail {detail_id}")
    return f"{action} {resource_type.replace('_', ' ')}: {detail}"
