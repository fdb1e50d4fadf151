"""The checks a thread runs after its first (``Worker.check``): those its
reports claimed — a successor made ready, the next pending checks taken —
each run and its request's outcome recorded as the request loop would.

Several checks of one traversal begin in one transaction: a thread's run
(``report.Run``) that holds more than one claimed check plans those whose
work is a plain create or update on a row nobody holds (the worker's fast
path), begins all of them at once (``stack_work.begin_many``: every row's
lock taken, its physical rows and operation request written), takes their
resources' locks and re-reads their rows in one statement
(``manager/held_reads.py``), then carries each out in turn; their ends
wait for the run's report, which writes them together too. A batch is as
many nodes as ran in ``report.BATCH_SECONDS`` before it (``report.Pace``),
so a begun operation waits about that long for its call, far inside its
lease (a backend turning slow within a batch:
doc/convergence.rst, "Batches"). Whatever cannot begin with the others
runs alone."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Protocol

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import physical as phys
from sharemgr.convergence.act import begun_op
from sharemgr.convergence.node_check import Claimed, Ctx, NodeEnd, Outcome, Result
from sharemgr.convergence.report import Pace, Run, raised
from sharemgr.convergence.tracking import Tracker
from sharemgr.db import api as db_api
from sharemgr.db import capacity, models, stack_work
from sharemgr.db.engine import Database
from sharemgr.manager.leases import Terms
from sharemgr.manager.plans import Op, Reread
from sharemgr.manager.runner import observe, request_context, request_end

__all__ = ["Planned", "record", "run_claimed"]

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """A fast path's node as planned from its row, nothing written yet."""

    ctx: Ctx
    row: models.StackResource
    work: stack_work.Begin[Terms]
    plan: phys.Plan
    final: Mapping[str, object]
    known: tuple[int, str, str | None]  # the row's (id, type, physical id) as begun


class Checks(Protocol):
    """What of the worker a chained check uses."""

    db: Database
    engine_id: str
    tracker: Tracker
    pace: Pace

    def planned_fast(self, claimed: Claimed) -> Planned | None: ...

    def fast_begun(self, p: Planned, begun: stack_work.Begun[Terms], run: Run,
                   reread: Reread | None = None) -> NodeEnd: ...

    def reread_held(self, ops: Sequence[Op | None]) -> list[tuple[Op | None, ExitStack]]: ...

    def node(self, claimed: Claimed, run: Run) -> NodeEnd: ...


def run_claimed(worker: Checks, run: Run, claimed: Sequence[Claimed]) -> None:
    """Run the checks ``claimed``: several begun together where they can
    (``begin_together``), the others one by one."""
    alone = begin_together(worker, run, claimed) if len(claimed) > 1 else claimed
    for c in alone:
        chained(worker, run, c, functools.partial(worker.node, c, run))


def begin_together(worker: Checks, run: Run, claimed: Sequence[Claimed]) -> list[Claimed]:
    """Begin the fast paths' work of ``claimed`` of one traversal in one
    transaction and carry each out; the claimed checks left to run alone
    (all of them when fewer than two could begin together, or when their
    transaction would not begin them all)."""
    started = time.monotonic()
    planned: list[tuple[Claimed, Planned]] = []
    rest: list[Claimed] = []
    for c in claimed:
        p = worker.planned_fast(c)
        if p is not None and (not planned or _same_traversal(planned[0][1].ctx, p.ctx)):
            planned.append((c, p))
        else:
            rest.append(c)
    if len(planned) < 2:
        return list(claimed)
    first = planned[0][1].ctx
    for _c, p in planned:
        worker.tracker.claim(p.row.id)
    try:
        begun = stack_work.begin_many(
            worker.db, worker.engine_id, first.stack_id, first.traversal,
            [(p.row.id, p.work, p.row.atomic_key) for _c, p in planned])
    except capacity.NoRoom:  # one of them had no room: each alone, as its fast path does
        begun = Outcome.stale("no room for all")
    except BaseException:
        _unclaim(worker, planned)
        raise
    if isinstance(begun, Outcome):  # nothing was written, no lock taken
        _unclaim(worker, planned)
        return list(claimed)
    held = worker.reread_held([begun_op(p.plan, b) for (_c, p), b in zip(planned, begun,
                                                                          strict=True)])
    each = (time.monotonic() - started) / len(planned)
    with ExitStack() as every:
        for _op, stack in held:  # released on the way out of a failure
            every.push(stack)
        for (c, p), b, (op, stack) in zip(planned, begun, held, strict=True):
            try:
                chained(worker, run, c, functools.partial(
                    worker.fast_begun, p, b, run, None if op is None else op.reread), each)
            finally:
                # Its lock, once its operation is carried out; where its
                # success waits for the run's report, once that wrote it.
                if not run.writes_late(c.req_id):
                    stack.close()
        every.pop_all()
    return rest


def chained(worker: Checks, run: Run, c: Claimed, step: Callable[[], NodeEnd],
            planning: float = 0.0) -> None:
    """A claimed check's ``step`` (its node, or a begun node's carry-out),
    what it claims queued in ``run``, its request's outcome recorded as the
    request loop would (once the run's report wrote it, when its end waits
    for that; the node's pace noted then, ``planning`` included)."""
    request_context(c.req_id, vocab.STACK_RESOURCE, str(c.args.get("resource_id")))
    started = time.monotonic()
    try:
        nxt, outcome = step()
        run.queue.extend(nxt)
    except Exception as exc:  # recorded on the request: the watchdog counts failures
        outcome = raised(exc, c.req_id)
    if run.waits_for(c.req_id):
        worker.pace.node(planning + time.monotonic() - started)
        run.started[c.req_id] = started
        return
    record(worker, c.req_id, outcome, started)


def record(worker: Checks, req_id: int, outcome: Outcome[object], started: float) -> None:
    """A chained check's request ends as its outcome says (RECORDED: its
    report wrote it)."""
    status, error, _message = request_end(outcome, req_id, vocab.ACTION_CHECK)
    observe(vocab.STACK_RESOURCE, vocab.ACTION_CHECK, status, error, started)
    if outcome.result is Result.FAILED:  # logged by the request loop's end line
        LOG.warning("request %s (%s) failed: %s", req_id, vocab.ACTION_CHECK, error)
    try:
        if status == vocab.REQUEST_PENDING:  # given back, as the request loop does
            db_api.request_release(worker.db, req_id, worker.engine_id, error or "")
        elif outcome.result is not Result.RECORDED:  # else its report recorded it
            stack_work.finish_request(worker.db, req_id, worker.engine_id, status, error)
    except Exception:
        LOG.exception("could not record the outcome of request %s", req_id)
    finally:
        worker.tracker.finished(req_id)


def _same_traversal(a: Ctx, b: Ctx) -> bool:
    return (a.stack_id, a.traversal) == (b.stack_id, b.traversal)


def _unclaim(worker: Checks, planned: Sequence[tuple[Claimed, Planned]]) -> None:
    for _c, p in planned:
        worker.tracker.unclaim(p.row.id)
