"""What one node's check carries from step to step: its context, and the one
outcome type every step returns (``common/outcome.py``, from the database's
begin up; doc/design.rst, "A node in three steps")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from oslo_log import log as logging
from sharemgr.common.outcome import ENDED, RECORDED, REPLAN, RETRY, SUPERSEDED, Outcome, Result
from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.template import Template
from sharemgr.db import models
from sharemgr.manager.plans import Change, Op

__all__ = ["ENDED", "RECORDED", "REPLAN", "RETRY", "SUPERSEDED", "Claimed", "Ctx",
           "Ending", "NodeEnd", "Outcome", "Result", "cut_short", "ended"]

LOG = logging.getLogger(__name__)


def ended(won: bool, name: str, outcome: Outcome) -> Outcome:
    """``outcome``, if the row's end was written (``stack_work.end``'s
    answer); else another engine took the row's lock while the work ran
    (its watchdog judged this engine dead) and the node bails: the row is
    its new holder's to end, and reporting on it here would end the stack
    around a row still IN_PROGRESS. Every path that ends a row asks this."""
    if won:
        return outcome
    LOG.warning("%s: its row's lock was taken over while its work ran; the node bails", name)
    return Outcome.bailed(f"{name}: its row's lock was taken over while its work ran")


def cut_short(exc: BaseException) -> Outcome:
    """The outcome of a check an outage of the database or the coordination
    backend cut (NOT_NOW: its request is given back and runs again)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return Outcome.not_now(f"an outage cut the check: {type(exc).__name__}: {first}")


class Late(NamedTuple):
    """A fast path's operation whose success is written by the report's
    transaction (``manager/late_outcome.py``): the op, holding its lock, and
    the changes, fenced."""

    op: Op
    changes: list[Change]


class End(NamedTuple):
    """A check's end left to the report's transaction."""

    rid: int  # the row
    action: str
    values: dict[str, object]
    op_request_id: int | None
    key: int | None  # the row lock's key while the check holds it: ``Begun.key``
    late: Late | None = None  # its operation's success, not yet written

Head = tuple["models.Stack | None", "models.StackResource | None"]


@dataclass(frozen=True)
class Ctx:
    """One node's check: what it was asked, and what it holds (``held``, the
    one part that changes as it goes: the rows it has locked)."""

    req_id: int
    stack_id: str
    stack_name: str
    traversal: str
    node: Node
    graph: Graph
    input_data: Mapping[str, object]
    held: list[int] = field(default_factory=list)  # rows locked by this check
    args: Mapping[str, object] = field(default_factory=dict)
    template: Template | None = None  # the traversal's: what successors read (passed_on)


# How a node's check ends, every way it can: the checks it claimed to run
# next in this thread (a successor it made ready, or the next pending
# checks its report took), and its request's outcome — RECORDED (its
# report wrote it), DONE (the request loop writes it), STALE (it did
# nothing: superseded, ended, forwarded, bailed; the reason is noted on the
# request), NOT_NOW (an outage cut it: given back), RETRY (a fast path
# found the row's lock moved: the general path takes over).
NodeEnd = tuple[tuple["Claimed", ...], Outcome[object]]


@dataclass(frozen=True)
class Claimed:
    """A check this engine claimed in a report's transaction, to run next in
    the reporting thread: a successor the report made ready, or a pending
    check it took."""

    req_id: int
    args: models.RequestArgs
    head: Head


@dataclass(frozen=True)
class Ending:
    """A node whose check ends in a report's transaction
    (``Reporter.end_many``): its context, its outcome and, from a fast
    path, its row's end."""

    ctx: Ctx
    outcome: Outcome
    end: End | None = None
