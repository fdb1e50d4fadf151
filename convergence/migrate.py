"""An update node that moves a share to another backend with its data
(doc/migration.rst, "Stacks"): the template changed the share's
``backend`` and nothing else that needs a new share (``decide.migrates``).

The node starts the migration as ``sharectl share migration start`` would,
in its row's begin (the plan's rows, changes and request in the same
transaction), asking for it to complete once copied; it carries out the
start request and waits, under its row's lock, until the migration ends.
The source host's periodic task copies (the driver, or the engine) and
completes it. A success is planned again (``REPLAN``): what else the
template changed is updated in place, or nothing is. A node whose engine
dies meanwhile leaves the share ``migrating``; the watchdog retriggers it
once the share has settled, and the check then finds it on the new backend.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.outcome import REPLAN, SUPERSEDED, Outcome, Result
from sharemgr.convergence import decide as decide_mod
from sharemgr.convergence.node_check import Ctx, ended
from sharemgr.db import models, stack_work, stacks
from sharemgr.manager import migration_plans
from sharemgr.manager.plans import Refused

if TYPE_CHECKING:
    from sharemgr.convergence.act import Actor

LOG = logging.getLogger(__name__)
POLL = 0.5  # seconds between looks at the migration's task_state
_NOT_CURRENT = "(traversal not current)"


def run(act: Actor, ctx: Ctx, stack: models.Stack, row: models.StackResource,
        effective: models.StackResource, d: decide_mod.Decision) -> Outcome:
    """Move ``effective``'s share to the template's backend."""
    share_id = str(effective.physical_id)
    start = dict(d.start)
    dest = migration_plans.destination_for(act.db, d.observed.host or "",
                                           str(d.props["backend"]))
    try:
        plan = migration_plans.start(act.db, migration_plans.Request(
            share_id, dest, complete=True))
    except Refused as exc:
        return act.fail(effective, vocab.STACK_UPDATE, f"cannot move the share to {dest}: {exc}")
    work = act.work(ctx, vocab.STACK_UPDATE, {**start, "properties": effective.properties},
                    plan)
    begun = stack_work.begin(act.db, effective.id, act.engine_id, ctx.stack_id, ctx.traversal,
                             work)
    if isinstance(begun, Outcome):
        return begun
    LOG.info("stack %s: %s: moving share %s to %s", ctx.stack_name, row.name, share_id, dest)
    assert plan.op is not None  # a start always has its request
    started = act.operations.perform(replace(plan.op, request_id=begun.op_request_id,
                                             lease=begun.op_lease))
    if started.result in (Result.NOT_NOW, Result.LOST):
        return act.cut(ctx, effective.id, row.name, begun.op_request_id, started)
    if started.result is not Result.DONE:  # FAILED or STALE
        return _failed(act, effective, row.name,
                       f"its migration to {dest} failed: {started.reason}", begun.op_request_id)
    if begun.op_request_id is not None:
        stack_work.finish_request(act.db, begun.op_request_id, act.engine_id,
                                  vocab.REQUEST_DONE)
    task = _await(act, ctx, share_id)
    if task is None:
        return act.cut(ctx, effective.id, row.name, None,
                       Outcome.not_now(f"not a member while share {share_id} moves"))
    if task == _NOT_CURRENT:
        # Timed out, cancelled or superseded: the migration goes on by
        # itself; the next traversal finds the share where it ends.
        return SUPERSEDED
    if task != vocab.MIGRATION_SUCCESS:
        return _failed(act, effective, row.name,
                       f"its migration to {dest} ended in {task} (sharectl message list)", None)
    LOG.info("stack %s: %s: share %s moved to %s", ctx.stack_name, row.name, share_id, dest)
    return REPLAN  # what else changed is planned now, on the moved share


def _await(act: Actor, ctx: Ctx, share_id: str) -> str | None:
    """The task_state the share's migration ends in; None when this engine
    may no longer wait (out of the engines group: the watchdog retriggers
    the node once the share has settled); ``_NOT_CURRENT`` once the
    traversal is not current (the stack timed out, was cancelled or
    updated again)."""
    while True:
        task = str(migration_plans.shown(act.db, share_id)["task_state"])
        if task in vocab.MIGRATION_ENDED:
            return task
        if act.operations.not_member():
            return None
        if not stacks.traversal_is_current(act.db, ctx.stack_id, ctx.traversal):
            return _NOT_CURRENT
        time.sleep(POLL)


def _failed(act: Actor, row: models.StackResource, name: str, why: str,
            op_request_id: int | None) -> Outcome:
    reason = f"{name}: {why}"
    won = stack_work.end(act.db, row.id, act.engine_id, vocab.STACK_UPDATE, vocab.STACK_FAILED,
                         reason, op_request_id=op_request_id, op_error=why)
    return ended(won, name, Outcome.failed(reason))
