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

Two ways in: :meth:`Reporter.end_many`, for nodes of one traversal whose
checks end in one transaction (a thread's ``Run`` gathers the ends of its
fast paths' nodes, a batch of them paced by ``Pace``): their ends, their
rows' ends, their locks' release and their first ``REPORT_IN_ONE`` reports
each (``points.py``), claiming what runs next in this thread; and
:meth:`Reporter.after`, for a check whose locks were released already.
Both leave further reports to :meth:`Reporter._report_later`.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import ends_apart, lifecycle, prepare
from sharemgr.convergence.graph import Node
from sharemgr.convergence.node_check import (
    RECORDED,
    Claimed,
    Ctx,
    Ending,
    NodeEnd,
    Outcome,
    Result,
    cut_short,
)
from sharemgr.convergence.points import REPORT_IN_ONE, Points, Tx, Work
from sharemgr.convergence.row_locks import RowLocks
from sharemgr.db import resource_locks, stack_events, stack_work, sync_points
from sharemgr.db.engine import Database
from sharemgr.manager import late_outcome
from sharemgr.manager.operations import Operations
from sharemgr.manager.outage import is_outage
from sharemgr.manager.runner import unexpected
from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)

# At most this many nodes' ends are written by one report (``Run``), and
# the first of them waits at most this long for the others; a batch is as
# many nodes as this engine runs in that time (``Pace``).
BATCH = 16
BATCH_SECONDS = 0.25


class _RowTaken(Exception):
    """A node's end found its row's lock another engine's."""

    def __init__(self, rid: int) -> None:
        super().__init__(f"resource {rid}")
        self.rid = rid


