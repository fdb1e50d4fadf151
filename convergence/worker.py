"""The check-resource workflow (doc/specs.rst: spec 001; architecture §7, steps 2-4).

A ``check_resource`` request names a graph node ``(resource row, is_update)``
of a traversal. :class:`Worker` handles one, in the engine's request thread:

1. *Route.* The node's physical work needs the driver of one backend: an
   update node that creates or replaces goes where the new resource goes
   (its parent's ``host@backend``, or any engine serving its ``backend``:
   ``*@backend``), any other node to the ``host@backend`` of the existing
   physical resource. An engine that cannot serve it forwards a copy of the
   request there (decided before taking any lock).
2. *Lock* the row (``engine_id`` + ``atomic_key``). Held by a live engine
   (this one included): bail out, trigger nothing — the holder retriggers
   (step 5). Held by a dead engine: break the lock, unless the physical
   resource is still in a transient status: then reconciliation settles it
   first and the dead engine's own check request is resumed afterwards
   (``resume.py``), which retriggers.
3. *Act* through the share operations, synchronously: create, update in
   place (share size: extend/shrink; name), replace (a new row and physical
   resource first; the old one is deleted by its clean-up node, later), or
   delete. Every action starts with one transaction that checks the
   traversal is current (shared lock on the stack row), marks the row
   ``<action> IN_PROGRESS`` with its physical id and writes the physical
   rows in their transient status plus the operation's request (running,
   owned by this engine): a crash leaves a row and a physical resource that
   reconciliation settles and the resumed check finds — a physical resource
   is never created twice.
4. *Release* the lock(s), then propagate: merge this node's data into each
   successor's SyncPoint; the write that completes a point enqueues the
   successor in its transaction; a root reports to the stack's point, whose
   completion marks the stack COMPLETE and purges.
5. *Retrigger.* Whoever held a lock checks afterwards whether its traversal
   is still current (a SyncPoint missing, or the stack row says so): if not,
   it retriggers the row's node in the newest traversal when that node is
   ready (doc/specs.rst, spec 001). Releasing before this check closes the race with a
   check that bailed on our lock: the newer traversal existed before it
   looked at the lock, so we see it.

A node that fails marks its row FAILED and the stack FAILED with the reason
— or, unless ``disable_rollback``, starts the rollback in the same
transaction — so a failure can never leave the stack waiting for a node that
will not report (Heat's hang). Any unexpected exception takes the same path.
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import lifecycle, prepare
from sharemgr.convergence import physical as phys
from sharemgr.convergence.graph import Graph, Node, node_key
from sharemgr.convergence.template import (
    ResourceData,
    Template,
    TemplateError,
    data_by_name,
    diff_properties,
    resolve_properties,
)
from sharemgr.db import api as db_api
from sharemgr.db import capacity as db_capacity
from sharemgr.db import models, stack_work, stacks, sync_points
from sharemgr.db.engine import Database
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import Lost, NotNow, OperationFailed, Operations, Stale
from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)

# A physical row changed between planning and starting (another check of a
# sibling made the share's first replica, say): plan again, this many times.
REPLAN_ATTEMPTS = 5
# Successors one request's thread runs after its node (a chain of checks);
# bounded so that a long chain does not hold a request thread (and a
# graceful stop) for ever. The rest are left to the request loop.
CHAIN_LIMIT = 50
# Successors a node reports to in the transaction that ends it (in sorted
# order: SyncPoints are locked in one order); the rest, one transaction each.
REPORT_IN_ONE = 8
# Clean-up nodes with nothing to do that one transaction reports for as it
# makes them ready (``Worker._cascade_tx``), instead of writing their checks:
# bounded so that a long chain's clean-up does not become one long transaction.
INLINE_LIMIT = 64
_SLOW = object()  # a fast path declined: take the general one


class Skip(Stale):
    """The check did nothing (bailed out, forwarded, superseded); the runner
    records the note on the request, which ends ``done``."""


@dataclass
class _Ctx:
    req_id: int
    stack_id: str
    stack_name: str
    traversal: str
    node: Node
    graph: Graph
    input_data: Mapping[str, Any]
    held: list[int] = field(default_factory=list)  # rows locked by this check
    chain: int = 0  # how many more successors this thread may run after this one
    args: Mapping[str, Any] = field(default_factory=dict)
    # The row's end, left to the report's transaction: (row, action, values, op request)
    end: tuple[int, str, dict, int | None] | None = None
    template: Template | None = None  # the traversal's: what successors read (passed_on)


@dataclass(frozen=True)
class _Claimed:
    """A successor's check this engine claimed as it made the node ready."""

    req_id: int
    args: dict
    head: tuple[models.Stack | None, models.StackResource | None]


@dataclass
class _Tx:
    """What one reporting transaction does with the nodes its writes make
    ready (``Worker._ready_tx``)."""

    complete: Callable[[Session, dict], None]  # the stack's point made ready: end the traversal
    own: bool = False  # the transaction that ends the check's node (``Worker._report``)
    claim: bool = False  # claim the first node that needs a check, to run next here
    queue: list[Node] = field(default_factory=list)  # clean-ups with nothing to do: reported in it
    inlined: int = 0  # how many joined the queue
    later: list[tuple[Node, dict | None, list[Node]]] = field(default_factory=list)
    roots: list[Node] = field(default_factory=list)  # reported to the stack's point at the end
    pending: list[tuple[int, dict, Node]] = field(default_factory=list)  # claimed: req, args, node
    batch: list[Node] = field(default_factory=list)  # the successors being reported to
    free: dict[int, bool] = field(default_factory=dict)  # rows read free and current, or not


@dataclass
class _Outcome:
    data: dict | None = None  # what an update node passes on
    failed: str | None = None  # the node failed: why
    superseded: bool = False  # the traversal is no longer current
    ended: bool = False  # the traversal ended (stack FAILED): stop quietly
    bailed: str | None = None  # a row was locked by a live engine


class Kind(enum.StrEnum):
    """What an update node does to its resource."""

    NOOP = "noop"
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    BUSY = "busy"  # another operation is under way on it


@dataclass
class _Decision:
    kind: Kind
    props: dict
    observed: phys.Observed
    in_place: Mapping[str, Any]
    host: str | None  # where the work runs ('host@backend', '*@backend', None: anywhere)


