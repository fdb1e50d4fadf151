"""A node's third step: its report to its successors and the stack (doc/specs.rst,
spec 001, steps 4-5; doc/design.rst, "A node in three steps").

A node that did its work merges its data into each successor's SyncPoint;
the write that completes a point enqueues the successor in its transaction;
a root reports to the stack's point, whose completion marks the stack
COMPLETE and purges. Whoever held a lock checks afterwards whether its
traversal is still current: if not, it retriggers the row's node in the
newest traversal when that node is ready. A node that failed marks the stack
FAILED with the reason — or starts the rollback in the same transaction — so
a failure can never leave the stack waiting for a node that will not report.

Two ways in: :meth:`Reporter.end_and_report`, the check's end, its row's
end, its locks' release and its first ``REPORT_IN_ONE`` reports in one
transaction (claiming a successor to run next in this thread); and
:meth:`Reporter.after`, for a check whose locks were released already.
Both leave further reports to :meth:`Reporter._report_later`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import lifecycle, prepare
from sharemgr.convergence.graph import Node
from sharemgr.convergence.node_check import (
    RECORDED,
    Claimed,
    Ctx,
    End,
    NodeEnd,
    Outcome,
    Result,
    ended,
)
from sharemgr.convergence.row_locks import RowLocks
from sharemgr.db import models, request_queue, resource_locks, stack_work, sync_points
from sharemgr.db.engine import Database
from sharemgr.db.retry import is_conflict
from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)

# Successors a node reports to in the transaction that ends it (in sorted
# order: SyncPoints are locked in one order); the rest, one transaction each.
REPORT_IN_ONE = 8
# Clean-up nodes with nothing to do that one transaction reports for as it
# makes them ready (``Reporter._cascade_tx``), instead of writing their checks:
# bounded so that a long chain's clean-up does not become one long transaction.
INLINE_LIMIT = 64

# (sender, data, successors) left to report
Work = list[tuple[Node, dict[str, JSONValue] | None, list[Node]]]


@dataclass
class _Tx:
    """What one reporting transaction does with the nodes its writes make
    ready (``Reporter._ready_tx``)."""

    complete: Callable[[Session], None]  # the stack's point made ready: end the traversal
    own: bool = False  # the transaction that ends the check's node (``end_and_report``)
    end: End | None = None  # the row's end that transaction writes (a fast path's)
    claim: bool = False  # claim the first node that needs a check, to run next here
    queue: list[Node] = field(default_factory=list)  # clean-ups with nothing to do: reported in it
    inlined: int = 0  # how many joined the queue
    later: Work = field(default_factory=list)
    roots: list[Node] = field(default_factory=list)  # reported to the stack's point at the end
    # claimed: request, args, node
    pending: list[tuple[int, models.RequestArgs, Node]] = field(default_factory=list)
    batch: list[Node] = field(default_factory=list)  # the successors being reported to
    free: dict[int, bool] = field(default_factory=dict)  # rows read free and current, or not


class _RowTaken(Exception):
    """A node's end found its row's lock another engine's."""

    def __init__(self, rid: int) -> None:
        super().__init__(f"resource {rid}")
        self.rid = rid