class Reporter:
    def __init__(self, db: Database, engine_id: str, locks: RowLocks,
                 operations: Operations) -> None:
        self.db = db
        self.operations = operations  # whose successes the report writes (late_outcome.py)
        self.engine_id = engine_id
        self.locks = locks
        self.tracker = locks.tracker
        # Whether a check may take the next pending check as it reports
        # (``Points.take_tx``): the daemon's request loop says (claiming, a member).
        self.take_next: Callable[[], bool] = lambda: False
        # Whether it may claim a successor it makes ready, to run next in
        # its thread: not while its engine stops or is out of the group
        # (the request loop's ``may_claim`` too), or its peers would
        # abandon that request and run the node again.
        self.may_chain: Callable[[], bool] = lambda: True
        self.points = Points(engine_id, self.tracker)

    def _mark(self, ctx: Ctx, work: Work, add: bool = True) -> None:
        self.tracker.mark_reporting(ctx.stack_id, ctx.traversal, work, add)

    def end_many(self, endings: Sequence[Ending], take: int
                 ) -> tuple[list[Outcome[object]], tuple[Claimed, ...]]:
        """End nodes of one traversal in one transaction: report each to
        its successors' SyncPoints (up to ``REPORT_IN_ONE`` of them, in
        sorted order) — the points first, for the lock order —, then, from
        the roots among them, to the stack's point in one count; end the
        rows' actions (a fast path's ``end``) and release their locks, and
        record the checks' own requests. A successor made ready is
        enqueued in it, or (the first) claimed by this engine to run next in
        this thread (its request row, ``running`` for us, is the durable
        trigger); with none, up to ``take`` pending checks are taken to run
        next. A clean-up node made ready that has nothing to do is reported
        for in it (``Points.cascade_tx``). Further successors are reported to
        afterwards (``_report_later``). Each ending's outcome: RECORDED (its
        request done in the transaction). When the transaction fails,
        nothing of it is written: several endings are then written one by
        one; one is written piece by piece, as ``after`` does (DONE), or,
        when its row was taken over, bails (STALE)."""
        try:
            found, laters, claimed = self._end_tx(endings, take)
        except Exception as exc:
            if len(endings) > 1:
                what = f"{len(endings)} nodes (traversal {endings[0].ctx.traversal})"
                if isinstance(exc, _RowTaken):
                    LOG.info("%s: the row of one was taken over; each ends alone", what)
                else:
                    ends_apart.split(exc, f"{what}: their ends and reports")
                return [self._alone(e) for e in endings], ()
            if isinstance(exc, _RowTaken):
                return [ends_apart.row_taken(self, endings[0], exc.rid)], ()
            return [ends_apart.apart(self, endings[0], exc)], ()
        self._after_commit(endings, found, laters, claimed)
        return [RECORDED] * len(endings), claimed

    def _end_tx(self, endings: Sequence[Ending], take: int
                ) -> tuple[bool, list[Work], tuple[Claimed, ...]]:
        """``end_many``'s transaction: whether every point it wrote to was
        there, each ending's reports left for later, the checks claimed.
        Raises with nothing written (``_RowTaken``: a row's lock moved)."""
        first = endings[0].ctx
        lates = [e.end.late for e in endings if e.end is not None and e.end.late is not None]
        claimed: list[Claimed] = []
        laters: list[Work] = [[] for _ in endings]
        written = marked = False

        def own_writes(session: Session) -> None:
            nonlocal written
            if written:
                return
            written = True
            # The operations' successes first, as their own outcomes would be.
            if lates and not late_outcome.write_tx(session, [late.changes for late in lates]):
                raise ends_apart.OutcomeLost(f"one of {len(lates)} operations' rows was taken "
                                             "over while its driver worked")
            # The operations' requests and the checks' own, done in one UPDATE;
            # requests before the rows, as a lone end writes them.
            stack_work.finish_requests_tx(session, [
                *(e.ctx.req_id for e in endings),
                *(e.end.op_request_id for e in endings
                  if e.end is not None and e.end.op_request_id is not None)],
                self.engine_id, vocab.REQUEST_DONE)
            # The rows' ends, those of one shape in one UPDATE.
            ends = [(e.end.rid, e.end.action, e.end.values, e.end.rid in e.ctx.held, e.end.key)
                    for e in endings if e.end is not None]
            taken = stack_work.ends_tx(session, self.engine_id, vocab.STACK_COMPLETE, ends)
            if taken is not None:
                raise _RowTaken(taken)  # nothing of this transaction may commit
            for e in endings:
                for rid in dict.fromkeys(e.ctx.held):
                    if e.end is None or rid != e.end.rid:  # released as it ended
                        resource_locks.resource_lock_release_tx(session, rid, self.engine_id)
            stack_events.resource_events_tx(session, [end[0] for end in ends])  # in one

        def complete(session: Session) -> None:
            over = lifecycle.end_tx(session, first.stack_id, first.traversal)
            own_writes(session)
            lifecycle.purge_tx(session, over)

        tx = Tx(complete, own=True, claim=take > 0 and self.may_chain())

        def report(session: Session) -> bool:
            nonlocal marked
            found, fired = self.points.endings_tx(session, endings, tx, laters)
            if fired:
                complete(session)
            own_writes(session)
            claimed.extend(self.points.claimed_tx(
                session, tx, take if tx.claim and self.take_next() else 0))
            # Before the commit: from it on, these senders have reports left.
            for e, later in zip(endings, laters, strict=True):
                self._mark(e.ctx, later)
            marked = True
            return found

        try:
            found = lifecycle.in_one_transaction(self.db, report)
        except BaseException:
            if marked:  # the commit failed
                for e, later in zip(endings, laters, strict=True):
                    self._mark(e.ctx, later, add=False)
            self.tracker.finished(*(req_id for req_id, _args, _succ in tx.pending))
            raise
        return found, laters, tuple(claimed)

    def _after_commit(self, endings: Sequence[Ending], found: bool, laters: list[Work],
                      claimed: tuple[Claimed, ...]) -> None:
        """Once ``end_many``'s transaction committed: the reports it left
        for later, or, where a point was gone, the retrigger in the newest
        traversal. One ending's failure here does not keep the others'
        reports from being written; the first is raised after them."""
        for e in endings:  # their operations' rules queued meanwhile; their locks let go
            if e.end is not None and e.end.late is not None:
                try:
                    late_outcome.written(self.operations, e.end.late.op)
                except Exception:
                    LOG.exception("%s: after its operation's outcome", e.ctx.node)
        for e in endings:
            for rid in e.ctx.held:
                self.tracker.unclaim(rid)
        copies = [list(later) for later in laters]
        failure: Exception | None = None
        try:
            for e, later in zip(endings, laters, strict=True):
                try:
                    if not (found and self._report_later(e.ctx, later)):
                        self.retrigger(e.ctx)
                except Exception as exc:
                    failure = failure or exc
            if failure is not None:
                raise failure
        except BaseException:
            # The claimed checks will not run here: left to the watchdog,
            # which abandons a request of ours that no check runs and
            # retriggers its node.
            self.tracker.finished(*(c.req_id for c in claimed))
            raise
        finally:
            for e, later in zip(endings, copies, strict=True):
                self._mark(e.ctx, later, add=False)

    def _alone(self, e: Ending) -> Outcome[object]:
        """One of several endings whose transaction failed, written in one of
        its own; what fails it then is its check's outcome, as a lone
        check's would be (an outage: given back; anything else: logged with
        its traceback, failed)."""
        try:
            return self.end_many([e], 0)[0][0]
        except Exception as exc:
            return raised(exc, e.ctx.req_id)

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
        (``Points.cascade_tx``; their further successors join ``work``, and are
        marked ``reporting`` until written). A database error (a deadlock
        with a preparation's delete) retries a batch one by one, the nodes
        it makes ready enqueued. False if a point is missing."""
        traversal = ctx.traversal
        marked: Work = []

        def complete(session: Session) -> None:
            lifecycle.complete_tx(session, ctx.stack_id, traversal)

        def batch_tx(tx: Tx, sender: Node, data: dict[str, JSONValue] | None, batch: list[Node],
                     session: Session) -> bool:
            if not (self.points.reports_tx(session, ctx, tx, sender, data, batch)
                    and self.points.cascade_tx(session, ctx, tx)):
                return False
            self._mark(ctx, tx.later)  # before the commit, as in end_many
            marked.extend(tx.later)
            return True

        try:
            while work:
                sender, data, succs = work.pop(0)
                for i in range(0, len(succs), REPORT_IN_ONE):
                    batch = succs[i:i + REPORT_IN_ONE]
                    tx = Tx(complete)
                    try:
                        if not lifecycle.in_one_transaction(
                                self.db, functools.partial(batch_tx, tx, sender, data, batch)):
                            return False
                        work.extend(tx.later)
                        continue
                    except Exception as exc:
                        ends_apart.split(exc, f"node {sender} (traversal {traversal}): its "
                                         f"report to {len(batch)} points")
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


def raised(exc: Exception, req_id: int) -> Outcome[object]:
    """What a check that raised ``exc`` ends as (called in the ``except``
    block): an outage gives it back (``cut_short``); anything else is
    unexpected — logged with its traceback, failed."""
    return cut_short(exc) if is_outage(exc) else unexpected(exc, req_id, vocab.ACTION_CHECK)


@dataclass
class Run:
    """One thread's run of checks (``Worker.check``): the checks it claimed
    to run next, and the ends of fast paths' nodes its next report writes,
    up to a batch of them (``Pace``)."""

    pace: Pace
    queue: collections.deque[Claimed] = field(default_factory=collections.deque)
    ends: list[Ending] = field(default_factory=list)
    since: float = 0.0  # when the first of ``ends`` was left for the report
    started: dict[int, float] = field(default_factory=dict)  # a waiting chained check's start

    def end(self, ending: Ending) -> NodeEnd:
        """A fast path's end, left to the run's next report (RECORDED: it
        records the request there)."""
        if not self.ends:
            self.since = time.monotonic()
        self.ends.append(ending)
        return (), RECORDED

    def flush(self, reporter: Reporter, chain: int,
              record: Callable[[int, Outcome[object], float], None]
              ) -> list[tuple[int, Outcome[object]]]:
        """Write the ends the run holds, a traversal's in one transaction
        (``Reporter.end_many``); when nothing else is queued, the last takes
        the next pending checks, a batch of them, while the chain may go on
        (``chain``: how many more). Each chained check's request is
        recorded (``record``); the outcome of each, by request."""
        groups: dict[tuple[str, str], list[Ending]] = {}
        for ending in self.ends:
            groups.setdefault((ending.ctx.stack_id, ending.ctx.traversal), []).append(ending)
        self.ends = []
        done: list[tuple[int, Outcome[object]]] = []
        for i, endings in enumerate(groups.values()):
            last = i == len(groups) - 1
            take = min(self.pace.batch(), chain) if last and not self.queue and chain > 0 else 0
            try:
                outcomes, claimed = reporter.end_many(endings, take)
            except Exception as exc:  # as a lone check whose report raised
                outcomes = [raised(exc, e.ctx.req_id) for e in endings]
                claimed = ()
            self.queue.extend(claimed)
            done.extend((e.ctx.req_id, o) for e, o in zip(endings, outcomes, strict=True))
        for req_id, outcome in done:
            started = self.started.pop(req_id, None)
            if started is not None:  # a chained check's
                record(req_id, outcome, started)
        return done

    def waits_for(self, req_id: int) -> bool:
        """Whether the end of check ``req_id`` waits for the run's report."""
        return any(e.ctx.req_id == req_id for e in self.ends)

    def writes_late(self, req_id: int) -> bool:
        """Whether the success of check ``req_id``'s operation waits for the
        run's report, its lock held until then (``manager/late_outcome.py``)."""
        return any(e.ctx.req_id == req_id and e.end is not None and e.end.late is not None
                   for e in self.ends)

    def full(self) -> bool:
        """Whether the report is due although more checks are queued: a
        batch's worth of ends, or the first has waited long enough."""
        return len(self.ends) >= self.pace.batch() or self.pace.waited(self.since)


class Pace:
    """How long this engine's nodes take, from their claim to their end
    (a moving average over its threads): a batch is as many nodes as take
    ``BATCH_SECONDS``, at most ``BATCH`` and at least one — so a backend's
    slow calls are never queued behind each other in one thread for longer
    than that, while another thread could have run them."""

    def __init__(self) -> None:
        self.seconds = BATCH_SECONDS  # a first batch of one

    def node(self, seconds: float) -> None:
        self.seconds += (seconds - self.seconds) / 8

    def batch(self) -> int:
        return max(1, min(BATCH, int(BATCH_SECONDS / max(self.seconds, 1e-6))))

    def waited(self, since: float) -> bool:
        """Whether an end left for the report at ``since`` has waited long enough."""
        return time.monotonic() - since >= BATCH_SECONDS
