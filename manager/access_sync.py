"""Access rules sent to the driver: a share's queued rules with its full
set (``update_access``), each rule's outcome its own conditional update (a
deny that came while the driver worked wins over the apply's outcome); and
the rules queued while an operation held the share, sent once its success
is written (``flush_access``), under the same lock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import models
from sharemgr.manager import access, driver_args, kinds, operation_table
from sharemgr.manager.op_errors import OperationFailed, log_failure
from sharemgr.manager.plans import Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

ACCESS_METHOD = operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS).method


def _refused(answer: object) -> bool:
    """A rule ``update_access`` answered ``{"state": "error"}`` for."""
    return isinstance(answer, dict) and answer.get("state") == vocab.ACCESS_ERROR


def _keys(updates: Mapping[str, object], rule_ids: Iterable[str]) -> dict[str, str]:
    """The keys ``update_access`` gave rules (Manila's ``access_key``: a
    cephx rule's), by rule id."""
    keys = {}
    for rule_id in rule_ids:
        answer = updates.get(rule_id)
        key = answer.get("access_key") if isinstance(answer, dict) else None
        if isinstance(key, str) and key:
            keys[rule_id] = key
    return keys


def _refusal(rule: models.ShareAccessRule, answer: object) -> str:
    reason = answer.get("reason") if isinstance(answer, dict) else None
    said = f": {reason}" if isinstance(reason, str) and reason else ""
    return f"rule {rule.id} ({rule.access_type} {rule.access_to} {rule.access_level}){said}"


def flush_access(ops: Operations, inst: models.ShareInstance) -> None:
    """After an operation that leaves the share available: rules queued
    meanwhile (a stack's, or any that found the share busy) are applied
    now, under the same lock. Costs nothing when none are queued."""
    if inst.access_rules_status == vocab.ACCESS_RULES_SYNCING:
        why = ops.why_not_call(kinds.SHARE_INSTANCE.lock_name(inst.id))
        if why is not None:
            # The operation's success is written: its rules go to a request
            # that a member (this engine, once back) carries out.
            LOG.warning("rules queued for share instance %s left to an update_access "
                        "request: %s", inst.id, why)
            db_access.add_requests(ops.db, [Op(vocab.SHARE_INSTANCE, inst.id,
                                               vocab.ACTION_UPDATE_ACCESS, inst.host).request()])
            return
        # Under the lock of the operation whose success just bumped the token.
        sync_access(ops, ops.fresh(models.ShareInstance, inst.id, (vocab.AVAILABLE,)))


def sync_access(ops: Operations, inst: models.ShareInstance, resync: bool = False) -> None:
    """Send the share's queued rules to the driver, with the full set
    (``resync``: the full set even when none is queued); each rule's outcome
    is its own conditional update."""
    rules = db_access.start(ops.db, inst.share_id)
    add = [r for r in rules if r.state == vocab.ACCESS_APPLYING]
    remove = [r for r in rules if r.state == vocab.ACCESS_DENYING]
    if not (add or remove or resync):
        return
    full = [r for r in rules if r.state in (vocab.ACCESS_ACTIVE, vocab.ACCESS_APPLYING)]
    what = f"update_access of share instance {inst.id}"
    driver = ops.driver_for(inst.host)
    share_d, server = driver_args.share_parts(ops.db, inst)
    # NotNow, nothing sent: the rules stay applying/denying and are sent
    # again (the request goes back to pending; a pass runs again).
    ops.guard(what, None, kinds.SHARE_INSTANCE.lock_name(inst.id))
    try:
        updates: Mapping[str, object] = driver.update_access(
            share_d, [access.view(r) for r in full], [access.view(r) for r in add],
            [access.view(r) for r in remove], server) or {}
    except Exception as exc:
        log_failure(what, ACCESS_METHOD, exc)
        # What the backend now allows is unknown: every rule sent is in error.
        db_access.finish(ops.db, inst.share_id, {
            r.id: (r.state, vocab.ACCESS_ERROR) for r in full + remove})
        raise OperationFailed(f"{what} failed: {exc}")
    refused = sorted(r.id for r in add if _refused(updates.get(r.id)))
    outcome = {r.id: (r.state, vocab.ACCESS_ERROR if r.id in refused else vocab.ACCESS_ACTIVE)
               for r in add}
    outcome.update({r.id: (r.state, vocab.ACCESS_DELETED) for r in remove})
    db_access.finish(ops.db, inst.share_id, outcome, _keys(updates, outcome))
    if refused:
        # The reasons go into the user message (message show): the user
        # learns why without the daemon's log.
        by_id = {r.id: r for r in add}
        raise OperationFailed(f"{what}: the backend refused " + "; ".join(
            _refusal(by_id[i], updates.get(i)) for i in refused))