class Reporter:
    def __init__(self, db: Database, engine_id: str, locks: RowLocks) -> None:
        self.db = db
        self.engine_id = engine_id
        self.locks = locks
        self.tracker = locks.tracker
        # Whether a check may take the next pending check as it reports
        # (``_take_tx``): the daemon's request loop says (claiming, a member).
        self.take_next: Callable[[], bool] = lambda: False
        # Whether it may claim a successor it makes ready, to run next in
        # its thread: not while its engine stops or is out of the group
        # (the request loop's ``may_claim`` too), or its peers would
        # abandon that request and run the node again.
        self.may_chain: Callable[[], bool] = lambda: True

    def _take_tx(self, session: Session, tx: _Tx) -> None:
        """No successor to run next: take the oldest pending check (this
        traversal's next leaf, mostly) in this transaction, to run next in
        this thread, as the request loop would have claimed it for the
        thread once free — without a transaction of its own."""
        taken = request_queue.take_check_tx(session, self.engine_id)
        if taken is None:
            return
        self.tracker.running(taken.id)
        args: models.RequestArgs = taken.args or {}
        rid = args.get("resource_id")
        # A malformed request (a bug) is read no further here: its check
        # fails as the request loop's would, and its end is recorded.
        tx.pending.append((taken.id, args, Node(rid if isinstance(rid, int) else 0,
                                                bool(args.get("is_update")))))

    def _mark(self, ctx: Ctx, work: Work, add: bool = True) -> None:
        self.tracker.mark_reporting(ctx.stack_id, ctx.traversal, work, add)

    def end_and_report(self, ctx: Ctx, outcome: Outcome, end: End | None = None
                       ) -> NodeEnd:
        """End the node in one transaction: report to its successors'
        SyncPoints (up to ``REPORT_IN_ONE`` of them, in sorted order; from a
        root, to the stack's) — the points first, for the lock order —, end
        the row's action (``end``, a fast path's) and release its locks, and record the
        check's own request. A successor made ready is enqueued in it, or
        (the first) claimed by this engine to run next in this thread (its
        request row, ``running`` for us, is the durable trigger); a clean-up
        node made ready that has nothing to do is reported for in it
        (``_cascade_tx``). Further successors are reported to afterwards
        (``_report_later``). On a database error the pieces are written one
        by one, as ``after`` does. Its end: RECORDED (the check's request
        done in the transaction) with the claimed successor, if any; DONE
        when written step by step; STALE when the row was taken over."""
        node, graph = ctx.node, ctx.graph
        targets = sorted(graph.required_by(node))
        claimed: list[Claimed] = []
        written = marked = False

        def own_writes(session: Session) -> None:
            nonlocal written
            if written:
                return
            written = True
            ended_rid = None if end is None else end[0]
            op_id = None if end is None else end[3]
            # The operation's request and the check's own, done in one UPDATE;
            # requests before the row, as a lone end writes them.
            stack_work.finish_requests_tx(session, (ctx.req_id, *(() if op_id is None
                                                                 else (op_id,))),
                                          self.engine_id, vocab.REQUEST_DONE)
            if end is not None:
                rid, action, values, _op, key = end
                if not stack_work.end_tx(session, rid, self.engine_id, action,
                                         vocab.STACK_COMPLETE, None, values,
                                         release=rid in ctx.held, key=key):
                    raise _RowTaken(rid)  # nothing of this transaction may commit
            for rid in dict.fromkeys(ctx.held):
                if rid != ended_rid:  # released as it ended
                    resource_locks.resource_lock_release_tx(session, rid, self.engine_id)

        def complete(session: Session) -> None:
            over = lifecycle.end_tx(session, ctx.stack_id, ctx.traversal)
            own_writes(session)
            lifecycle.purge_tx(session, over)

        tx = _Tx(complete, own=True, end=end, claim=ctx.chain > 0 and self.may_chain())
        if targets[REPORT_IN_ONE:]:
            tx.later.append((node, outcome.data, targets[REPORT_IN_ONE:]))

        def report(session: Session) -> bool:
            nonlocal marked
            found = self._reports_tx(session, ctx, tx, node, outcome.data,
                                     targets[:REPORT_IN_ONE]) \
                and self._cascade_tx(session, ctx, tx)
            own_writes(session)
            if tx.claim and not tx.pending and self.take_next():
                self._take_tx(session, tx)
            for req_id, args, succ in tx.pending:
                # Its head is read last, after this check's own writes, so it sees them.
                claimed.append(Claimed(req_id, args, stack_work.check_head_tx(
                    session, str(args.get("stack_id") or ""), succ.resource_id)))
            # Before the commit: from it on, these senders have reports left.
            self._mark(ctx, tx.later)
            marked = True
            return found

        try:
            found = lifecycle.in_one_transaction(self.db, report)
        except _RowTaken as taken:
            return self._row_taken(ctx, tx, end, taken.rid)
        except Exception as exc:
            _split(exc, f"node {node} (traversal {ctx.traversal}): its report")
            if marked:  # the commit failed
                self._mark(ctx, tx.later, add=False)
            self.tracker.finished(*(req_id for req_id, _args, _succ in tx.pending))
            moved = None  # the row whose lock moved on: not ours to release
            try:
                if end is not None:
                    rid, action, values, op_id, key = end
                    won = stack_work.end(self.db, rid, self.engine_id, action,
                                         vocab.STACK_COMPLETE, None, values,
                                         op_request_id=op_id, key=key)
                    moved = rid if not won and key is not None else None
                    outcome = ended(won, f"node {node} (resource {rid})", outcome)
            finally:
                # Also when the end fails (the database still away): a lock
                # the engine believes a check of its own holds is never taken
                # over, and every later check of the node bails on it. Let go
                # of, it is a leaked lock the next check takes over.
                self.locks.let_go(ctx.held, moved)
            self.after(ctx, outcome)
            return None, Outcome.done()
        for rid in ctx.held:
            self.tracker.unclaim(rid)
        later = list(tx.later)
        try:
            if not (found and self._report_later(ctx, tx.later)):
                self.retrigger(ctx)
        except BaseException:
            # The claimed successor will not run here: left to the watchdog,
            # which abandons a request of ours that no check runs and
            # retriggers its node.
            self.tracker.finished(*(c.req_id for c in claimed))
            raise
        finally:
            self._mark(ctx, later, add=False)
        return (claimed[0] if claimed else None), RECORDED

    def _row_taken(self, ctx: Ctx, tx: _Tx, end: End | None, rid: int) -> NodeEnd:
        """The row's end found its lock another engine's (its watchdog judged
        this engine dead while the driver worked): the report was rolled
        back, so the node bails as the general path's does (``node_check.ended``).
        Its driver call succeeded: its request is done; the row is the new
        holder's to end."""
        name = f"node {ctx.node} (traversal {ctx.traversal}, resource {rid})"
        self.tracker.finished(*(req_id for req_id, _args, _succ in tx.pending))
        try:
            if end is not None and end[3] is not None:
                stack_work.finish_request(self.db, end[3], self.engine_id, vocab.REQUEST_DONE)
        finally:
            # Its lock moved on when the key did, maybe back to this engine
            # for another check: that one's, not released.
            self.locks.let_go(ctx.held, end[0] if end is not None and end[4] is not None
                              else None)
        # Not won: node_check's one bail for a taken row (logged there).
        outcome = ended(False, name, Outcome.bailed(name))
        self.after(ctx, outcome)
        return None, Outcome.stale(outcome.reason or name)

    def after(self, ctx: Ctx, outcome: Outcome) -> None:
        """Report the node's outcome once its locks are released; whenever
        that finds the traversal superseded, retrigger (doc/specs.rst, spec
        001)."""
        if outcome.result is Result.FAILED:
            handled = self.fail_stack(ctx.stack_id, ctx.traversal, outcome.reason or "")
        elif outcome.result is Result.DONE:
            handled = self._propagate(ctx, outcome.data)
        else:
            handled = False
        if not handled:
            self.retrigger(ctx)

    def fail_stack(self, stack_id: str, traversal: str, reason: str) -> bool:
        """A node failed: the traversal FAILED (rolling back unless disabled,
        see ``lifecycle.fail``). False if it is no longer current."""
        return lifecycle.fail(self.db, stack_id, traversal, reason, node=True)

    def retrigger(self, ctx: Ctx) -> None:
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

    # In one transaction --------------------------------------------------------------

    def _reports_tx(self, session: Session, ctx: Ctx, tx: _Tx, sender: Node,
                    data: dict[str, JSONValue] | None, succs: list[Node]) -> bool:
        """``sender``'s report to ``succs`` (its successors, sorted: every
        multi-point report locks them in that order) in the caller's
        transaction, or, with none, from a root to the stack's point (left
        to the end of the transaction, ``_cascade_tx``). False if a point is
        gone: the traversal is over."""
        graph, traversal = ctx.graph, ctx.traversal
        tx.batch = succs
        for succ in succs:
            sent, known = graph.sent(sender, succ, data)
            result = sync_points.sync_tx(session, succ.resource_id, traversal, succ.is_update,
                                         sender.key, sent, graph.requires_keys(succ), known)
            if not result.found:
                return False
            if result.fired:
                self._ready_tx(ctx, tx, succ, session, result.input_data)
        if not succs and graph.is_root(sender):
            tx.roots.append(sender)  # written last, together (``_cascade_tx``)
        return True

    def _ready_tx(self, ctx: Ctx, tx: _Tx, succ: Node, session: Session,
                  input_data: dict[str, JSONValue]) -> None:
        """``succ`` was made ready in ``tx``: a clean-up with nothing to do
        joins its queue, to be reported for in it; else its check request is
        written, claimed by this engine to run next in this thread (the
        first, in ``end_and_report``) or pending for any engine."""
        if self._noop_cleanup_tx(session, ctx, tx, succ):
            tx.queue.append(succ)
        elif tx.claim and not tx.pending:
            args = prepare.check_request_args(ctx.stack_id, ctx.traversal, succ, input_data)
            req_id = stack_work.running_check_tx(session, self.engine_id, succ.resource_id, args)
            self.tracker.running(req_id)
            tx.pending.append((req_id, args, succ))
        else:
            prepare.enqueue_check_tx(session, ctx.stack_id, ctx.traversal, succ, input_data)

    def _noop_cleanup_tx(self, session: Session, ctx: Ctx, tx: _Tx, succ: Node) -> bool:
        """Whether ``succ``, made ready in ``tx``, is a clean-up node with
        nothing to do, whose report ``tx`` can write itself: the clean-up of
        a row the traversal still wants (its update node, which comes first,
        has reported), which nobody holds and nothing replaced — what its
        own check would read before it only reports (the worker's first
        fast path); no request is written for it, and no crash can cut it
        in half. The traversal is current and in progress: ``succ``'s
        point, just written under its lock, exists (a traversal's points
        are deleted when it is superseded, completes or fails, before its
        stack row is written), which is all that check would read of the
        stack. Up to ``INLINE_LIMIT`` per transaction."""
        if succ.is_update or (succ.resource_id, True) not in ctx.graph \
                or tx.inlined >= INLINE_LIMIT:
            return False
        if (tx.own and _inline(ctx, tx.end, succ)) or self._free_tx(session, ctx, tx, succ):
            tx.inlined += 1
            return True
        return False

    def _free_tx(self, session: Session, ctx: Ctx, tx: _Tx, succ: Node) -> bool:
        """Whether ``succ``'s row is free and current, read in ``tx`` with
        those of the clean-up nodes it may make ready next (the rest of the
        batch, then those after ``succ``): one read for a chain's run of
        clean-ups, or for a batch of a fan-out's. A row read earlier in the
        transaction is as good as one read now: every report of ``tx`` is
        written before its commit, whichever comes first."""
        rid = succ.resource_id
        if rid not in tx.free:
            ahead = ctx.graph.cleanups_ahead([*tx.batch, succ], INLINE_LIMIT - tx.inlined)
            asked = [rid, *(r for r in ahead if r != rid and r not in tx.free)]
            free = stack_work.free_and_current_tx(session, asked)
            tx.free.update((r, r in free) for r in asked)
        return tx.free[rid]

    def _cascade_tx(self, session: Session, ctx: Ctx, tx: _Tx) -> bool:
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
        # The stack's points, last of all: the reports of every root this
        # transaction ended (a fan-in's leaves, a batch of eight), each to
        # its own point, then the count on the stack's.
        result = sync_points.report_roots_tx(
            session, ctx.stack_id, ctx.traversal, [r.key for r in tx.roots],
            len(ctx.graph.root_keys()))
        if result.fired:
            tx.complete(session)
        return result.found

    # After the transaction -----------------------------------------------------------

    def _propagate(self, ctx: Ctx, data: dict[str, JSONValue] | None) -> bool:
        """Report to every successor's SyncPoint and, from a root, to the
        stack's (after the node's locks are released). False if a point is
        missing (a newer traversal exists)."""
        node, graph, traversal = ctx.node, ctx.graph, ctx.traversal
        if not self._report_later(ctx, [(node, data, sorted(graph.required_by(node)))]):
            return False
        if graph.is_root(node):
            with self.db.session() as session:  # no CAS to lose: a count
                result = sync_points.report_roots_tx(session, ctx.stack_id, traversal,
                                                     [node.key], len(graph.root_keys()))
                if result.fired:
                    lifecycle.complete_tx(session, ctx.stack_id, traversal)
            return result.found
        return True

    def _report_later(self, ctx: Ctx, work: Work) -> bool:
        """Reports of ``(sender, data, successors)`` left out of a
        transaction (a wide fan-out: a sink's clean-up to its many leaves'
        clean-ups), up to ``REPORT_IN_ONE`` points per transaction in sorted
        order, as every multi-point report locks them, each with the
        clean-up nodes it made ready that have nothing to do
        (``_cascade_tx``; their further successors join ``work``, and are
        marked ``reporting`` until written). A database error (a deadlock
        with a preparation's delete) retries a batch one by one, the nodes
        it makes ready enqueued. False if a point is missing."""
        traversal = ctx.traversal
        marked: Work = []

        def complete(session: Session) -> None:
            lifecycle.complete_tx(session, ctx.stack_id, traversal)

        def batch_tx(tx: _Tx, sender: Node, data: dict[str, JSONValue] | None, batch: list[Node],
                     session: Session) -> bool:
            if not (self._reports_tx(session, ctx, tx, sender, data, batch)
                    and self._cascade_tx(session, ctx, tx)):
                return False
            self._mark(ctx, tx.later)  # before the commit, as in end_and_report
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
                                self.db, functools.partial(batch_tx, tx, sender, data, batch)):
                            return False
                        work.extend(tx.later)
                        continue
                    except Exception as exc:
                        _split(exc, f"node {sender} (traversal {traversal}): its report to "
                               f"{len(batch)} points")
                    for succ in batch:
                        if not self._report_alone(ctx, sender, data, succ):
                            return False
            return True
        finally:
            self._mark(ctx, marked, add=False)


    def _report_alone(self, ctx: Ctx, sender: Node, data: dict[str, JSONValue] | None,
                      succ: Node) -> bool:
        """``sender``'s report to ``succ`` in a transaction of its own,
        retried on a lost CAS; a ``succ`` it makes ready is enqueued in it.
        False if the point is missing."""
        sent, known = ctx.graph.sent(sender, succ, data)
        for attempt in sync_points.retrying():
            with attempt, self.db.session() as session:
                result = sync_points.sync_tx(
                    session, succ.resource_id, ctx.traversal, succ.is_update, sender.key, sent,
                    ctx.graph.requires_keys(succ), known, attempt.lock, attempt.first)
                if result.fired:
                    prepare.enqueue_check_tx(session, ctx.stack_id, ctx.traversal, succ,
                                             result.input_data)
        return result.found


def _inline(ctx: Ctx, end: End | None, succ: Node) -> bool:
    """Whether ``succ`` is the clean-up node of the row ``ctx`` just
    created, in the transaction that ends it: a row still wanted, which
    this check held from start to end (so nobody replaced it), has nothing
    to clean up; its lock, ours, is released in that same transaction."""
    return (end is not None and ctx.node.is_update
            and succ == Node(ctx.node.resource_id, False)
            and end[0] == ctx.node.resource_id and ctx.node.resource_id in ctx.held)


def _split(exc: Exception, what: str) -> None:
    """A transaction of reports failed; they are written again in smaller
    ones, which do the same work. A conflict (the database chose it as a
    deadlock's victim: a stack's points purged while its nodes report) is
    expected under contention: one line. Anything else, with its traceback."""
    if is_conflict(exc):
        LOG.warning("%s lost a conflict (%s); writing it step by step", what,
                    (str(exc).strip().splitlines() or [""])[0])
    else:
        LOG.error("%s failed; writing it step by step", what, exc_info=exc)
