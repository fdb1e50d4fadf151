"""Stack check (Heat's ``stack check``): ask the backend about every share,
replica and snapshot of a stack and mark the stack CHECK COMPLETE or CHECK
FAILED, naming the resources that drifted (doc/convergence.rst, "Check and
converge").

The check makes the database tell the truth so that a converge (an update
traversal with the current template) repairs through the normal traversal
machinery: with ``CHECK_POLICIES`` a resource missing on the backend is
marked ``error`` (the traversal's decision then replaces it: a new one is
made, the old record deleted) and a size or export drift is corrected from
the backend (the decision then resizes a share back to the template's size
in place). It runs on the engine that claims its request (any engine: the
request has no host); resources of backends that engine does not serve are
named as not checked. Share servers and groups have nothing to compare.
"""

from __future__ import annotations

from typing import Never

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.outcome import Outcome
from sharemgr.db import api as db_api
from sharemgr.db import models, stacks
from sharemgr.db import resources as db_res
from sharemgr.db.engine import Database
from sharemgr.manager import hosts, kinds
from sharemgr.reconcile import drift
from sharemgr.reconcile.drift import DriftChecker
from sharemgr.reconcile.scan import Candidate

LOG = logging.getLogger(__name__)

# What a stack check does about each kind of drift (data, like drift_policy):
# write the backend's truth so that the converge traversal decides right.
CHECK_POLICIES = {drift.MISSING: drift.ERROR, drift.SIZE: drift.CORRECT,
                  drift.EXPORTS: drift.CORRECT, drift.ORPHAN: drift.REPORT,
                  # No traversal serves a share again: the check does it.
                  drift.NOT_SERVED: drift.REPAIR}


class StackChecker:
    def __init__(self, checker: DriftChecker) -> None:
        self.checker = checker

    def handle(self, req: models.Request) -> Outcome[Never]:
        """Handler of a 'stack check' request (resource id: the stack's id)."""
        db = self.checker.rec.db
        stack = stacks.stack_get(db, req.resource_id)
        if stack is None:
            return Outcome.failed(f"stack {req.resource_id} does not exist")
        if stack.status == vocab.STACK_IN_PROGRESS or (
                stack.status != vocab.STACK_COMPLETE and stack.action != vocab.STACK_CHECK):
            return Outcome.failed(f"cannot check stack {stack.name} while it is "
                                  f"{stack.action} {stack.status}")
        drifted, unchecked = self.check(stack)
        status = vocab.STACK_FAILED if drifted else vocab.STACK_COMPLETE
        parts = []
        if drifted:
            parts.append("drifted: " + "; ".join(f"{n} ({w})" for n, w in sorted(
                drifted.items())))
        if unchecked:
            parts.append("not checked: " + "; ".join(f"{n} ({w})" for n, w in sorted(
                unchecked.items())))
        reason = ". ".join(parts) or "every resource agrees with its backend"
        if not stacks.stack_mark_checked(db, stack.id, stack.current_traversal, status, reason):
            return Outcome.failed(f"stack {stack.name} changed during its check; "
                                  "nothing recorded")
        LOG.info("stack %s: CHECK %s: %s", stack.name, status, reason)
        return Outcome.done()

    def check(self, stack: models.Stack) -> tuple[dict[str, str], dict[str, str]]:
        """(drifted resource name → what, unchecked name → why)."""
        db = self.checker.rec.db
        drifted: dict[str, str] = {}
        unchecked: dict[str, str] = {}
        names: dict[str, str] = {}  # instance id → resource name
        cands: list[Candidate] = []
        for row in stacks.resource_list(db, stack.id):
            if row.action == vocab.STACK_DELETE or row.type not in CHECKED:
                continue  # rows on their way out; servers and groups: no status to compare
            if not row.physical_id:
                drifted[row.name] = "no physical resource"
                continue
            cand = _candidate(db, row.type, row.physical_id)
            what = drift.TARGET[CHECKED[row.type]].noun
            if cand is None:
                drifted[row.name] = f"{what} gone from the database"
            elif cand.status != vocab.AVAILABLE:
                drifted[row.name] = f"{what} {cand.status}"
            elif hosts.backend_of(cand.host) not in self.checker.rec.drivers:
                unchecked[row.name] = f"backend {hosts.backend_of(cand.host)} is not served " \
                                      "by the engine that checked"
            else:
                names[cand.id] = row.name
                cands.append(cand)
        summary, missed = self.checker.check_resources(cands, CHECK_POLICIES)
        for item in summary.items:
            name = names[item["instance_id"]]
            what = item["kind"] if item["kind"] == drift.MISSING else \
                f"{item['kind']} {item['database']} on record, {item['backend']} on the backend" \
                if item["kind"] == drift.SIZE else item["kind"]
            drifted[name] = f"{drifted[name]}, {what}" if name in drifted else what
        for ident in missed:
            unchecked[names[ident]] = "busy or the backend cannot tell"
        return drifted, unchecked


# The stack resource types a check asks the backend about, and the drift
# target (drift.TARGETS) of the instance behind each.
CHECKED = {vocab.SHARE: vocab.SHARE_INSTANCE, vocab.REPLICA: vocab.REPLICA,
           vocab.SNAPSHOT: vocab.SNAPSHOT_INSTANCE}


def _candidate(db: Database, type_: str, physical_id: str) -> Candidate | None:
    """The instance behind a stack resource's physical id, as drift checks
    take it; None when the database has none."""
    rtype = CHECKED[type_]
    row: models.ShareSnapshotInstance | models.ShareInstance | None
    if type_ == vocab.SNAPSHOT:
        row = db_res.snapshot_instance_of(db, physical_id)
    elif type_ == vocab.REPLICA:
        row = db_api.get(db, models.ShareInstance, physical_id)
    else:
        row = db_res.primary_instance(db, physical_id)
    if row is None:
        return None
    host = kinds.kind(rtype).host_of(db, row)
    return Candidate(rtype, row.id, row.status, host, row) if host else None
