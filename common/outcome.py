"""The one outcome type of a step of the convergence protocol, from the
database's transactions up (doc/design.rst, "A node in three steps"): one
case per result, so that "the traversal is no longer current" is said one way
whether a begin, a report or a node's check found it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sharemgr.common.jsontypes import JSONValue


class Result(enum.StrEnum):
    DONE = "done"  # the node's work is done: report ``data`` to its successors
    FAILED = "failed"  # the node failed (``reason``): the traversal fails
    SUPERSEDED = "superseded"  # a newer traversal exists: retrigger what was held
    ENDED = "ended"  # the traversal ended (stack FAILED): stop quietly
    BAILED = "bailed"  # a row is held elsewhere, or the lock or lease was lost
    REPLAN = "replan"  # a physical row changed since it was planned: plan again
    RETRY = "retry"  # the fast path found the row's lock moved: take the general path


@dataclass(frozen=True)
class Outcome:
    result: Result
    data: dict[str, JSONValue] | None = None  # what a DONE update node passes on
    reason: str | None = None  # why it FAILED or BAILED

    @classmethod
    def done(cls, data: dict[str, JSONValue] | None = None) -> Outcome:
        return cls(Result.DONE, data)

    @classmethod
    def failed(cls, reason: str) -> Outcome:
        return cls(Result.FAILED, reason=reason)

    @classmethod
    def bailed(cls, reason: str) -> Outcome:
        return cls(Result.BAILED, reason=reason)


SUPERSEDED = Outcome(Result.SUPERSEDED)
ENDED = Outcome(Result.ENDED)
REPLAN = Outcome(Result.REPLAN)
RETRY = Outcome(Result.RETRY)
