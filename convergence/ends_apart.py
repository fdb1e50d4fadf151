"""A lone node's end whose report transaction failed, written step by step.

``Reporter.end_many`` writes nodes' ends, their rows' ends, their
operations' successes (``manager/late_outcome.py``) and their reports in one
transaction. When that fails for one node, what it held is written here
piece by piece: the operation's success alone first (``write_alone``; one
whose row was taken over while the driver worked is lost, and the node is
cut as ``act.cut`` cuts a lost operation's: ``cut``), then its row's end
and its reports (``apart``), or, when the row's lock moved on, the node
bails (``row_taken``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import act
from sharemgr.convergence.node_check import Ending, Outcome, ended
from sharemgr.db import stack_work
from sharemgr.db.retry import is_conflict
from sharemgr.manager import late_outcome
from sharemgr.manager.op_errors import Lost
from sharemgr.manager.outage import is_outage

if TYPE_CHECKING:
    from sharemgr.convergence.report import Reporter

LOG = logging.getLogger(__name__)


class OutcomeLost(Exception):
    """An operation's success lost its conditional write in a report's
    transaction (its row taken over while the driver worked): nothing of
    that transaction may commit; written alone, it is lost again
    (``write_alone``)."""


__all__ = ["OutcomeLost", "apart", "cut", "row_taken", "split", "write_alone"]


def apart(reporter: Reporter, e: Ending, exc: Exception) -> Outcome[object]:
    """A lone ending whose transaction failed: its operation's success, its
    row's end, its locks' release and its reports written step by step
    (``Reporter.after``)."""
    ctx, outcome, end = e.ctx, e.outcome, e.end
    split(exc, f"node {ctx.node} (traversal {ctx.traversal}): its report")
    lost = write_alone(reporter, e)
    if lost is not None:
        return lost
    moved = None  # the row whose lock moved on: not ours to release
    try:
        if end is not None:
            won = stack_work.end(reporter.db, end.rid, reporter.engine_id, end.action,
                                 vocab.STACK_COMPLETE, None, end.values,
                                 op_request_id=end.op_request_id, key=end.key)
            moved = end.rid if not won and end.key is not None else None
            outcome = ended(won, f"node {ctx.node} (resource {end.rid})", outcome)
    finally:
        # Also when the end fails (the database still away): a lock the
        # engine believes a check of its own holds is never taken over,
        # and every later check of the node bails on it. Let go of, it
        # is a leaked lock the next check takes over.
        reporter.locks.let_go(ctx.held, moved)
    reporter.after(ctx, outcome)
    return Outcome.done()


def row_taken(reporter: Reporter, e: Ending, rid: int) -> Outcome[object]:
    """The row's end found its lock another engine's (its watchdog judged
    this engine dead while the driver worked): the report was rolled back,
    so the node bails as the general path's does (``node_check.ended``).
    Its driver call succeeded: its success is written, its request done;
    the row is the new holder's to end."""
    ctx, end = e.ctx, e.end
    name = f"node {ctx.node} (traversal {ctx.traversal}, resource {rid})"
    lost = write_alone(reporter, e)  # the row's lock is not the resource's
    if lost is not None:
        return lost
    try:
        if end is not None and end.op_request_id is not None:
            stack_work.finish_request(reporter.db, end.op_request_id, reporter.engine_id,
                                      vocab.REQUEST_DONE)
    finally:
        # Its lock moved on when the key did, maybe back to this engine
        # for another check: that one's, not released.
        reporter.locks.let_go(ctx.held, end.rid if end is not None and end.key is not None
                              else None)
    # Not won: node_check's one bail for a taken row (logged there).
    outcome = ended(False, name, Outcome.bailed(name))
    reporter.after(ctx, outcome)
    return Outcome.stale(outcome.reason or name)


def write_alone(reporter: Reporter, e: Ending) -> Outcome[object] | None:
    """The ending's operation's success written in a transaction of its
    own: None once written (or it had none), else the outcome of its node,
    cut."""
    late = e.end.late if e.end is not None else None
    if late is None:
        return None
    try:
        late_outcome.write_alone(reporter.operations, late.op, late.changes)
    except Lost as exc:
        return cut(reporter, e, str(exc))
    return None


def cut(reporter: Reporter, e: Ending, why: str) -> Outcome[object]:
    """A node whose operation's success was lost bails as a lost operation's
    node does (``act.cut``): its rows' locks left held, its operation's
    request abandoned; the watchdog retriggers it."""
    ctx, end = e.ctx, e.end
    name = f"node {ctx.node} (traversal {ctx.traversal})"
    outcome = act.cut(reporter.db, reporter.engine_id, reporter.tracker, ctx, list(ctx.held),
                      name, end.op_request_id if end is not None else None, Outcome.lost(why))
    reporter.after(ctx, outcome)
    return Outcome.stale(outcome.reason or name)


def split(exc: Exception, what: str) -> None:
    """A transaction of reports failed; they are written again in smaller
    ones, which do the same work. A conflict (the database chose it as a
    deadlock's victim: a stack's points purged while its nodes report) is
    expected under contention, and an outage under a failover or a cut:
    one line each. Anything else, with its traceback."""
    expected = "lost a conflict" if is_conflict(exc) else \
        "met an outage" if is_outage(exc) else \
        "lost an operation's outcome" if isinstance(exc, OutcomeLost) else None
    if expected:
        LOG.warning("%s %s (%s); writing it step by step", what, expected,
                    (str(exc).strip().splitlines() or [""])[0])
    else:
        LOG.error("%s failed; writing it step by step", what, exc_info=exc)
