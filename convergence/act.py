"""A node's second step: its work, through the share operations (doc/specs.rst,
spec 001, step 3; doc/design.rst, "A node in three steps").

Every action starts with one transaction (``stack_work.begin``) that checks
the traversal is current, marks the row ``<action> IN_PROGRESS`` with its
physical id and writes the physical rows in their transient status plus the
operation's request (running, owned by this engine): a crash leaves a row and
a physical resource that reconciliation settles and the resumed check finds —
a physical resource is never created twice. Each step returns an
:class:`Outcome`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import decide as decide_mod
from sharemgr.convergence import migrate, retain
from sharemgr.convergence import physical as phys
from sharemgr.convergence.decide import Work
from sharemgr.convergence.node_check import (
    ENDED,
    SUPERSEDED,
    Ctx,
    End,
    Late,
    Outcome,
    Result,
    ended,
)
from sharemgr.convergence.properties import ResourceData
from sharemgr.convergence.row_locks import RowLocks
from sharemgr.convergence.template import Template, TemplateError
from sharemgr.convergence.tracking import Tracker
from sharemgr.db import api as db_api
from sharemgr.db import capacity as db_capacity
from sharemgr.db import models, stack_work, stacks
from sharemgr.db.engine import Database
from sharemgr.manager import late_outcome, operation_table, plans, successes
from sharemgr.manager.leases import Terms
from sharemgr.manager.op_errors import Lost
from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

# A physical row changed between planning and starting (another check of a
# sibling made the share's first replica, say): plan again, this many times.
REPLAN_ATTEMPTS = 5
# A share from a snapshot still copying after its create: read this often,
# at most the create's lease (COPY_WAIT without one).
COPY_POLL = 0.5
COPY_WAIT = 3600.0
# The stack action an update node's work is recorded as.
_ACTION = {Work.CREATE: vocab.STACK_CREATE, Work.REPLACE: vocab.STACK_CREATE,
           Work.UPDATE: vocab.STACK_UPDATE}



def begun_op(plan: phys.Plan, begun: stack_work.Begun[Terms]) -> plans.Op | None:
    """The plan's operation as its begin wrote its request: the request's id,
    its lease, the token its row was inserted taken with."""
    return None if plan.op is None else replace(
        plan.op, request_id=begun.op_request_id, lease=begun.op_lease, taken=begun.op_taken)


def row_end(d: decide_mod.Decision, stack: models.Stack) -> decide_mod.RowEnd:
    """The row's values when its action completes (``decide.RowEnd``)."""
    return {"template_id": stack.template_id, "requires": list(d.requires_now)}


