"""The one outcome type, from the driver call up (doc/design.rst, "One
result"): what ``Operations.perform`` returns to the request runner, the
reconciler and a stack node, and what every step of the convergence protocol
returns, from the database's transactions up. One case per result that
differs in what happens next, so that "the traversal is no longer current"
or "another engine took the resource" is said one way wherever it is found.
Exceptions stay for the exceptional (a bug, a database that is away where
nothing can give the work back)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, Never

from sharemgr.common.jsontypes import JSONValue
from typing_extensions import TypeVar

# What a DONE carries: a node's data for its successors (the default), the
# changes an operation's success wrote (``Outcome[list[Change]]``).
D = TypeVar("D", covariant=True, default=dict[str, JSONValue])


class Result(enum.StrEnum):
    DONE = "done"  # done: ``data`` is what it passes on (a node) or wrote (an operation)
    FAILED = "failed"  # failed (``reason``): the resource in its error status, the traversal fails
    # An operation's:
    STALE = "stale"  # nothing to do: the resource moved on without this request
    LOST = "lost"  # another engine or a pass took the resource while the driver worked
    NOT_NOW = "not_now"  # nothing reached the driver: the request is given back
    # A request's handler that wrote its request's end itself (a node's report).
    RECORDED = "recorded"
    # A node's:
    SUPERSEDED = "superseded"  # a newer traversal exists: retrigger what was held
    ENDED = "ended"  # the traversal ended (stack FAILED): stop quietly
    BAILED = "bailed"  # a row is held elsewhere, or the lock or lease was lost
    REPLAN = "replan"  # a physical row changed since it was planned: plan again
    RETRY = "retry"  # the fast path found the row's lock moved: take the general path


@dataclass(frozen=True)
class Outcome(Generic[D]):
    result: Result
    data: D | None = None  # DONE: what a node passes on, or what an operation wrote
    reason: str | None = None  # why it FAILED, BAILED, was STALE, LOST or NOT_NOW
    detail: str | None = None  # FAILED: the user message's detail id (common/messages.py)

    @classmethod
    def done(cls, data: D | None = None) -> Outcome[D]:
        return cls(Result.DONE, data)

    @classmethod
    def failed(cls, reason: str, detail: str | None = None) -> Outcome[Never]:
        return Outcome(Result.FAILED, reason=reason, detail=detail)

    @classmethod
    def bailed(cls, reason: str) -> Outcome[Never]:
        return Outcome(Result.BAILED, reason=reason)

    @classmethod
    def stale(cls, reason: str) -> Outcome[Never]:
        return Outcome(Result.STALE, reason=reason)

    @classmethod
    def lost(cls, reason: str) -> Outcome[Never]:
        return Outcome(Result.LOST, reason=reason)

    @classmethod
    def not_now(cls, reason: str) -> Outcome[Never]:
        return Outcome(Result.NOT_NOW, reason=reason)

    @property
    def ok(self) -> bool:
        return self.result is Result.DONE


SUPERSEDED: Outcome[Never] = Outcome(Result.SUPERSEDED)
ENDED: Outcome[Never] = Outcome(Result.ENDED)
REPLAN: Outcome[Never] = Outcome(Result.REPLAN)
RETRY: Outcome[Never] = Outcome(Result.RETRY)
RECORDED: Outcome[Never] = Outcome(Result.RECORDED)
