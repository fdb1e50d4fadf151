"""A node's reports to its successors' SyncPoints inside one transaction
(``convergence/report.py`` opens it): the points written in sorted order,
the successors they make ready enqueued, claimed or — clean-ups with
nothing to do — reported for in it, the roots' reports to the stack's point
last of all, and the next pending checks taken."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import prepare
from sharemgr.convergence.graph import Node
from sharemgr.convergence.node_check import Claimed, Ctx, End, Ending
from sharemgr.convergence.tracking import Tracker
from sharemgr.db import first_reports, models, request_queue, stack_work, sync_points
from sqlalchemy.orm import Session

__all__ = ["INLINE_LIMIT", "REPORT_IN_ONE", "Points", "Tx", "Work"]

# Successors a node reports to in the transaction that ends it (in sorted
# order: SyncPoints are locked in one order); the rest, one transaction each.
REPORT_IN_ONE = 8
# Clean-up nodes with nothing to do that one transaction reports for as it
# makes them ready (``Points.cascade_tx``), instead of writing their checks:
# bounded so that a long chain's clean-up does not become one long transaction.
INLINE_LIMIT = 64

# (sender, data, successors) left to report
Work = list[tuple[Node, dict[str, JSONValue] | None, list[Node]]]


@dataclass
class Tx:
    """What one reporting transaction does with the nodes its writes make
    ready (``Points.ready_tx``)."""

    complete: Callable[[Session], None]  # the stack's point made ready: end the traversal
    own: bool = False  # the transaction that ends the check's node (``Reporter.end_many``)
    end: End | None = None  # the row's end that transaction writes (a fast path's)
    claim: bool = False  # claim the first node that needs a check, to run next here
    queue: list[Node] = field(default_factory=list)  # clean-ups with nothing to do: reported in it
    inlined: int = 0  # how many joined the queue
    later: Work = field(default_factory=list)
    roots: list[Node] = field(default_factory=list)  # reported to the stack's point at the end
    # claimed: request, args, node
    pending: list[tuple[int, models.RequestArgs, Node]] = field(default_factory=list)
    batch: list[Node] = field(default_factory=list)  # the successors being reported to
    # Points whose first report the batch wrote together (what it made of
    # them), or found written or gone (None: read them): ``Points.first_reports_tx``.
    firsts: dict[Node, sync_points.SyncResult | None] = field(default_factory=dict)
    free: dict[int, bool] = field(default_factory=dict)  # rows read free and current, or not


class Points:
    """The in-transaction part of a report, for one engine."""

    def __init__(self, engine_id: str, tracker: Tracker) -> None:
        self.engine_id = engine_id
        self.tracker = tracker

    def take_tx(self, session: Session, tx: Tx, take: int) -> None:
        """No successor to run next: take the oldest pending checks (this
        traversal's next leaves, mostly), up to ``take``, in this
        transaction, to run next in this thread, as the request loop would
        have claimed them for the thread once free — without a transaction
        of its own."""
        for taken in request_queue.take_checks_tx(session, self.engine_id, take):
            self.tracker.running(taken.id)
            args: models.RequestArgs = taken.args or {}
            rid = args.get("resource_id")
            # A malformed request (a bug) is read no further here: its check
            # fails as the request loop's would, and its end is recorded.
            tx.pending.append((taken.id, args, Node(rid if isinstance(rid, int) else 0,
                                                    bool(args.get("is_update")))))

    def endings_tx(self, session: Session, endings: Sequence[Ending], tx: Tx,
                   laters: list[Work]) -> tuple[bool, bool]:
        """Each ending's reports to its first ``REPORT_IN_ONE`` successors
        (the rest left in its entry of ``laters``) and for the clean-ups
        they make ready, then, from every root among them, the stack's
        point once. Whether every point was there (if not, the traversal is
        over: the reports after the missing one are not written), and
        whether the stack's point was made ready (the caller ends the
        traversal)."""
        found = True
        self.first_reports_tx(session, endings, tx)
        for e, later in zip(endings, laters, strict=True):
            node, data = e.ctx.node, e.outcome.data
            targets = sorted(e.ctx.graph.required_by(node))
            tx.end, tx.later = e.end, later
            if targets[REPORT_IN_ONE:]:
                later.append((node, data, targets[REPORT_IN_ONE:]))
            found = found and self.reports_tx(session, e.ctx, tx, node, data,
                                              targets[:REPORT_IN_ONE]) \
                and self.cascade_tx(session, e.ctx, tx, roots=False)
        if not found:
            return False, False
        return self.roots_tx(session, endings[0].ctx, tx)

    def first_reports_tx(self, session: Session, endings: Sequence[Ending], tx: Tx) -> None:
        """The endings' reports to points that wait for their sender alone
        (a row's clean-up, for its update), written together, before the
        rest (``db/first_reports.py``); ``reports_tx`` reads what won."""
        wanted: dict[Node, dict[str, JSONValue]] = {}
        for e in endings:
            node, graph = e.ctx.node, e.ctx.graph
            for succ in sorted(graph.required_by(node))[:REPORT_IN_ONE]:
                sent, known = graph.sent(node, succ, e.outcome.data)
                if not known and {node.key} == graph.requires_keys(succ):
                    wanted[succ] = {node.key: sent}
        written = first_reports.first_reports_tx(session, endings[0].ctx.traversal, [
            (s.resource_id, s.is_update, data) for s, data in wanted.items()]) \
            if len(wanted) > 1 else None
        if written is not None:  # each waits for its one sender: ready once written
            tx.firsts = {s: sync_points.merged({}, data, data)
                         if (str(s.resource_id), s.is_update) in written else None
                         for s, data in wanted.items()}

    def claimed_tx(self, session: Session, tx: Tx, take: int) -> list[Claimed]:
        """The checks ``tx`` claimed to run next in this thread: a successor
        it made ready, else up to ``take`` pending ones taken now; their
        heads are read last, after the transaction's own writes, so they
        see them."""
        if take and not tx.pending:
            self.take_tx(session, tx, take)
        wanted = [(str(args.get("stack_id") or ""), succ.resource_id)
                  for _req, args, succ in tx.pending]
        # One head (a chain's successor) by its own cached statement.
        heads = [stack_work.check_head_tx(session, *wanted[0])] if len(wanted) == 1 \
            else stack_work.check_heads_tx(session, wanted)
        return [Claimed(req_id, args, head)
                for (req_id, args, _succ), head in zip(tx.pending, heads, strict=True)]

    def reports_tx(self, session: Session, ctx: Ctx, tx: Tx, sender: Node,
                   data: dict[str, JSONValue] | None, succs: list[Node]) -> bool:
        """``sender``'s report to ``succs`` (its successors, sorted: every
        multi-point report locks them in that order) in the caller's
        transaction, or, with none, from a root to the stack's point (left
        to the end of the transaction, ``cascade_tx``). False if a point is
        gone: the traversal is over."""
        graph, traversal = ctx.graph, ctx.traversal
        tx.batch = succs
        for succ in succs:
            tried = succ in tx.firsts
            result = tx.firsts.pop(succ, None)
            if result is None:
                sent, known = graph.sent(sender, succ, data)
                result = sync_points.sync_tx(
                    session, succ.resource_id, traversal, succ.is_update, sender.key, sent,
                    graph.requires_keys(succ), known, blind=not tried)
            if not result.found:
                return False
            if result.fired:
                self.ready_tx(ctx, tx, succ, session, result.input_data)
        if not succs and graph.is_root(sender):
            tx.roots.append(sender)  # written last, together (``cascade_tx``)
        return True

    def ready_tx(self, ctx: Ctx, tx: Tx, succ: Node, session: Session,
                 input_data: dict[str, JSONValue]) -> None:
        """``succ`` was made ready in ``tx``: a clean-up with nothing to do
        joins its queue, to be reported for in it; else its check request is
        written, claimed by this engine to run next in this thread (the
        first, in ``Reporter.end_many``) or pending for any engine."""
        if self.noop_cleanup_tx(session, ctx, tx, succ):
            tx.queue.append(succ)
        elif tx.claim and not tx.pending:
            args = prepare.check_request_args(ctx.stack_id, ctx.traversal, succ, input_data)
            req_id = stack_work.running_check_tx(session, self.engine_id, succ.resource_id, args)
            self.tracker.running(req_id)
            tx.pending.append((req_id, args, succ))
        else:
            prepare.enqueue_check_tx(session, ctx.stack_id, ctx.traversal, succ, input_data)

    def noop_cleanup_tx(self, session: Session, ctx: Ctx, tx: Tx, succ: Node) -> bool:
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
        if (tx.own and inline(ctx, tx.end, succ)) or self.free_tx(session, ctx, tx, succ):
            tx.inlined += 1
            return True
        return False

    def free_tx(self, session: Session, ctx: Ctx, tx: Tx, succ: Node) -> bool:
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

    def cascade_tx(self, session: Session, ctx: Ctx, tx: Tx, roots: bool = True) -> bool:
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
        False if a point is gone. ``roots=False``: the stack's point is left
        to the caller (``roots_tx``, once for several nodes' reports)."""
        while tx.queue:
            node = tx.queue.pop(0)
            succs = sorted(ctx.graph.required_by(node))
            if succs[1:]:
                tx.later.append((node, None, succs[1:]))
            if not self.reports_tx(session, ctx, tx, node, None, succs[:1]):
                return False
        if not roots:
            return True
        found, fired = self.roots_tx(session, ctx, tx)
        if fired:
            tx.complete(session)
        return found

    def roots_tx(self, session: Session, ctx: Ctx, tx: Tx) -> tuple[bool, bool]:
        """The stack's points, last of all: the reports of every root this
        transaction ended (a fan-in's leaves, a batch of eight, the nodes of
        ``end_many``), each to its own point, then the count on the stack's.
        Whether every point was there, and whether the count made the
        stack's point ready (the caller ends the traversal)."""
        if not tx.roots:
            return True, False
        result = sync_points.report_roots_tx(
            session, ctx.stack_id, ctx.traversal, [r.key for r in tx.roots],
            len(ctx.graph.root_keys()))
        tx.roots = []
        return result.found, result.fired


def inline(ctx: Ctx, end: End | None, succ: Node) -> bool:
    """Whether ``succ`` is the clean-up node of the row ``ctx`` just
    created, in the transaction that ends it: a row still wanted, which
    this check held from start to end (so nobody replaced it), has nothing
    to clean up; its lock, ours, is released in that same transaction."""
    return (end is not None and ctx.node.is_update
            and succ == Node(ctx.node.resource_id, False)
            and end.rid == ctx.node.resource_id and ctx.node.resource_id in ctx.held)