class _Cache:
    """A small thread-safe LRU (templates by id, graphs by traversal)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = load()
        if value is not None:
            with self._lock:
                self._items[key] = value
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return value


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
        self.operations = operations
        self.coordinator = coordinator
        self.engine_id = engine_id
        self.placement = placement
        self._templates = _Cache(64)
        self._graphs = _Cache(16)
        self._inflight: set[int] = set()
        self._inflight_lock = threading.Lock()
        # Rows this engine's checks hold or are taking, with how many checks.
        self._claims: collections.Counter[int] = collections.Counter()
        # Nodes whose reports a check of this engine is still writing.
        self._reporting: collections.Counter[tuple[str, str, Node]] = collections.Counter()

    def __call__(self, req: models.Request) -> bool:
        """The request loop's handler; True when the check recorded its
        request's outcome itself (in its report's transaction), so the
        loop writes nothing more."""
        with self._inflight_lock:
            self._inflight.add(req.id)
        try:
            return self.check(req)
        finally:
            with self._inflight_lock:
                self._inflight.discard(req.id)

    def holds(self, rid: int) -> bool:
        """Whether a check of this engine holds (or is taking) row ``rid``'s lock."""
        with self._inflight_lock:
            return self._claims[rid] > 0

    def inflight(self) -> set[int]:
        """Ids of the check requests this engine is running now."""
        with self._inflight_lock:
            return set(self._inflight)

    def reporting(self) -> set[tuple[str, str, Node]]:
        """``(stack id, traversal, node)`` of the nodes whose reports a check
        of this engine is still writing, a transaction after another (a wide
        fan-out, a clean-up reported for where it became ready): whose
        request, if they had one, is done already. The watchdog takes them
        for live, not stalled."""
        with self._inflight_lock:
            return set(self._reporting)

    def _mark_reporting(self, ctx: _Ctx, work: list, add: bool = True) -> None:
        with self._inflight_lock:
            for sender, _data, _succs in work:
                key = (ctx.stack_id, ctx.traversal, sender)
                self._reporting[key] += 1 if add else -1
                if self._reporting[key] <= 0:
                    del self._reporting[key]

    # Loading -------------------------------------------------------------------------

    def template(self, stack: models.Stack) -> Template:
        """The template of the stack's current traversal. Cached by traversal,
        not by template id: SQLite reuses the id of a purged template."""
        template_id = stack.template_id

        def load() -> Template:
            return Template.from_dict(stacks.template_get(self.db, template_id) or {})

        return self._templates.get((stack.current_traversal, template_id), load)

    def graph(self, stack_id: str, traversal: str) -> Graph | None:
        """The traversal's graph (parsed once per engine and traversal), or
        None if the traversal is no longer current."""

        def load() -> Graph | None:
            deps = stack_work.stack_deps(self.db, stack_id, traversal)
            return None if deps is None else Graph.from_json(deps)

        return self._graphs.get(traversal, load)

    def _row_values(self, stack: models.Stack, name: str, props: Mapping[str, Any],
                    requires: Any, input_data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A row's values when its action starts (its properties; the rows it
        requires, old and new, so neither is deleted under it) and when it
        completes (its template; only the rows it requires now)."""
        defn = self.template(stack).resources[name]
        data = data_by_name(input_data)
        deps = sorted({d_.resource_id for d_ in data.values()
                       if d_.name in defn.requires and d_.resource_id is not None})
        final = {"template_id": stack.template_id, "requires": deps}
        start = {"properties": props, "status_reason": None,
                 "requires": sorted(set(requires or ()) | set(deps))}
        return start, final

    # The check ----------------------------------------------------------------------

    def check(self, req: models.Request) -> bool:
        """Run the claimed request's node, then, in this thread, each
        successor it made ready and claimed (``_report``), up to
        ``CHAIN_LIMIT`` of them; the rest wait for the request loop.
        True when the node's report recorded the request done; otherwise
        the request loop records its outcome."""
        nxt, finished = self._check(req.id, req.args or {}, chain=CHAIN_LIMIT)
        hops = 0
        while nxt is not None:
            hops += 1
            nxt = self._chained(nxt.req_id, nxt.args, CHAIN_LIMIT - hops, nxt.head)
        return finished

    def _chained(self, req_id: int, args: dict, chain: int,
                 head: tuple[models.Stack | None, models.StackResource | None] | None = None
                 ) -> _Claimed | None:
        """A check this engine claimed as it made the node ready: run it and
        record its request's outcome as the request loop would."""
        status: str | None = vocab.REQUEST_DONE
        error, nxt = None, None
        try:
            nxt, finished = self._check(req_id, args, chain=chain, head=head)
        except Stale as exc:
            LOG.info("request %s (check_resource): nothing to do: %s", req_id, exc)
            status, error = vocab.REQUEST_DONE, f"stale: {exc}"
        except Exception as exc:  # recorded on the request: the watchdog counts these
            LOG.exception("request %s (check_resource) failed", req_id)
            status, error = vocab.REQUEST_FAILED, f"{type(exc).__name__}: {exc}"
        else:
            if finished:  # its report recorded it
                status = None
        try:
            if status is not None:
                stack_work.finish_request(self.db, req_id, self.engine_id, status, error)
        except Exception:
            LOG.exception("could not record the outcome of request %s", req_id)
        finally:
            with self._inflight_lock:
                self._inflight.discard(req_id)
        return nxt

    def _check(self, req_id: int, args: dict, chain: int,
               head: tuple[models.Stack | None, models.StackResource | None] | None = None
               ) -> tuple[_Claimed | None, bool]:
        """One node, whose report (``_report``) records its request done in
        its own transaction. ``head``:
        the stack and row as the transaction that claimed it read them (the
        fast paths re-check both in their own transactions: ``begin``
        under the stack's shared lock and the row's ``atomic_key``, a
        report by its SyncPoint). Returns the successor it claimed to run
        next, if any, and whether the request's outcome is recorded
        already."""
        node = Node(int(args["resource_id"]), bool(args["is_update"]))
        traversal, stack_id = args["traversal"], args["stack_id"]
        stack, row = head if head is not None and head[0] is not None \
            else stack_work.check_head(self.db, stack_id, node.resource_id)
        if stack is None:
            raise Skip(f"stack {stack_id} is gone")
        if stack.current_traversal != traversal:
            raise Skip(f"traversal {traversal} was superseded by {stack.current_traversal}")
        if stack.status != vocab.STACK_IN_PROGRESS:
            self.tidy(row)
            raise Skip(f"traversal {traversal} ended: stack {stack.action} {stack.status}")
        graph = self.graph(stack_id, traversal)
        if row is None or graph is None or node not in graph:
            raise Skip(f"node {node} is not in traversal {traversal} any more")
        input_data = args.get("input_data") or {}
        ctx = _Ctx(req_id, stack_id, stack.name, traversal, node, graph, input_data, [],
                   chain=chain, args=args, template=self.template(stack))

        # Fast paths: nobody holds the row and the work is plain.
        if row.engine_id is None:
            if not node.is_update and (row.id, True) in graph and row.replaced_by is None:
                # A clean-up node whose row is still wanted does nothing: no
                # lock to take (its update node has reported; nothing else of
                # this traversal writes the row), just report.
                return self._report(ctx, _Outcome())
            if node.is_update and row.replaced_by is None:
                fast = self._fast_update(ctx, stack, row)
                if fast is not _SLOW:
                    return fast

        target = self._route(stack, row, node, graph, input_data)
        if not self.placement.serves(target):
            fake = models.Request(id=req_id, resource_type=vocab.STACK_RESOURCE,
                                  resource_id=str(node.resource_id),
                                  action=vocab.ACTION_CHECK, args=args)
            new = stack_work.forward_check(self.db, fake, target,
                                           f"{self.engine_id} does not serve it")
            raise Skip(f"forwarded to {target} as request {new}")

        busy = self._take(row.id, row)
        if busy is not None:
            raise Skip(busy)
        ctx.held.append(row.id)
        try:
            outcome = self._act(ctx)
        except Exception as exc:  # a bug or a lost database: fail the stack, never hang it
            LOG.exception("check of node %s (traversal %s) failed", node, traversal)
            outcome = _Outcome(failed=f"{type(exc).__name__}: {exc}")
            self._mark_failed(ctx.held[-1], outcome.failed)
        finally:
            for rid in ctx.held:
                self._release(rid)
        self._after(ctx, outcome)
        if outcome.bailed:
            raise Skip(outcome.bailed)
        return None, False

    def tidy(self, row: models.StackResource | None) -> bool:
        """The traversal ended (FAILED) while a check of this row was cut
        short — by its engine's death (the dead engine's lock is dropped), or
        by a partition, the lock since let go by a check that found the
        traversal over (nobody holds it): end the row's action, so the row
        does not look busy until the next user action. A row whose physical
        resource is still transient waits for reconciliation. True if this
        call tidied it."""
        holder = None if row is None else row.engine_id
        if row is None or row.status != vocab.STACK_IN_PROGRESS or holder == self.engine_id \
                or (holder is not None and self.coordinator.is_alive(holder)):
            return False
        if phys.observe(self.db, row.type, row.physical_id).state == phys.BUSY:
            return False
        taken = stacks.resource_lock_acquire(self.db, row.id, self.engine_id) if holder is None \
            else stacks.resource_lock_steal(self.db, row.id, self.engine_id, holder)
        if not taken.acquired:
            return False
        why = f"the death of engine {holder}" if holder else "a pause or partition"
        try:
            again = stacks.resource_get(self.db, row.id)
            stack = stack_work.stack_head(self.db, row.stack_id)
            if again is None or again.status != vocab.STACK_IN_PROGRESS or stack is None \
                    or stack.status == vocab.STACK_IN_PROGRESS:
                return False  # ended by its own check, or a new traversal takes it
            stacks.resource_set_state(self.db, row.id, self.engine_id, row.action,
                                      vocab.STACK_FAILED,
                                      f"{row.action} cut short by {why}; the stack's "
                                      "traversal had ended")
        finally:
            stacks.resource_lock_release(self.db, row.id, self.engine_id)
        LOG.info("resource %s: %s cut short by %s on an ended traversal; marked FAILED",
                 row.id, row.action, why)
        return True

    # Fast paths ----------------------------------------------------------------------------

    def _fast_update(self, ctx: _Ctx, stack: models.Stack, row: models.StackResource
                     ) -> Any:
        """An update node that creates its resource on a row nobody holds:
        plan from the row as read, take the lock and begin in one
        transaction (``begin(lock_key=…)``: only if the row's lock did not
        move since it was read), carry out, then end, release and report in
        one more (``_report``). Anything else — another kind of work, a
        lock that moved, a plan refused — returns ``_SLOW`` before anything
        is written, and the general path decides again under the lock."""
        try:
            d = self._decide(stack, row, row, ctx.input_data)
        except Exception:  # the general path fails the node with the reason
            return _SLOW
        if d.kind != Kind.CREATE or not self.placement.serves(d.host):
            return _SLOW
        start, final = self._row_values(stack, row.name, d.props, row.requires,
                                        ctx.input_data)
        try:
            plan = phys.plan_create(self.db, row.type, d.props,
                                    phys.new_name(ctx.stack_name, row.name, d.props),
                                    self.placement)
        except Exception:  # refused, or a bug: the general path fails the node with it
            return _SLOW
        if plan.physical_id is not None:
            start["physical_id"] = plan.physical_id
        work = self._work(ctx, vocab.STACK_CREATE, start, plan)
        with self._inflight_lock:
            self._claims[row.id] += 1
        try:
            begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id,
                                     ctx.traversal, work, lock_key=row.atomic_key)
        except db_capacity.NoRoom:  # the general path fails the node with the reason
            self._untake(row.id)
            return _SLOW
        except BaseException:
            self._untake(row.id)
            raise
        if isinstance(begun, str):  # nothing was written, the lock not taken
            self._untake(row.id)
            return _SLOW
        ctx.held.append(row.id)
        try:
            outcome = self._carry_out(ctx, row.name, begun, vocab.STACK_CREATE, plan, final,
                                      known=(row.id, row.type, plan.physical_id), defer=True)
        except Exception as exc:  # a bug or a lost database: fail the stack, never hang it
            LOG.exception("check of node %s (traversal %s) failed", ctx.node, ctx.traversal)
            outcome = _Outcome(failed=f"{type(exc).__name__}: {exc}")
            ctx.end = None
            self._mark_failed(row.id, outcome.failed)
        if outcome.failed is None and ctx.end is not None:
            return self._report(ctx, outcome)
        for rid in ctx.held:
            self._release(rid)
        self._after(ctx, outcome)
        if outcome.bailed:
            raise Skip(outcome.bailed)
        return None, False

    def _report(self, ctx: _Ctx, outcome: _Outcome) -> tuple[_Claimed | None, bool]:
        """End the node in one transaction: report to its successors'
        SyncPoints (up to ``REPORT_IN_ONE`` of them, in sorted order; from a
        root, to the stack's) — the points first, for the lock order —, end
        the row's action and release its lock, and record the check's own
        request. A successor made ready is enqueued in it, or (the first)
        claimed by this engine to run next in this thread (its request row,
        ``running`` for us, is the durable trigger); a clean-up node made
        ready that has nothing to do is reported for in it
        (``_cascade_tx``). Further successors are reported to afterwards
        (``_report_later``). On a database error the pieces are written one
        by one, as the general path does."""
        node, graph = ctx.node, ctx.graph
        targets = sorted(graph.required_by(node))
        claimed: list[_Claimed] = []
        ended = marked = False

        def own_writes(session: Session) -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            ended_rid, op_id = None, None
            if ctx.end is not None:
                ended_rid, action, values, op_id = ctx.end
            # The operation's request and the check's own, done in one UPDATE;
            # requests before the row, as a lone end writes them.
            stack_work.finish_requests_tx(session, (ctx.req_id, *(() if op_id is None
                                                                 else (op_id,))),
                                          self.engine_id, vocab.REQUEST_DONE)
            if ctx.end is not None:
                stack_work.end_tx(session, ended_rid, self.engine_id, action,
                                  vocab.STACK_COMPLETE, None, values,
                                  release=ended_rid in ctx.held)
            for rid in dict.fromkeys(ctx.held):
                if rid != ended_rid:  # released as it ended
                    stacks.resource_lock_release_tx(session, rid, self.engine_id)

        def complete(session: Session, _input: dict) -> None:
            lifecycle.complete_tx(session, ctx.stack_id, ctx.traversal,
                                  before_purge=lambda: own_writes(session))

        tx = _Tx(complete, own=True, claim=ctx.chain > 0)
        if targets[REPORT_IN_ONE:]:
            tx.later.append((node, outcome.data, targets[REPORT_IN_ONE:]))

        def report(session: Session) -> bool:
            nonlocal marked
            found = self._reports_tx(session, ctx, tx, node, outcome.data,
                                     targets[:REPORT_IN_ONE]) \
                and self._cascade_tx(session, ctx, tx)
            own_writes(session)
            for req_id, args, succ in tx.pending:
                # Its head is read last, after this check's own writes, so it sees them.
                claimed.append(_Claimed(req_id, args, stack_work.check_head_tx(
                    session, ctx.stack_id, succ.resource_id)))
            # Before the commit: from it on, these senders have reports left.
            self._mark_reporting(ctx, tx.later)
            marked = True
            return found

        try:
            found = lifecycle.in_one_transaction(self.db, report)
        except Exception:
            LOG.exception("node %s (traversal %s): could not report in one transaction; "
                          "writing it step by step", node, ctx.traversal)
            if marked:  # the commit failed
                self._mark_reporting(ctx, tx.later, add=False)
            with self._inflight_lock:
                for req_id, _args, _succ in tx.pending:
                    self._inflight.discard(req_id)
            if ctx.end is not None:
                rid, action, values, op_id = ctx.end
                stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_COMPLETE,
                               None, values, op_request_id=op_id)
            for rid in ctx.held:
                self._release(rid)
            self._after(ctx, outcome)
            return None, False
        for rid in ctx.held:
            self._untake(rid)
        later = list(tx.later)
        try:
            if not (found and self._report_later(ctx, tx.later)):
                self._retrigger(ctx)
        except BaseException:
            # The claimed successor will not run here: left to the watchdog,
            # which abandons a request of ours that no check runs and
            # retriggers its node.
            with self._inflight_lock:
                for c in claimed:
                    self._inflight.discard(c.req_id)
            raise
        finally:
            self._mark_reporting(ctx, later, add=False)
        return (claimed[0] if claimed else None), True

    def _reports_tx(self, session: Session, ctx: _Ctx, tx: _Tx, sender: Node,
                    data: dict | None, succs: list[Node]) -> bool:
        """``sender``'s report to ``succs`` (its successors, sorted: every
        multi-point report locks them in that order) in the caller's
        transaction, or, with none, from a root to the stack's point (left
        to the end of the transaction, ``_cascade_tx``). False if a point is
        gone: the traversal is over."""
        graph, traversal = ctx.graph, ctx.traversal
        tx.batch = succs
        for succ in succs:
            sent, known = _sent(graph, sender, succ, data)
            if not sync_points.sync_tx(
                    session, succ.resource_id, traversal, succ.is_update, sender.key, sent,
                    graph.requires_keys(succ),
                    lambda s_, input_data, succ=succ: self._ready_tx(s_, ctx, tx, succ,
                                                                     input_data),
                    known=known).found:
                return False
        if not succs and graph.is_root(sender):
            tx.roots.append(sender)  # written last, together (``_cascade_tx``)
        return True

    def _ready_tx(self, session: Session, ctx: _Ctx, tx: _Tx, succ: Node,
                  input_data: dict) -> None:
        """``succ`` was made ready in ``tx``: a clean-up with nothing to do
        joins its queue, to be reported for in it; else its check request is
        written, claimed by this engine to run next in this thread (the
        first, in ``_report``) or pending for any engine."""
        if self._noop_cleanup_tx(session, ctx, tx, succ):
            tx.queue.append(succ)
        elif tx.claim and not tx.pending:
            args = prepare.check_request_args(ctx.stack_id, ctx.traversal, succ, input_data)
            req_id = stack_work.running_check_tx(session, self.engine_id, succ.resource_id, args)
            with self._inflight_lock:
                self._inflight.add(req_id)
            tx.pending.append((req_id, args, succ))
        else:
            prepare.enqueue_check_tx(session, ctx.stack_id, ctx.traversal, succ, input_data)

    def _noop_cleanup_tx(self, session: Session, ctx: _Ctx, tx: _Tx, succ: Node) -> bool:
        """Whether ``succ``, made ready in ``tx``, is a clean-up node with
        nothing to do, whose report ``tx`` can write itself: the clean-up of
        a row the traversal still wants (its update node, which comes first,
        has reported), which nobody holds and nothing replaced — what its
        own check would read before it only reports (``_check``'s first
        fast path); no request is written for it, and no crash can cut it
        in half. The traversal is current and in progress: ``succ``'s
        point, just written under its lock, exists (a traversal's points
        are deleted when it is superseded, completes or fails, before its
        stack row is written), which is all that check would read of the
        stack. Up to ``INLINE_LIMIT`` per transaction."""
        if succ.is_update or (succ.resource_id, True) not in ctx.graph \
                or tx.inlined >= INLINE_LIMIT:
            return False
        if (tx.own and self._inline(ctx, succ)) or self._free_tx(session, ctx, tx, succ):
            tx.inlined += 1
            return True
        return False

    def _free_tx(self, session: Session, ctx: _Ctx, tx: _Tx, succ: Node) -> bool:
        """Whether ``succ``'s row is free and current, read in ``tx`` with
        those of the clean-up nodes it may make ready next (the rest of the
        batch, then those after ``succ``): one read for a chain's run of
        clean-ups, or for a batch of a fan-out's. A row read earlier in the
        transaction is as good as one read now: every report of ``tx`` is
        written before its commit, whichever comes first."""
        rid = succ.resource_id
        if rid not in tx.free:
            asked = [rid, *(r for r in _cleanups_ahead(ctx.graph, [*tx.batch, succ],
                                                       INLINE_LIMIT - tx.inlined)
                            if r != rid and r not in tx.free)]
            free = stack_work.free_and_current_tx(session, asked)
            tx.free.update((r, r in free) for r in asked)
        return tx.free[rid]

    def _cascade_tx(self, session: Session, ctx: _Ctx, tx: _Tx) -> bool:
        """Report, in ``tx``, for the clean-up nodes with nothing to do in
        its queue: each to its first successor, or from a root to the
        stack's point; their further successors are left to
        ``_report_later``. Reports that make more such nodes ready add them
        to the queue. These points are locked after every point of the
        transaction's batch, and they are clean-up points (of rows the node
        required) or the stack's: later in the graph than the batch, and
        written by clean-up nodes only once every update node before them
        has reported; then the stack's point, for every root the
        transaction reported for. Should two transactions still deadlock,
        the database breaks it and the report is written step by step.
        False if a point is gone."""
        while tx.queue:
            node = tx.queue.pop(0)
            succs = sorted(ctx.graph.required_by(node))
            if succs[1:]:
                tx.later.append((node, None, succs[1:]))
            if not self._reports_tx(session, ctx, tx, node, None, succs[:1]):
                return False
        if not tx.roots:
            return True
        # The stack's point, last of all: the reports of every root this
        # transaction ended (a fan-in's leaves, a batch of eight) in one
        # read and one write.
        return sync_points.sync_many_tx(
            session, ctx.stack_id, ctx.traversal, True, dict.fromkeys(r.key for r in tx.roots),
            ctx.graph.root_keys(), tx.complete).found

    def _inline(self, ctx: _Ctx, succ: Node) -> bool:
        """Whether ``succ`` is the clean-up node of the row ``ctx`` just
        created, in the transaction that ends it: a row still wanted, which
        this check held from start to end (so nobody replaced it), has
        nothing to clean up; its lock, ours, is released in that same
        transaction."""
        return (ctx.end is not None and ctx.node.is_update
                and succ == Node(ctx.node.resource_id, False)
                and ctx.end[0] == ctx.node.resource_id and ctx.node.resource_id in ctx.held)

    # Routing and locks ------------------------------------------------------------------

    def _route(self, stack: models.Stack, row: models.StackResource, node: Node, graph: Graph,
               input_data: Mapping[str, Any]) -> str | None:
        """Where this node's physical work must run (see the module doc);
        None: any engine. A failure to tell is decided under the lock, here."""
        try:
            if not node.is_update:
                if (row.id, True) in graph and row.replaced_by is None:
                    return None
                return phys.observe(self.db, row.type, row.physical_id).host
            effective, _ = self._effective(stack, row)
            decision = self._decide(stack, row, effective, input_data)
            return decision.host
        except Exception as exc:
            LOG.debug("node %s: no route (%s); deciding here", node, exc)
            return None

    def _take(self, rid: int, row: models.StackResource) -> str | None:
        """Lock ``rid``: None when held now, else why not (the caller bails)."""
        with self._inflight_lock:
            self._claims[rid] += 1
        try:
            why = self._try_take(rid, row)
        except BaseException:
            why = "error"
            raise
        finally:
            if why is not None:
                self._untake(rid)
        return why

    def _untake(self, rid: int) -> None:
        with self._inflight_lock:
            self._claims[rid] -= 1
            if self._claims[rid] <= 0:
                del self._claims[rid]

    def _release(self, rid: int) -> None:
        try:
            stacks.resource_lock_release(self.db, rid, self.engine_id)
        except Exception:  # leaked: the next check of this engine takes it over
            LOG.exception("resource %s: could not release its lock", rid)
        finally:
            self._untake(rid)

    def _try_take(self, rid: int, row: models.StackResource) -> str | None:
        got = stacks.resource_lock_acquire(self.db, rid, self.engine_id)
        if got.acquired:
            return None
        if not got.found:
            return f"resource {rid} is gone"
        holder = got.holder
        if holder == self.engine_id:
            with self._inflight_lock:
                ours = self._claims[rid] > 1  # another thread of ours holds or takes it
            if not ours and phys.observe(self.db, row.type, row.physical_id).state == phys.BUSY:
                # Left held by a check of ours that was cut (``_cut``): as a
                # dead engine's, it waits for the resource to settle.
                return (f"resource {rid} is held by a cut check of this engine and its "
                        "physical resource is transient: the watchdog retriggers this node "
                        "once it has settled")
            if not ours:
                # Our own lock, but no check of ours holds it: its release was
                # lost (a database error). Left alone, every later check would
                # bail on a "live" holder forever.
                stolen = stacks.resource_lock_steal(self.db, rid, self.engine_id, holder)
                if stolen.acquired:
                    LOG.warning("resource %s: took over a lock this engine leaked", rid)
                    return None
        if holder == self.engine_id or self.coordinator.is_alive(holder):
            return (f"resource {rid} is locked by live engine {holder}, which retriggers "
                    "this node when it is done")
        observed = phys.observe(self.db, row.type, row.physical_id)
        if observed.state == phys.BUSY:
            return (f"resource {rid} is locked by dead engine {holder} and its physical "
                    f"resource is {observed.status}: reconciliation settles it, then "
                    "the watchdog retriggers this node")
        stolen = stacks.resource_lock_steal(self.db, rid, self.engine_id, holder)
        if not stolen.acquired:
            return f"resource {rid} is locked by engine {stolen.holder}"
        LOG.warning("resource %s: broke the lock of dead engine %s", rid, holder)
        return None

    # Acting ------------------------------------------------------------------------------

    def _act(self, ctx: _Ctx) -> _Outcome:
        stack = stack_work.stack_head(self.db, ctx.stack_id)
        if stack is None or stack.current_traversal != ctx.traversal:
            return _Outcome(superseded=True)
        if stack.status != vocab.STACK_IN_PROGRESS:
            return _Outcome(ended=True)
        row = stacks.resource_get(self.db, ctx.node.resource_id)
        if row is None:
            return _Outcome(superseded=True)
        if ctx.node.is_update:
            return self._update(ctx, stack, row)
        return self._cleanup(ctx, stack, row)

    def _effective(self, stack: models.Stack, row: models.StackResource
                   ) -> tuple[models.StackResource, bool]:
        """The row an update node works on: its replacement if a check of this
        traversal made one before it was cut short (same template, not being
        deleted), else the row itself. The flag says whether the row's
        ``replaced_by`` points elsewhere and must be cleared (a rollback back
        to this row: its replacement is cleaned up instead)."""
        if row.replaced_by is None:
            return row, False
        new = stacks.resource_get(self.db, row.replaced_by)
        if new is not None and new.action != vocab.STACK_DELETE \
                and new.template_id == stack.template_id:
            return new, False
        return row, True

    def _orphan(self, ctx: _Ctx, row: models.StackResource) -> models.StackResource | None:
        """A replacement of ``row`` that this node must delete itself before
        it goes on: one made by a check of this traversal that a crash cut
        short (hence not in the graph, so no clean-up node will come for
        it), whose physical resource failed or is being deleted. Deleting it
        first is safe: nothing depends on it yet, its dependants run after
        this node."""
        if row.replaced_by is None:
            return None
        new = stacks.resource_get(self.db, row.replaced_by)
        if new is None or (new.id, False) in ctx.graph or \
                (new.action == vocab.STACK_DELETE and new.status == vocab.STACK_COMPLETE):
            return None
        if new.action == vocab.STACK_DELETE:
            return new
        return new if phys.observe(self.db, new.type, new.physical_id).state == phys.ERROR \
            else None

    def _decide(self, stack: models.Stack, row: models.StackResource,
                effective: models.StackResource, input_data: Mapping[str, Any]) -> _Decision:
        defn = self.template(stack).resources[row.name]
        props = resolve_properties(defn, data_by_name(input_data))
        observed = phys.observe(self.db, effective.type, effective.physical_id)
        kind, in_place = Kind.REPLACE, {}
        if effective.action == vocab.STACK_DELETE:
            kind = Kind.REPLACE  # doc/specs.rst, spec 001: update node whose row is being deleted
        elif observed.state == phys.GONE:
            kind = Kind.CREATE
        elif observed.state == phys.BUSY:
            kind = Kind.BUSY
        elif observed.state == phys.OK:
            current = {**(effective.properties or {}), **observed.actual}
            diff = diff_properties(effective.type, current, props)
            if not diff.replace:
                kind, in_place = (Kind.UPDATE, diff.in_place) if diff.changed \
                    else (Kind.NOOP, {})
        if kind in (Kind.CREATE, Kind.REPLACE):
            host = phys.target_host(self.db, effective.type, props)
        else:
            host = observed.host
        return _Decision(kind, props, observed, in_place, host)

    def _update(self, ctx: _Ctx, stack: models.Stack, row: models.StackResource) -> _Outcome:
        orphan = self._orphan(ctx, row)
        if orphan is not None:
            outcome = self._delete_orphan(ctx, orphan)
            if outcome is not None:
                return outcome
            row = stacks.resource_get(self.db, row.id)
        for _attempt in range(REPLAN_ATTEMPTS):
            outcome = self._update_once(ctx, stack, row)
            if outcome is not None:
                return outcome
            row = stacks.resource_get(self.db, row.id)
            if row is None:
                return _Outcome(superseded=True)
        return self._failed(row, _nominal(row), "its physical resources kept changing "
                            f"while it was planned ({REPLAN_ATTEMPTS} attempts)")

    def _delete_orphan(self, ctx: _Ctx, orphan: models.StackResource) -> _Outcome | None:
        """Delete a cut replacement (see ``_orphan``); None when it is gone."""
        if orphan.id not in ctx.held:
            busy = self._take(orphan.id, orphan)
            if busy is not None:
                return _Outcome(bailed=busy)
            ctx.held.append(orphan.id)
        LOG.info("stack %s: %s: deleting replacement row %s, cut short by a crash",
                 ctx.stack_name, orphan.name, orphan.id)
        outcome = self._delete_row(ctx, orphan)
        return None if outcome.failed is None and not outcome.superseded \
            and not outcome.bailed else outcome

    def _update_once(self, ctx: _Ctx, stack: models.Stack, row: models.StackResource
                     ) -> _Outcome | None:
        """One try at the update node; None: a physical row changed since it
        was planned, plan again."""
        effective, unreplace = self._effective(stack, row)
        if effective.id != row.id and effective.id not in ctx.held:
            busy = self._take(effective.id, effective)
            if busy is not None:
                return _Outcome(bailed=busy)
            ctx.held.append(effective.id)
        elif unreplace:
            stack_work.unreplace(self.db, row.id, self.engine_id, row.replaced_by)
        try:
            d = self._decide(stack, row, effective, ctx.input_data)
        except TemplateError as exc:
            return self._failed(effective, _nominal(effective), str(exc))
        if d.kind == Kind.BUSY:
            return self._failed(effective, _nominal(effective),
                                f"physical resource {effective.physical_id} "
                                f"is {d.observed.status}: another operation is under way")
        start, final = self._row_values(stack, row.name, d.props, effective.requires,
                                        ctx.input_data)
        name = phys.new_name(ctx.stack_name, row.name, d.props)

        if d.kind == Kind.NOOP:
            return self._noop(ctx, row, effective, d, final)
        try:
            if d.kind == Kind.UPDATE:
                plan = phys.plan_update(self.db, effective.type, effective.physical_id,
                                        d.in_place, name)
            else:
                plan = phys.plan_create(self.db, effective.type, d.props, name, self.placement)
        except phys.CheckError as exc:
            return self._failed(effective, vocab.STACK_UPDATE if d.kind == Kind.UPDATE
                                else vocab.STACK_CREATE, str(exc))
        action = vocab.STACK_UPDATE if d.kind == Kind.UPDATE else vocab.STACK_CREATE
        if plan.physical_id is not None:
            start["physical_id"] = plan.physical_id
        work = self._work(ctx, action, start, plan)
        try:
            begun = stack_work.begin(
                self.db, effective.id, self.engine_id, ctx.stack_id, ctx.traversal, work,
                replace=d.kind == Kind.REPLACE, replace_template_id=stack.template_id,
                replace_requires=final["requires"])
        except db_capacity.NoRoom as exc:  # placed meanwhile by others: refused as a plan is
            return self._failed(effective, action, f"{exc} (placed meanwhile by others)")
        if isinstance(begun, str):
            return _not_begun(begun, effective.id)
        if begun.resource_id != effective.id:
            with self._inflight_lock:  # the replacement, born locked by us
                self._claims[begun.resource_id] += 1
            ctx.held.append(begun.resource_id)
            LOG.info("stack %s: %s (row %s) replaced by row %s", ctx.stack_name, row.name,
                     effective.id, begun.resource_id)
        return self._carry_out(ctx, row.name, begun, action, plan, final)

    def _noop(self, ctx: _Ctx, row: models.StackResource, effective: models.StackResource,
              d: _Decision, final: dict) -> _Outcome:
        """Nothing to change: record the template and dependencies (and finish
        an action a dead engine left IN_PROGRESS whose resource turned out
        fine)."""
        if effective.status == vocab.STACK_COMPLETE and effective.action != vocab.STACK_INIT:
            action, status = effective.action, vocab.STACK_COMPLETE
        else:
            created = effective.action in (vocab.STACK_INIT, vocab.STACK_CREATE)
            action = vocab.STACK_CREATE if created else vocab.STACK_UPDATE
            status = vocab.STACK_COMPLETE
        values = {**final, "properties": d.props, "attributes": dict(d.observed.attributes)}
        stacks.resource_set_state(self.db, effective.id, self.engine_id, action, status,
                                  None, values)
        return _Outcome(data=ResourceData(row.name, effective.id, effective.physical_id,
                                          d.observed.attributes).passed_on(ctx.template))

    def _work(self, ctx: _Ctx, action: str, values: dict, plan: phys.Plan) -> stack_work.Begin:
        """What ``begin`` writes for ``plan``: its new rows and changes, and
        its operation's request, running for this engine with the default
        lease (which the call keeps unless its method has one of its own)."""
        op = plan.op
        return stack_work.Begin(action, values, plan.add, plan.changes,
                                op.request({"stack_id": ctx.stack_id}) if op else None,
                                self.operations.default_lease() if op else None,
                                plan.claims)

    def _cut(self, ctx: _Ctx, rid: int, name: str, op_request_id: int | None,
             exc: NotNow | Lost) -> _Outcome:
        """The engine could not see the operation through — out of the
        group or its lease running out before the driver call (``NotNow``),
        or the resource taken over while the driver worked (``Lost``). That
        is not the stack's failure: the node bails as if its engine had
        died there, the row's lock left held (no check takes it while the
        resource is transient), and the watchdog retriggers it once the
        resource has settled. An operation that never reached the driver is
        given back for a member to run; a lost one is abandoned (its
        resource is being re-observed)."""
        if rid in ctx.held:
            ctx.held.remove(rid)
            self._untake(rid)
        if op_request_id is not None:
            if isinstance(exc, NotNow):
                db_api.request_release(self.db, op_request_id, self.engine_id,
                                       f"given back: {exc}")
            else:
                stack_work.finish_request(self.db, op_request_id, self.engine_id,
                                          vocab.REQUEST_ABANDONED, f"lost: {exc}")
        LOG.warning("%s: %s; the node waits for the watchdog", name, exc)
        return _Outcome(bailed=f"{name}: {exc}")

    def _carry_out(self, ctx: _Ctx, name: str, begun: stack_work.Begun, action: str,
                   plan: phys.Plan, final: dict,
                   known: tuple[int, str, str | None] | None = None,
                   defer: bool = False) -> _Outcome:
        """Run the begun action's operation and end the row's action.
        ``known``: the row's (id, type, physical id) as begun, so it is not
        read again; ``defer``: a success's end is left to ``_report``."""
        if known is None:
            row = stacks.resource_get(self.db, begun.resource_id)
            known = (row.id, row.type, row.physical_id)
        rid, type_, physical_id = known
        written = None
        if plan.op is not None:
            try:
                written = self.operations.perform(replace(
                    plan.op, request_id=begun.op_request_id, lease=begun.op_lease))
            except (NotNow, Lost) as exc:
                return self._cut(ctx, rid, name, begun.op_request_id, exc)
            except (OperationFailed, Stale) as exc:
                reason = f"{name}: {exc}"
                stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_FAILED, reason,
                               op_request_id=begun.op_request_id, op_error=str(exc))
                return _Outcome(failed=reason)
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
        observed = phys.observe_after(self.db, type_, physical_id, plan, written)
        values = {**final, "attributes": dict(observed.attributes)}
        if defer:
            ctx.end = (rid, action, values, begun.op_request_id)
        else:
            stack_work.end(self.db, rid, self.engine_id, action, vocab.STACK_COMPLETE, None,
                           values, op_request_id=begun.op_request_id)
        return _Outcome(data=ResourceData(name, rid, physical_id,
                                          observed.attributes).passed_on(ctx.template))

    def _cleanup(self, ctx: _Ctx, stack: models.Stack, row: models.StackResource) -> _Outcome:
        if (row.id, True) in ctx.graph and row.replaced_by is None:
            return _Outcome()  # still wanted: nothing to clean up
        return self._delete_row(ctx, row)

    def _delete_row(self, ctx: _Ctx, row: models.StackResource) -> _Outcome:
        """Delete the physical resource of a row this check holds, then mark
        the row DELETE COMPLETE; a physical row that changed meanwhile is
        planned again."""
        for _attempt in range(REPLAN_ATTEMPTS):
            outcome = self._delete_once(ctx, row)
            if outcome is not None:
                return outcome
            row = stacks.resource_get(self.db, row.id)
            if row is None:
                return _Outcome()
        return self._failed(row, vocab.STACK_DELETE, "its physical resources kept changing while "
                            f"its delete was planned ({REPLAN_ATTEMPTS} attempts)")

    def _delete_once(self, ctx: _Ctx, row: models.StackResource) -> _Outcome | None:
        if row.action == vocab.STACK_DELETE and row.status == vocab.STACK_COMPLETE:
            return _Outcome()
        observed = phys.observe(self.db, row.type, row.physical_id)
        if observed.state == phys.BUSY:
            return self._failed(row, vocab.STACK_DELETE, f"physical resource {row.physical_id} is "
                                f"{observed.status}: another operation is under way")
        try:
            plan = phys.plan_delete(self.db, row.type, row.physical_id) or phys.Plan()
        except phys.CheckError as exc:
            return self._failed(row, vocab.STACK_DELETE, str(exc))
        work = self._work(ctx, vocab.STACK_DELETE, {"status_reason": None}, plan)
        begun = stack_work.begin(self.db, row.id, self.engine_id, ctx.stack_id, ctx.traversal, work)
        if isinstance(begun, str):
            return _not_begun(begun, row.id)
        outcome = self._carry_out(ctx, row.name, begun, vocab.STACK_DELETE, plan, {})
        outcome.data = None  # clean-up nodes pass nothing on
        return outcome

    def _failed(self, row: models.StackResource, action: str, reason: str) -> _Outcome:
        reason = f"{row.name}: {reason}"
        self._mark_failed(row.id, reason, action)
        return _Outcome(failed=reason)

    def _mark_failed(self, rid: int, reason: str, action: str | None = None) -> None:
        try:
            row = stacks.resource_get(self.db, rid)
            if row is not None:
                stacks.resource_set_state(self.db, rid, self.engine_id,
                                          action or row.action, vocab.STACK_FAILED, reason)
        except Exception:  # the stack's failure matters more than the row's
            LOG.exception("could not mark resource %s FAILED", rid)

    # After the node ------------------------------------------------------------------------

    def _after(self, ctx: _Ctx, outcome: _Outcome) -> None:
        """Report the node's outcome; whenever that finds the traversal
        superseded, retrigger (doc/specs.rst, spec 001). Runs after the locks are released."""
        if outcome.failed is not None:
            handled = self.fail_stack(ctx.stack_id, ctx.traversal, outcome.failed)
        elif outcome.superseded or outcome.bailed or outcome.ended:
            handled = False
        else:
            handled = self._propagate(ctx, outcome.data)
        if not handled:
            self._retrigger(ctx)

    def _propagate(self, ctx: _Ctx, data: dict | None) -> bool:
        """Report to every successor's SyncPoint and, from a root, to the
        stack's (the general path, after the node's locks are released).
        False if a point is missing (a newer traversal exists)."""
        node, graph, traversal = ctx.node, ctx.graph, ctx.traversal
        if not self._report_later(ctx, [(node, data, sorted(graph.required_by(node)))]):
            return False
        if graph.is_root(node):
            def complete(session: Session, _input: dict) -> None:
                lifecycle.complete_tx(session, ctx.stack_id, traversal)

            result = sync_points.sync(self.db, ctx.stack_id, traversal, True, node.key, None,
                             graph.root_keys(), complete)
            if not result.found:
                return False
        return True

    def _report_later(self, ctx: _Ctx, work: list[tuple[Node, dict | None, list[Node]]]
                      ) -> bool:
        """Reports of ``(sender, data, successors)`` left out of a
        transaction (a wide fan-out: a sink's clean-up to its many leaves'
        clean-ups), up to ``REPORT_IN_ONE`` points per transaction in sorted
        order, as every multi-point report locks them, each with the
        clean-up nodes it made ready that have nothing to do
        (``_cascade_tx``; their further successors join ``work``, and are
        marked ``reporting`` until written). A database error (a deadlock
        with a preparation's delete) retries a batch one by one, the nodes
        it makes ready enqueued. False if a point is missing."""
        graph, traversal = ctx.graph, ctx.traversal
        marked: list[tuple[Node, dict | None, list[Node]]] = []

        def complete(session: Session, _input: dict) -> None:
            lifecycle.complete_tx(session, ctx.stack_id, traversal)

        def batch_tx(session: Session, tx: _Tx, sender: Node, data: dict | None,
                     batch: list[Node]) -> bool:
            if not (self._reports_tx(session, ctx, tx, sender, data, batch)
                    and self._cascade_tx(session, ctx, tx)):
                return False
            self._mark_reporting(ctx, tx.later)  # before the commit, as in _report
            marked.extend(tx.later)
            return True

        try:
            while work:
                sender, data, succs = work.pop(0)
                for i in range(0, len(succs), REPORT_IN_ONE):
                    batch = succs[i:i + REPORT_IN_ONE]
                    tx = _Tx(complete)
                    try:
                        if not lifecycle.in_one_transaction(
                                self.db, lambda s_, tx=tx, sender=sender, data=data,
                                batch=batch: batch_tx(s_, tx, sender, data, batch)):
                            return False
                        work.extend(tx.later)
                        continue
                    except Exception:
                        LOG.exception("node %s (traversal %s): could not report to %d points "
                                      "in one transaction; one by one", sender, traversal,
                                      len(batch))
                    for succ in batch:
                        sent, known = _sent(graph, sender, succ, data)
                        result = sync_points.sync(
                            self.db, succ.resource_id, traversal, succ.is_update, sender.key,
                            sent, graph.requires_keys(succ),
                            lambda s_, input_data, succ=succ: prepare.enqueue_check_tx(
                                s_, ctx.stack_id, traversal, succ, input_data), known=known)
                        if not result.found:
                            return False
            return True
        finally:
            self._mark_reporting(ctx, marked, add=False)

    def _retrigger(self, ctx: _Ctx) -> None:
        """Spec 001: a check that held a lock and finds its traversal
        superseded retriggers the rows' nodes in the newest traversal when
        they are ready (a check of theirs may have bailed on our lock). While
        the traversal is current nothing is needed: a check that bailed on a
        live lock in it was a duplicate, one that bailed on a dead engine's
        lock is the watchdog's (``watchdog.py``)."""
        stack = stack_work.stack_head(self.db, ctx.stack_id)
        if stack is None or stack.current_traversal == ctx.traversal:
            return
        for rid in dict.fromkeys(ctx.held):
            if lifecycle.retrigger(self.db, ctx.stack_id, rid):
                LOG.info("stack %s: retriggered resource %s in traversal %s",
                         ctx.stack_name, rid, stack.current_traversal)

    # Failure -----------------------------------------------------------------------------------

    def fail_stack(self, stack_id: str, traversal: str, reason: str) -> bool:
        """A node failed: the traversal FAILED (rolling back unless disabled,
        see ``lifecycle.fail``). False if it is no longer current."""
        return lifecycle.fail(self.db, stack_id, traversal, reason, node=True)


