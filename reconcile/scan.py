"""Find this host's resources in transient statuses, stage by stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sharemgr.db import models as M
from sharemgr.db import resources
from sharemgr.db.engine import Database
from sharemgr.manager import constants as C
from sharemgr.reconcile.rules import RULES

# Transient statuses the pass leaves to their own workflow, and why.
LEFT_ALONE = {
    C.SERVER_MIGRATING: "server migration (migration_continue)",
    C.SERVER_MIGRATING_TO: "server migration (migration_continue)",
    C.ENSURING: "ensure-resources",
}
BACKUP_LEFT_ALONE = {
    C.CREATING: "backup create (create_backup_continue)",
    C.RESTORING: "backup restore (restore_backup_continue)",
}

MODEL = {
    C.SHARE_SERVER: M.ShareServer,
    C.SHARE_INSTANCE: M.ShareInstance,
    C.REPLICA: M.ShareInstance,
    C.SNAPSHOT_INSTANCE: M.ShareSnapshotInstance,
    C.SHARE_GROUP: M.ShareGroup,
    C.GROUP_SNAPSHOT: M.ShareGroupSnapshot,
    C.BACKUP: M.ShareBackup,
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
        return MODEL[self.rtype]


def _transient(rtype: str) -> list[str]:
    return [s for s in C.VALID_STATUSES[rtype] if s in C.TRANSIENT_STATUSES]


def _is_secondary(inst: M.ShareInstance) -> bool:
    return inst.replica_state not in (None, C.REPLICA_ACTIVE)


def scan(db: Database, rtype: str, host: str) -> list[Candidate]:
    """Every live resource of ``rtype`` on ``host`` ('host@backend', pools
    included) in a transient status."""
    statuses = _transient(rtype)
    if rtype in (C.SHARE_INSTANCE, C.REPLICA):
        rows = resources.on_host(db, M.ShareInstance, host, statuses)
        rows = [r for r in rows if _is_secondary(r) == (rtype == C.REPLICA)]
        return [Candidate(rtype, r.id, r.status, r.host, r) for r in rows]
    if rtype == C.SNAPSHOT_INSTANCE:
        pairs = resources.snapshot_instances_on_host(db, host, statuses)
        return [Candidate(rtype, s.id, s.status, i.host, s) for s, i in pairs]
    if rtype == C.GROUP_SNAPSHOT:
        pairs = resources.group_snapshots_on_host(db, host, statuses)
        return [Candidate(rtype, s.id, s.status, g.host, s) for s, g in pairs]
    rows = resources.on_host(db, MODEL[rtype], host, statuses)
    return [Candidate(rtype, r.id, r.status, r.host, r) for r in rows]


def left_alone(db: Database, cand: Candidate) -> str | None:
    """Why the pass must not touch this resource, or None."""
    if cand.rtype == C.BACKUP and cand.status in BACKUP_LEFT_ALONE:
        column = "progress" if cand.status == C.CREATING else "restore_progress"
        if getattr(cand.row, column) is not None:
            return BACKUP_LEFT_ALONE[cand.status]
    if cand.status in LEFT_ALONE:
        return LEFT_ALONE[cand.status]
    if cand.rtype in (C.SHARE_INSTANCE, C.REPLICA):
        if cand.row.task_state in C.BUSY_TASK_STATES:
            return f"busy task_state {cand.row.task_state}"
        if cand.status in (C.BACKUP_CREATING, C.BACKUP_RESTORING) and \
                resources.backup_in_progress(db, cand.row.share_id):
            # The backup's continue task brings the share back.
            return "backup in progress (continue task)"
    if cand.status not in RULES[cand.rtype]:
        return f"no reconciliation rule for {cand.status}"
    return None