class Actor:
    """Carries out a node's work on the rows its check holds."""

    def __init__(self, db: Database, operations: Operations, engine_id: str,
                 placement: phys.Placement, locks: RowLocks,
                 template: Callable[[models.Stack], Template]) -> None:
        self.db = db
        self.operations = operations
        self.engine_id = engine_id
        self.placement = placement
        self.locks = locks
        self.template = template

    def act(self, ctx: Ctx) -> Outcome:
        """The node's work, the general way: re-read under the row's lock."""
        stack = stack_work.stack_head(self.db, ctx.stack_id)
        if stack is None or stack.current_traversal != ctx.traversal:
            return SUPERSEDED
        if stack.status != vocab.STACK_IN_PROGRESS:
            return ENDED
        row = stacks.resource_get(self.db, ctx.node.resource_id)
        if row is None:
            return SUPERSEDED
        if ctx.node.is_update:
            return self._update(ctx, stack, row)
        if (row.id, True) in ctx.graph and row.replaced_by is None:
            return Outcome.done()  # still wanted: nothing to clean up
        return self._delete_row(ctx, row, keep=retain.keeps(self.db, stack.action, row))

    # Update nodes ------------------------------------------------------------------

    def _update(self, ctx: Ctx, stack: models.Stack, row: models.StackResource) -> Outcome:
        orphan = decide_mod.orphan(self.db, ctx.graph, row)
        if orphan is not None:
            deleted = self._delete_orphan(ctx, orphan)
            if deleted.result is not Result.DONE:
                return deleted
            again = stacks.resource_get(self.db, row.id)
            if again is None:
                return SUPERSEDED
            row = again
        for _attempt in range(REPLAN_ATTEMPTS):
            outcome = self._update_once(ctx, stack, row)
            if outcome.result is not Result.REPLAN:
                return outcome
            again = stacks.resource_get(self.db, row.id)
            if again is None:
                return SUPERSEDED
            row = again
        return self.fail(row, decide_mod.nominal(row), "its physical resources kept changing "
                         f"while it was planned ({REPLAN_ATTEMPTS} attempts)")

    def _delete_orphan(self, ctx: Ctx, orphan: models.StackResource) -> Outcome:
        """Delete a cut replacement (``decide.orphan``); DONE when it is gone."""
        if orphan.id not in ctx.held:
            busy = self.locks.take(orphan.id, orphan)
            if busy is not None:
                return Outcome.bailed(busy)
            ctx.held.append(orphan.id)
        LOG.info("stack %s: %s: deleting replacement row %s, cut short by a crash",
                 ctx.stack_name, orphan.name, orphan.id)
        return self._delete_row(ctx, orphan)

    def _update_once(self, ctx: Ctx, stack: models.Stack, row: models.StackResource
                     ) -> Outcome:
        """One try at the update node; REPLAN: a physical row changed since it
        was planned."""
        effective, unreplace = decide_mod.effective(self.db, stack, row)
        if effective.id != row.id and effective.id not in ctx.held:
            busy = self.locks.take(effective.id, effective)
            if busy is not None:
                return Outcome.bailed(busy)
            ctx.held.append(effective.id)
        elif unreplace and row.replaced_by is not None:
            stack_work.unreplace(self.db, row.id, self.engine_id, row.replaced_by)
        template = self.template(stack)
        try:
            d = decide_mod.decide(self.db, template, row, effective, ctx.input_data)
        except (TemplateError, phys.CheckError) as exc:  # the parent named is gone, say
            return self.fail(effective, decide_mod.nominal(effective), str(exc))
        if d.kind == Work.BUSY:
            return self.fail(effective, decide_mod.nominal(effective),
                             f"physical resource {effective.physical_id} "
                             f"is {d.observed.status}: another operation is under way")
        if d.kind == Work.KEPT:
            return self.fail(effective, decide_mod.nominal(effective),
                             decide_mod.kept_reason(effective, d.observed.status))
        if d.kind == Work.MIGRATE:
            return migrate.run(self, ctx, stack, row, effective, d)
        if d.kind == Work.NOOP:
            final = row_end(d, stack)
            return self._noop(ctx, row, effective, d, final)
        try:
            work, plan, final = self.planned(ctx, stack, row, effective, d)
        except phys.CheckError as exc:
            return self.fail(effective, _ACTION[d.kind], str(exc))
        action = work.action
        try:
            begun = stack_work.begin(
                self.db, effective.id, self.engine_id, ctx.stack_id, ctx.traversal, work,
                replace=d.kind == Work.REPLACE, replace_template_id=stack.template_id,
                replace_requires=final["requires"])
        except db_capacity.NoRoom as exc:  # placed meanwhile by others: refused as a plan is
            return self.fail(effective, action, f"{exc} (placed meanwhile by others)")
        if isinstance(begun, Outcome):
            return begun
        if begun.resource_id != effective.id:
            self.locks.tracker.claim(begun.resource_id)  # the replacement, born locked by us
            ctx.held.append(begun.resource_id)
            LOG.info("stack %s: %s (row %s) replaced by row %s", ctx.stack_name, row.name,
                     effective.id, begun.resource_id)
        return self.carry_out(ctx, row.name, begun, action, plan, final)[0]

    def _noop(self, ctx: Ctx, row: models.StackResource, effective: models.StackResource,
              d: decide_mod.Decision, final: decide_mod.RowEnd) -> Outcome:
        """Nothing to change: record the template and dependencies (and finish
        an action a dead engine left IN_PROGRESS whose resource turned out
        fine)."""
        if effective.status == vocab.STACK_COMPLETE and effective.action != vocab.STACK_INIT:
            action = effective.action
        else:
            created = effective.action in (vocab.STACK_INIT, vocab.STACK_CREATE)
            action = vocab.STACK_CREATE if created else vocab.STACK_UPDATE
        values = {**final, "properties": d.props, "attributes": dict(d.observed.attributes)}
        # An event only if the row's state changes (an action a dead engine
        # left IN_PROGRESS): an unchanged resource has none, as in Heat.
        changed = (effective.action, effective.status) != (action, vocab.STACK_COMPLETE)
        won = stacks.resource_set_state(self.db, effective.id, self.engine_id, action,
                                        vocab.STACK_COMPLETE, None, values, event=changed)
        return ended(won, row.name, Outcome.done(ResourceData(
            row.name, effective.id, effective.physical_id,
            d.observed.attributes).passed_on(ctx.template)))

    # Clean-up nodes ------------------------------------------------------------------

    def _delete_row(self, ctx: Ctx, row: models.StackResource, keep: bool = False) -> Outcome:
        """Delete the physical resource of a row this check holds, then mark
        the row DELETE COMPLETE; a physical row that changed meanwhile is
        planned again. ``keep``: the row goes, its physical resource stays
        (``retain.keeps``)."""
        if keep:
            return self._retain_row(ctx, row)
        for _attempt in range(REPLAN_ATTEMPTS):
            outcome = self._delete_once(ctx, row)
            if outcome.result is not Result.REPLAN:
                return outcome
            again = stacks.resource_get(self.db, row.id)
            if again is None:
                return Outcome.done()
            row = again
        return self.fail(row, vocab.STACK_DELETE, "its physical resources kept changing while "
                         f"its delete was planned ({REPLAN_ATTEMPTS} attempts)")

    def _let_go(self, ctx: Ctx, row: models.StackResource) -> Outcome:
        """DELETE COMPLETE, without events, for a row whose action never
        began (a rollback's or a delete's of resources a failure left
        unmade): as Heat, its event list shows no delete of what never was."""
        work = replace(self.work(ctx, vocab.STACK_DELETE, {"status_reason": None}, phys.Plan()),
                       event=False)
        begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id, ctx.traversal, work)
        if isinstance(begun, Outcome):
            return begun
        won = stack_work.end(self.db, row.id, self.engine_id, vocab.STACK_DELETE,
                             vocab.STACK_COMPLETE, op_request_id=begun.op_request_id, event=False)
        return ended(won, row.name, Outcome.done())

    def _retain_row(self, ctx: Ctx, row: models.StackResource) -> Outcome:
        """DELETE COMPLETE without a driver call, the row no longer naming
        its physical resource, which stays as any user's (``begin`` checks
        the traversal is current, as for a delete)."""
        LOG.info("stack %s: %s: deletion_policy retain: %s %s kept outside the stack",
                 ctx.stack_name, row.name, row.type, row.physical_id)
        work = self.work(ctx, vocab.STACK_DELETE, {"status_reason": None, "physical_id": None},
                         phys.Plan())
        begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id, ctx.traversal, work)
        if isinstance(begun, Outcome):
            return begun
        won = stack_work.end(self.db, row.id, self.engine_id, vocab.STACK_DELETE,
                             vocab.STACK_COMPLETE,
                             f"retained: {row.type} {row.physical_id} kept outside the stack",
                             op_request_id=begun.op_request_id)
        return ended(won, row.name, Outcome.done())

    def _delete_once(self, ctx: Ctx, row: models.StackResource) -> Outcome:
        if row.action == vocab.STACK_DELETE and row.status == vocab.STACK_COMPLETE:
            return Outcome.done()
        if row.action == vocab.STACK_INIT and row.physical_id is None:
            return self._let_go(ctx, row)
        observed = phys.observe(self.db, row.type, row.physical_id)
        if observed.state == phys.BUSY:
            return self.fail(row, vocab.STACK_DELETE, f"physical resource {row.physical_id} is "
                             f"{observed.status}: another operation is under way")
        try:
            plan = phys.plan_delete(self.db, row.type, row.physical_id, observed) or phys.Plan()
        except phys.CheckError as exc:
            return self.fail(row, vocab.STACK_DELETE, str(exc))
        work = self.work(ctx, vocab.STACK_DELETE, {"status_reason": None}, plan)
        begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id, ctx.traversal, work)
        if isinstance(begun, Outcome):
            return begun
        outcome = self.carry_out(ctx, row.name, begun, vocab.STACK_DELETE, plan, {})[0]
        return replace(outcome, data=None)  # clean-up nodes pass nothing on

    # The operation -----------------------------------------------------------------

    def planned(self, ctx: Ctx, stack: models.Stack,
                row: models.StackResource, effective: models.StackResource,
                d: decide_mod.Decision
                ) -> tuple[stack_work.Begin[Terms], phys.Plan, decide_mod.RowEnd]:
        """An update node's create, replacement or in-place update of
        ``effective`` (the row, or the replacement it resumes), as decided:
        what ``begin`` writes, the plan and the row's values at its end. The
        general path and the worker's fast path both plan here. Raises
        ``phys.CheckError`` when the plan is refused."""
        start, final = dict(d.start), row_end(d, stack)
        name = phys.new_name(ctx.stack_name, row.name, d.props)
        if d.kind == Work.UPDATE:
            plan = phys.plan_update(self.db, effective.type, effective.physical_id,
                                    d.in_place, name)
        else:
            plan = phys.plan_create(self.db, effective.type, d.props, name, self.placement)
        if plan.physical_id is not None:
            start["physical_id"] = plan.physical_id
        return self.work(ctx, _ACTION[d.kind], start, plan), plan, final

    def work(self, ctx: Ctx, action: str, values: dict[str, object], plan: phys.Plan
             ) -> stack_work.Begin[Terms]:
        """What ``begin`` writes for ``plan``: its new rows and changes, and
        its operation's request, running for this engine with the default
        lease (which the call keeps unless its method has one of its own)."""
        op = plan.op
        taken = plans.insert_taken(plan.add, op)
        return stack_work.Begin(action, values, plan.add, plan.changes,
                                op.request({"stack_id": ctx.stack_id}) if op else None,
                                self.operations.default_lease() if op else None, taken,
                                plan.claims, plan.conditions)

    def carry_out(self, ctx: Ctx, name: str, begun: stack_work.Begun[Terms], action: str,
                  plan: phys.Plan, final: Mapping[str, object],
                  known: tuple[int, str, str | None] | None = None,
                  defer: bool = False, reread: plans.Reread | None = None,
                  ) -> tuple[Outcome, End | None]:
        """Run the begun action's operation and end the row's action.
        ``known``: the row's (id, type, physical id) as begun, so it is not
        read again; ``defer``: a success's end is not written but returned,
        for the report's transaction to write; ``reread``: the operation's
        row as a batch read it under the lock it holds for it
        (``manager/held_reads.py``)."""
        if known is None:
            row = stacks.resource_get(self.db, begun.resource_id)
            if row is None:
                # Only another engine removes a row this check began on: it
                # took the row over (this engine paused past its lock) and its
                # traversal ended. Not the stack's failure: the node is cut.
                return self.cut(ctx, begun.resource_id, name, begun.op_request_id,
                                Outcome.lost("its row is gone after its begin (taken over "
                                             "and removed meanwhile)")), None
            known = (row.id, row.type, row.physical_id)
        rid, type_, physical_id = known
        written = None
        late = None
        op = begun_op(plan, begun)
        if op is not None:
            # Its success is left to the report only when the report writes it.
            op = replace(op, reread=reread if defer or reread is None
                         else replace(reread, defer=False))
            try:
                performed = self.operations.perform(op)
            except Exception as exc:  # the caller fails the node; the request must not stay
                # running for a live engine that no longer runs it: reconciliation
                # settles a transient resource once no request is in progress.
                if begun.op_request_id is not None:
                    try:
                        stack_work.finish_request(self.db, begun.op_request_id, self.engine_id,
                                                  vocab.REQUEST_FAILED,
                                                  f"{type(exc).__name__}: {exc}")
                    except Exception:
                        LOG.exception("could not record the outcome of request %s",
                                      begun.op_request_id)
                raise
            if performed.result in (Result.NOT_NOW, Result.LOST):
                return self.cut(ctx, rid, name, begun.op_request_id, performed), None
            if performed.result is not Result.DONE:  # FAILED or STALE: the node fails
                reason = f"{name}: {performed.reason}"
                won = stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_FAILED,
                                     reason, op_request_id=begun.op_request_id,
                                     op_error=performed.reason)
                return ended(won, name, Outcome.failed(reason)), None
            written = performed.data
            if reread is not None and written is not None and late_outcome.defers(op, written):
                late = Late(op, written)  # the report writes it
        if written is not None and plan.op is not None and successes.copy_goes_on(written):
            # A share from a snapshot still copying in the backend: the
            # resource is complete when the status poll ends its create.
            status = self._await_copy(plan.op.ident)
            if status != vocab.AVAILABLE:
                reason = f"{name}: its copy from the snapshot " + (
                    "did not end within the create's lease"
                    if status == vocab.CREATING_FROM_SNAPSHOT else f"ended in {status}")
                won = stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_FAILED,
                                     reason, op_request_id=begun.op_request_id, op_error=reason)
                return ended(won, name, Outcome.failed(reason)), None
            written = None  # the rows are read
        try:
            if action == vocab.STACK_DELETE and plan.op is not None:
                observed = phys.Observed(phys.GONE)  # its delete succeeded: nothing to read
            else:
                observed = phys.observe_after(self.db, type_, physical_id, plan, written)
            values = {**final, "attributes": dict(observed.attributes)}
            done = Outcome.done(ResourceData(name, rid, physical_id, observed.attributes)
                                .passed_on(ctx.template))
        except BaseException:
            if late is not None:  # its success is written all the same (or, lost, re-observed)
                with contextlib.suppress(Lost):
                    late_outcome.write_alone(self.operations, late.op, late.changes)
            raise
        if defer:
            return done, End(rid, action, values, begun.op_request_id, begun.key, late)
        won = stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_COMPLETE, None,
                             values, op_request_id=begun.op_request_id)
        return ended(won, name, done), None

    def _await_copy(self, ident: str) -> str:
        """The status a share instance's copy ends in (the status poll
        writes it), waiting at most the create's lease; its status then."""
        method = operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_CREATE).method_of(
            vocab.CREATING_FROM_SNAPSHOT)
        lease = self.operations.leases.seconds(method) or COPY_WAIT
        deadline = time.monotonic() + lease
        while True:
            inst = db_api.get(self.db, models.ShareInstance, ident)
            status = inst.status if inst is not None else vocab.DELETED
            if status != vocab.CREATING_FROM_SNAPSHOT or time.monotonic() > deadline:
                return status
            time.sleep(COPY_POLL)

    def cut(self, ctx: Ctx, rid: int, name: str, op_request_id: int | None,
            why: Outcome[object]) -> Outcome:
        """The engine could not see the operation through — out of the
        group or its lease running out before the driver call (NOT_NOW),
        or the resource taken over while the driver worked (LOST): ``cut``."""
        return cut(self.db, self.engine_id, self.locks.tracker, ctx, (rid,), name,
                   op_request_id, why)

    # Failure -----------------------------------------------------------------------

    def fail(self, row: models.StackResource, action: str, reason: str) -> Outcome:
        reason = f"{row.name}: {reason}"
        self.mark_failed(row.id, reason, action)
        return Outcome.failed(reason)

    def mark_failed(self, rid: int, reason: str, action: str | None = None) -> None:
        try:
            row = stacks.resource_get(self.db, rid)
            if row is not None:
                stacks.resource_set_state(self.db, rid, self.engine_id,
                                          action or row.action, vocab.STACK_FAILED, reason)
        except Exception:  # the stack's failure matters more than the row's
            LOG.exception("could not mark resource %s FAILED", rid)


def cut(db: Database, engine_id: str, tracker: Tracker, ctx: Ctx,
        rids: Iterable[int], name: str, op_request_id: int | None,
        why: Outcome[object]) -> Outcome:
    """A node whose operation its engine could not see through is not the
    stack's failure: it bails as if its engine had died there, its rows'
    locks left held (no check takes a row while its resource is transient),
    and the watchdog retriggers it once the resource has settled. An
    operation that never reached the driver is given back for a member to
    run; a lost one is abandoned (its resource is being re-observed)."""
    for rid in rids:
        if rid in ctx.held:
            ctx.held.remove(rid)
            tracker.unclaim(rid)
    try:
        if op_request_id is not None:
            if why.result is Result.NOT_NOW:
                db_api.request_release(db, op_request_id, engine_id,
                                       f"given back: {why.reason}")
            else:
                stack_work.finish_request(db, op_request_id, engine_id,
                                          vocab.REQUEST_ABANDONED, f"lost: {why.reason}")
    finally:
        LOG.warning("%s: %s; the node waits for the watchdog", name, why.reason)
    return Outcome.bailed(f"{name}: {why.reason}")