def _sent(graph: Graph, sender: Node, succ: Node, data: dict | None
          ) -> tuple[dict | None, dict | None]:
    """What ``sender`` writes into ``succ``'s point, and what that point
    holds before, when the graph's order tells (``sync_tx``'s ``known``: a
    write without a read). A clean-up node reads nothing of its input: its
    point gets None from every sender, so what it holds before is the keys
    of the senders surely before this one (a chain's row: its update's,
    before its dependent's clean-up)."""
    if succ.is_update:
        return data, None
    before = graph.reported_before(sender, succ)
    return None, None if before is None else dict.fromkeys(map(node_key, before))


def _cleanups_ahead(graph: Graph, start: list[Node], limit: int) -> list[int]:
    """The rows of up to ``limit`` clean-up nodes of rows the traversal
    keeps: those of ``start`` and the clean-up nodes after them, breadth
    first (clean-ups follow only clean-ups), looking at no more than
    ``4 * limit`` nodes."""
    out: list[int] = []
    queue = [n for n in start if not n.is_update]
    seen = set(queue)
    while queue and len(out) < limit and len(seen) <= 4 * limit:
        node = queue.pop(0)
        if (node.resource_id, True) in graph:
            out.append(node.resource_id)
        for succ in sorted(graph.required_by(node)):
            if succ not in seen and not succ.is_update:
                seen.add(succ)
                queue.append(succ)
    return out


def _not_begun(why: str, rid: int) -> _Outcome | None:
    """What a node does when ``ws.begin`` started nothing; None: plan again."""
    if why == stack_work.CONFLICT:
        return None
    if why == stack_work.LOCK_LOST:
        return _Outcome(bailed=f"resource {rid}: its lock was taken by another engine")
    return _Outcome(superseded=True)


def _nominal(row: models.StackResource) -> str:
    """The action an update node performs on ``row``, for its FAILED state."""
    if row.action == vocab.STACK_INIT or \
            (row.action == vocab.STACK_CREATE and row.status != vocab.STACK_COMPLETE):
        return vocab.STACK_CREATE
    return vocab.STACK_UPDATE
