"""What startup reconciliation does for each resource type and transient
status (doc/specs.rst, spec 002 and architecture §6), as data read from the
operation table (``manager/operation_table.py``): each operation's spec says
how a row it left in its transient status is settled.

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

from collections.abc import Iterable

from sharemgr.common import vocab
from sharemgr.manager.operation_table import (
    ACCESS_RULES,
    DELETE,
    MARK,
    QUERY,
    RESEND,
    TABLE,
    Rule,
    Spec,
    delete,
    mark,
    query,
)

__all__ = ["ACCESS_RULES", "DELETE", "MARK", "QUERY", "RESEND", "RULES", "STAGES", "Rule",
           "delete", "mark", "query"]

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

def rules_of(table: Iterable[Spec]) -> dict[str, dict[str, Rule]]:
    """Each stage's transient statuses and the rule that settles each, as
    ``table``'s specs say."""
    specs = list(table)
    return {kind: {status: spec.settle for spec in specs if spec.kind == kind and spec.settle
                   for status in spec.transient}
            for kind in STAGES}


RULES = rules_of(TABLE)
