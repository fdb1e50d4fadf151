"""Find this host's resources in transient statuses, stage by stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sharemgr.common import vocab
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.manager import kinds
from sharemgr.reconcile import rules

# Transient statuses the pass leaves to their own workflow, and why.
LEFT_ALONE = {
    vocab.SERVER_MIGRATING: "server migration (migration_continue)",
    vocab.SERVER_MIGRATING_TO: "server migration (migration_continue)",
    vocab.ENSURING: "ensure-resources",
}
BACKUP_LEFT_ALONE = {
    vocab.CREATING: "backup create (create_backup_continue)",
    vocab.RESTORING: "backup restore (restore_backup_continue)",
}

@dataclass
class Candidate:
    rtype: str
    id: str
    status: str
    host: str
    row: Any = field(repr=False)

    @property
    def model(self) -> type:
        return kinds.kind(self.rtype).model


def scan(db: Database, rtype: str, host: str, statuses: list[str] | None = None
         ) -> list[Candidate]:
    """Every live resource of ``rtype`` on ``host`` ('host@backend', pools
    included) in one of ``statuses`` (default: the transient ones)."""
    statuses = list(kinds.kind(rtype).transient) if statuses is None else statuses
    if rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
        rows = resources.on_host(db, models.ShareInstance, host, statuses)
        rows = [r for r in rows if kinds.is_secondary(r) == (rtype == vocab.REPLICA)]
        return [Candidate(rtype, r.id, r.status, r.host, r) for r in rows]
    if rtype == vocab.SNAPSHOT_INSTANCE:
        pairs = resources.snapshot_instances_on_host(db, host, statuses)
        return [Candidate(rtype, s.id, s.status, i.host, s) for s, i in pairs]
    if rtype == vocab.GROUP_SNAPSHOT:
        groups = resources.group_snapshots_on_host(db, host, statuses)
        return [Candidate(rtype, s.id, s.status, g.host, s) for s, g in groups]
    rows = resources.on_host(db, kinds.kind(rtype).model, host, statuses)
    return [Candidate(rtype, r.id, r.status, r.host, r) for r in rows]


def left_alone(db: Database, cand: Candidate) -> str | None:
    """Why the pass must not touch this resource, or None."""
    if cand.rtype == vocab.BACKUP and cand.status in BACKUP_LEFT_ALONE:
        column = "progress" if cand.status == vocab.CREATING else "restore_progress"
        if getattr(cand.row, column) is not None:
            return BACKUP_LEFT_ALONE[cand.status]
    if cand.status in LEFT_ALONE:
        return LEFT_ALONE[cand.status]
    if cand.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
        if cand.status == vocab.CREATING_FROM_SNAPSHOT and cand.row.progress is not None:
            return "create from a snapshot copying in the backend (status poll)"
        if cand.row.task_state in vocab.BUSY_TASK_STATES:
            return f"busy task_state {cand.row.task_state}"
        if cand.status in (vocab.BACKUP_CREATING, vocab.BACKUP_RESTORING) and \
                resources.backup_in_progress(db, cand.row.share_id):
            # The backup's continue task brings the share back.
            return "backup in progress (continue task)"
    if cand.status not in rules.RULES[cand.rtype]:
        return f"no reconciliation rule for {cand.status}"
    return None
