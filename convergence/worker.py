"""The check-resource workflow (doc/specs.rst: spec 001; architecture §7, steps 2-4).

A ``check_resource`` request names a graph node ``(resource row, is_update)``
of a traversal. :class:`Worker` handles one, in the engine's request thread,
in three steps (doc/design.rst, "A node in three steps"):

1. *Decide* (``decide.py``, nothing written): where the node's physical work
   must run — an engine that cannot serve it forwards a copy of the request
   there, before taking any lock — and what it does (create, update in
   place, replace, delete, nothing).
2. *Act* (``act.py``) under the row's lock (``row_locks.py``: held by a live
   engine, this one included, the check bails and triggers nothing, the
   holder retriggers; held by a dead engine, it is broken unless the
   physical resource is still transient: reconciliation settles it first and
   the watchdog retriggers the node afterwards), through the share
   operations.
3. *Report* (``report.py``): to the successors' SyncPoints and the stack's,
   retriggering in the newest traversal when this one was superseded.

Each step returns one :class:`~sharemgr.convergence.node_check.Outcome`.
A node whose row nobody holds and whose work is plain takes a fast path:
its lock taken in the transaction that begins its action, and its end, its
release and its first reports written in one more, with those of the other
nodes its thread ran meanwhile (``Reporter.end_many``). A node that fails
marks its row FAILED and the stack FAILED with the reason — or, unless
``disable_rollback``, starts the rollback in the same transaction — so a
failure can never leave the stack waiting for a node that will not report
(Heat's hang). Any unexpected exception takes the same path, except an
outage of the database or the coordination backend: that is not the node's
failure, and the check is given back to run again (``Worker._check``).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import ExitStack
from typing import Generic, TypeVar

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.outcome import RETRY
from sharemgr.convergence import decide, retain
from sharemgr.convergence import physical as phys
from sharemgr.convergence.act import Actor
from sharemgr.convergence.chained import Planned, record, run_claimed
from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.node_check import (
    Claimed,
    Ctx,
    Ending,
    Head,
    NodeEnd,
    Outcome,
    Result,
    cut_short,
)
from sharemgr.convergence.report import Pace, Reporter, Run
from sharemgr.convergence.row_locks import RowLocks
from sharemgr.convergence.template import Template, template_from_dict
from sharemgr.convergence.tracking import Reporting, Tracker
from sharemgr.db import capacity as db_capacity
from sharemgr.db import models, stack_work, stacks
from sharemgr.db.engine import Database
from sharemgr.manager import held_reads
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.leases import Terms
from sharemgr.manager.operations import Operations
from sharemgr.manager.outage import is_outage
from sharemgr.manager.plans import Op, Reread
from sharemgr.manager.runner import request_context

__all__ = ["CHAIN_LIMIT", "Worker"]

# A fast path's end when it wrote nothing: the general path takes the node.
GENERAL_PATH: NodeEnd = ((), RETRY)

LOG = logging.getLogger(__name__)

# Successors one request's thread runs after its node (a chain of checks);
# bounded so that a long chain does not hold a request thread (and a
# graceful stop) for ever. The rest are left to the request loop.
CHAIN_LIMIT = 50
# The update nodes' work that takes the fast path.
_FAST_KINDS = (decide.Work.CREATE, decide.Work.UPDATE)


class Worker:
    """The ``check_resource`` handler of one engine."""

    def __init__(
        self,
        db: Database,
        operations: Operations,
        coordinator: Coordinator,
        engine_id: str,
        placement: phys.Placement,
    ) -> None:
        self.db = db
        self.engine_id = engine_id
        self.placement = placement
        self.tracker = Tracker()
        self.locks = RowLocks(db, coordinator, engine_id, self.tracker)
        self.actor = Actor(db, operations, engine_id, placement, self.locks, self.template)
        self.reporter = Reporter(db, engine_id, self.locks, operations)
        self._templates: _Cache[Template] = _Cache(64)
        self._graphs: _Cache[Graph | None] = _Cache(16)
        self.pace = Pace()

    def __call__(self, req: models.Request) -> Outcome[object]:
        """The request loop's handler; RECORDED when the check wrote its
        request's end itself (in its report's transaction), so the loop
        writes nothing more."""
        self.tracker.running(req.id)
        try:
            return self.check(req)
        finally:
            self.tracker.finished(req.id)

    # What the watchdog asks ----------------------------------------------------------

    def holds(self, rid: int) -> bool:
        """Whether a check of this engine holds (or is taking) row ``rid``'s lock."""
        return self.tracker.holds(rid)

    def inflight(self) -> set[int]:
        """Ids of the check requests this engine is running now."""
        return self.tracker.inflight()

    def reporting(self) -> set[Reporting]:
        """Nodes whose reports a check of this engine is still writing
        (``Tracker.reporting``)."""
        return self.tracker.reporting()

    def tidy(self, row: models.StackResource | None) -> bool:
        """End the action of a row a cut check left IN_PROGRESS on an ended
        traversal (``RowLocks.tidy``)."""
        return self.locks.tidy(row)

    # Loading -------------------------------------------------------------------------

    def template(self, stack: models.Stack) -> Template:
        """The template of the stack's current traversal. Cached by traversal,
        not by template id: SQLite reuses the id of a purged template."""
        template_id = stack.template_id

        def load() -> Template:
            if template_id is None:
                return template_from_dict({})
            return template_from_dict(stacks.template_get(self.db, template_id) or {})

        self._forget_others(stack.id, stack.current_traversal)
        return self._templates.get((stack.id, stack.current_traversal, template_id), load)

    def graph(self, stack_id: str, traversal: str) -> Graph | None:
        """The traversal's graph (parsed once per engine and traversal), or
        None if the traversal is no longer current."""

        def load() -> Graph | None:
            deps = stack_work.stack_deps(self.db, stack_id, traversal)
            return None if deps is None else Graph.from_json(deps)

        self._forget_others(stack_id, traversal)
        return self._graphs.get((stack_id, traversal), load)

    def _forget_others(self, stack_id: str, traversal: str | None) -> None:
        """Drop the template and graph of the stack's older traversals (a
        check of one finds it superseded before it loads them): at 10,000
        resources each is megabytes, and an engine keeps only the current."""
        def other(key: Hashable) -> bool:
            return isinstance(key, tuple) and key[0] == stack_id and key[1] != traversal

        self._templates.discard(other)
        self._graphs.discard(other)

    # The check ----------------------------------------------------------------------

    def check(self, req: models.Request) -> Outcome[object]:
        """Run the claimed request's node, then, in this thread, the checks
        its report claimed (a successor it made ready, or the next pending
        checks), up to ``CHAIN_LIMIT`` of them; the rest wait for the
        request loop. The ends of fast paths' nodes wait for the run's next
        report, which writes up to a batch of them in one transaction
        (``Run.flush``). RECORDED when the node's report recorded the request
        done; otherwise the request loop records the outcome."""
        run = Run(self.pace)
        started = time.monotonic()
        nxt, outcome = self._check(req.id, req.args or {}, None, run)
        run.queue.extend(nxt)
        if run.waits_for(req.id):
            self.pace.node(time.monotonic() - started)
        hops = 0
        while run.queue or run.ends:
            if run.ends and (not run.queue or run.full()):
                for req_id, got in run.flush(self.reporter, CHAIN_LIMIT - hops,
                                             lambda *end: record(self, *end)):
                    if req_id == req.id:
                        outcome = got
            if run.queue:  # a batch's fast paths begin together (chained.py)
                claimed = list(run.queue)
                run.queue.clear()
                hops += len(claimed)
                run_claimed(self, run, claimed)
        if hops:  # the request loop logs this request's end: in its own context
            request_context(req.id, req.resource_type, req.resource_id)
        return outcome

    def node(self, claimed: Claimed, run: Run) -> NodeEnd:
        """A claimed check's node (``_check``), run in this thread."""
        return self._check(claimed.req_id, claimed.args, claimed.head, run)

    def _check(self, req_id: int, args: models.RequestArgs, head: Head | None, run: Run
               ) -> NodeEnd:
        """``_node``; an outage of the database or the coordination backend
        met anywhere in it is not the node's failure (a failover's closed
        connection failed a stack's delete in the long many-host run): the
        check is given back (NOT_NOW: its request goes back to pending
        once the database answers) and runs again, as after a crash there."""
        try:
            return self._node(req_id, args, head, run)
        except Exception as exc:
            if not is_outage(exc):
                raise
            return (), cut_short(exc)

    def _context(self, req_id: int, args: models.RequestArgs, head: Head | None,
                 tidy: bool = True
                 ) -> tuple[Ctx, models.Stack, models.StackResource] | Outcome:
        """The node's context, its stack and its row, from ``head`` (or read
        now); STALE when the stack is gone, its traversal superseded or
        ended (the row tidied, unless ``tidy`` is False), or the node out of
        the traversal."""
        node = Node(int(args["resource_id"]), bool(args["is_update"]))
        traversal, stack_id = args["traversal"], args["stack_id"]
        stack, row = head if head is not None and head[0] is not None \
            else stack_work.check_head(self.db, stack_id, node.resource_id)
        if stack is None:
            return Outcome.stale(f"stack {stack_id} is gone")
        if stack.current_traversal != traversal:
            return Outcome.stale(
                f"traversal {traversal} was superseded by {stack.current_traversal}")
        if stack.status != vocab.STACK_IN_PROGRESS:
            if tidy:
                self.tidy(row)
            return Outcome.stale(
                f"traversal {traversal} ended: stack {stack.action} {stack.status}")
        graph = self.graph(stack_id, traversal)
        if row is None or graph is None or node not in graph:
            return Outcome.stale(f"node {node} is not in traversal {traversal} any more")
        input_data = args.get("input_data") or {}
        return Ctx(req_id, stack_id, stack.name, traversal, node, graph, input_data, [],
                   args=args, template=self.template(stack)), stack, row

    def planned_fast(self, claimed: Claimed) -> Planned | None:
        """A claimed check whose node is an update that creates its resource
        or updates it in place on a row nobody holds and nothing replaces
        (``_fast_update``'s): its plan, read and decided as that fast path
        does, nothing written; None for any other (its check runs alone)."""
        try:
            got = self._context(claimed.req_id, claimed.args, claimed.head, tidy=False)
            if isinstance(got, Outcome):
                return None
            ctx, stack, row = got
            if row.engine_id is not None or not ctx.node.is_update \
                    or row.replaced_by is not None:
                return None
            return self._fast_plan(ctx, stack, row)
        except Exception:  # an outage, a bug: the check, run alone, meets it again
            return None

    def _node(self, req_id: int, args: models.RequestArgs, head: Head | None, run: Run
              ) -> NodeEnd:
        """One node, whose report records its request done in its own
        transaction. ``head``: the stack and row as the transaction that
        claimed it read them (the fast paths re-check both in their own
        transactions: ``begin`` under the stack's shared lock and the row's
        ``atomic_key``, a report by its SyncPoint). Every way it ends is a
        ``NodeEnd``; a fast path's end waits for the run's report (``run``)."""
        got = self._context(req_id, args, head)
        if isinstance(got, Outcome):
            return (), got
        ctx, stack, row = got
        node, graph, traversal = ctx.node, ctx.graph, ctx.traversal

        # Fast paths: nobody holds the row and the work is plain.
        if row.engine_id is None:
            if not node.is_update and (row.id, True) in graph and row.replaced_by is None:
                # A clean-up node whose row is still wanted does nothing: no
                # lock to take (its update node has reported; nothing else of
                # this traversal writes the row), just report.
                return run.end(Ending(ctx, Outcome.done()))
            if node.is_update and row.replaced_by is None:
                fast = self._fast_update(ctx, stack, row, run)
                if fast[1].result is not Result.RETRY:
                    return fast
            if not node.is_update:
                fast = self._fast_delete(ctx, row, run)
                if fast[1].result is not Result.RETRY:
                    return fast

        target = decide.route(self.db, self.template(stack), stack, row, node, graph,
                              ctx.input_data)
        if target is not None and not self.placement.serves(target):
            fake = models.Request(id=req_id, resource_type=vocab.STACK_RESOURCE,
                                  resource_id=str(node.resource_id),
                                  action=vocab.ACTION_CHECK, args=args)
            new = stack_work.forward_check(self.db, fake, target,
                                           f"{self.engine_id} does not serve it")
            return (), Outcome.stale(f"forwarded to {target} as request {new}")

        busy = self.locks.take(row.id, row)
        if busy is not None:
            return (), Outcome.stale(busy)
        ctx.held.append(row.id)
        try:
            outcome = self.actor.act(ctx)
        except Exception as exc:  # a bug: fail the stack, never hang it
            self._cut_by_outage(ctx, exc)
            LOG.exception("check of node %s (traversal %s) failed", node, traversal)
            outcome = Outcome.failed(f"{type(exc).__name__}: {exc}")
            self.actor.mark_failed(ctx.held[-1], outcome.reason or "")
        finally:
            for rid in ctx.held:
                self.locks.release(rid)
        return self._after(ctx, outcome)

    def _after(self, ctx: Ctx, outcome: Outcome) -> NodeEnd:
        """The general path's report, the node's locks released already."""
        self.reporter.after(ctx, outcome)
        if outcome.result is Result.BAILED:
            return (), Outcome.stale(outcome.reason or "")
        return (), Outcome.done()

    def _fast_update(self, ctx: Ctx, stack: models.Stack, row: models.StackResource,
                     run: Run) -> NodeEnd:
        """An update node that creates its resource, or updates it in place
        (a resize: what an update of a large stack mostly does), on a row
        nobody holds and nothing replaces: plan from the row as read, take
        the lock and begin in one transaction (``begin(lock_key=…)``: only
        if the row's lock did not move since it was read), carry out, then
        end, release and report in one more (``Reporter.end_many``, with
        other nodes' ends: ``Run``).
        Anything else — another kind of work, a lock that moved, a plan
        refused — returns RETRY before anything is written, and the general
        path decides again under the lock (with no replacement, its
        ``effective`` row is this one and it has no orphan to delete)."""
        planned = self._fast_plan(ctx, stack, row)
        return GENERAL_PATH if planned is None else self._fast(planned, run)

    def _fast_plan(self, ctx: Ctx, stack: models.Stack, row: models.StackResource
                   ) -> Planned | None:
        """``_fast_update``'s plan, nothing written; None: not its work."""
        template = self.template(stack)
        try:
            d = decide.decide(self.db, template, row, row, ctx.input_data)
        except Exception:  # the general path fails the node with the reason
            return None
        if d.kind not in _FAST_KINDS or not self.placement.serves(d.host):
            return None
        try:
            work, plan, final = self.actor.planned(ctx, stack, row, row, d)
        except Exception:  # refused, or a bug: the general path fails the node with it
            return None
        physical_id = plan.physical_id if work.action == vocab.STACK_CREATE else row.physical_id
        return Planned(ctx, row, work, plan, final, (row.id, row.type, physical_id))

    def _fast_delete(self, ctx: Ctx, row: models.StackResource, run: Run) -> NodeEnd:
        """A clean-up node that deletes its row's resource, on a row nobody
        holds: as ``_fast_update`` — plan from the row as read, take the
        lock and begin in one transaction (``begin(lock_key=…)``), carry
        out, then end, release and report in one more. A resource that is
        busy, elsewhere, already deleted or whose plan is refused, and a
        lock that moved, return RETRY before anything is written: the
        general path decides again under the lock (and fails, forwards or
        waits as it does)."""
        if row.action == vocab.STACK_DELETE and row.status == vocab.STACK_COMPLETE:
            return GENERAL_PATH
        if retain.policy_retains(self.db, row):
            return GENERAL_PATH  # the general path keeps it (or deletes it in a rollback)
        try:  # one read for a share: the observation and the plan's checks
            observed, plan = phys.observe_for_delete(self.db, row.type, row.physical_id)
        except Exception:  # refused, or a bug: the general path fails the node with it
            return GENERAL_PATH
        if plan is None or observed.state not in (phys.OK, phys.ERROR) \
                or not self.placement.serves(observed.host):
            return GENERAL_PATH
        work = self.actor.work(ctx, vocab.STACK_DELETE, {"status_reason": None}, plan)
        return self._fast(Planned(ctx, row, work, plan, {}, (row.id, row.type, row.physical_id)),
                          run)

    def _fast(self, p: Planned, run: Run) -> NodeEnd:
        """A fast path's begin, carry-out and end: the lock taken in the
        begin (only if it did not move since the row was read), then end,
        release and report in one transaction. RETRY, with nothing written,
        when the begin did not start (the general path decides again)."""
        ctx, row = p.ctx, p.row
        self.tracker.claim(row.id)
        try:
            begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id,
                                     ctx.traversal, p.work, lock_key=row.atomic_key)
        except db_capacity.NoRoom:  # the general path fails the node with the reason
            self.tracker.unclaim(row.id)
            return GENERAL_PATH
        except BaseException:
            self.tracker.unclaim(row.id)
            raise
        if isinstance(begun, Outcome):  # nothing was written, the lock not taken
            self.tracker.unclaim(row.id)
            return GENERAL_PATH
        return self.fast_begun(p, begun, run)

    def fast_begun(self, p: Planned, begun: stack_work.Begun[Terms], run: Run,
                   reread: Reread | None = None) -> NodeEnd:
        """A fast path's carry-out once its begin wrote (the lock taken:
        ``tracker.claim``'d), its end left to the run's report; ``reread``:
        its operation's row as its batch read it (``reread_held``)."""
        ctx, row, work = p.ctx, p.row, p.work
        ctx.held.append(row.id)
        try:
            outcome, end = self.actor.carry_out(ctx, row.name, begun, work.action, p.plan,
                                                p.final, known=p.known, defer=True,
                                                reread=reread)
            if work.action == vocab.STACK_DELETE:  # a clean-up passes nothing on
                outcome = dataclasses.replace(outcome, data=None)
        except Exception as exc:  # a bug: fail the stack, never hang it
            self._cut_by_outage(ctx, exc)
            LOG.exception("check of node %s (traversal %s) failed", ctx.node, ctx.traversal)
            outcome, end = Outcome.failed(f"{type(exc).__name__}: {exc}"), None
            self.actor.mark_failed(row.id, outcome.reason or "", work.action)
        if outcome.result is not Result.FAILED and end is not None:
            return run.end(Ending(ctx, outcome, end))
        for rid in ctx.held:
            self.locks.release(rid)
        return self._after(ctx, outcome)

    def reread_held(self, ops: Sequence[Op | None]) -> list[tuple[Op | None, ExitStack]]:
        """A batch's operations with their rows read under their locks, each
        with the stack that releases its lock (``manager/held_reads.py``)."""
        return held_reads.reread_held(self.actor.operations, ops, defer=True)

    def _cut_by_outage(self, ctx: Ctx, exc: Exception) -> None:
        """Re-raise ``exc`` if it is an outage (``_check`` gives the check
        back), leaving the node's row locks held as ``Actor.cut`` does: the
        act may have begun, and no check takes a row whose resource is
        transient; the next check of this engine, or its watchdog once the
        resource has settled, takes them over."""
        if not is_outage(exc):
            return
        for rid in ctx.held:
            self.tracker.unclaim(rid)
        ctx.held.clear()
        raise exc


V = TypeVar("V")


class _Cache(Generic[V]):
    """A small thread-safe LRU (templates by id, graphs by traversal); a
    load that answers None is not kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[Hashable, V] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}  # a lock per key being loaded

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        """The value of ``key``, loaded once however many threads ask at
        once (a traversal's first checks all want its template and graph,
        whose loads cost as much as hundreds of checks at 10,000 resources)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._items:
                    return self._items[key]
            value = load()
            with self._lock:
                self._loading.pop(key, None)
                if value is not None:
                    self._items[key] = value
                    while len(self._items) > self.size:
                        self._items.popitem(last=False)
        return value

    def discard(self, which: Callable[[Hashable], bool]) -> None:
        """Drop the entries whose key ``which`` says."""
        with self._lock:
            for key in [k for k in self._items if which(k)]:
                del self._items[key]
