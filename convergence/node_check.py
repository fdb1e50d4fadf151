"""What one node's check carries from step to step: its context, and the one
outcome type every step returns (doc/design.rst, "A node in three steps")."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.template import Template
from sharemgr.db import models, stack_work
from sharemgr.manager.operations import Stale


class Skip(Stale):
    """The check did nothing (bailed out, forwarded, superseded); the runner
    records the note on the request, which ends ``done``."""


class Result(enum.StrEnum):
    """How a node's step ended; one case per result."""

    DONE = "done"  # the node's work is done: report ``data`` to its successors
    FAILED = "failed"  # the node failed (``reason``): the traversal fails
    SUPERSEDED = "superseded"  # a newer traversal exists: retrigger what was held
    ENDED = "ended"  # the traversal ended (stack FAILED): stop quietly
    BAILED = "bailed"  # a row is held elsewhere, or the lock or lease was lost
    REPLAN = "replan"  # a physical row changed since it was planned: plan again


@dataclass(frozen=True)
class Outcome:
    result: Result
    data: dict | None = None  # what a DONE update node passes on
    reason: str | None = None  # why it FAILED or BAILED

    @classmethod
    def done(cls, data: dict | None = None) -> Outcome:
        return cls(Result.DONE, data)

    @classmethod
    def failed(cls, reason: str) -> Outcome:
        return cls(Result.FAILED, reason=reason)

    @classmethod
    def bailed(cls, reason: str) -> Outcome:
        return cls(Result.BAILED, reason=reason)

    @classmethod
    def of_begin(cls, why: str, rid: int) -> Outcome:
        """What a node does when ``stack_work.begin`` started nothing."""
        if why == stack_work.CONFLICT:
            return REPLAN
        if why == stack_work.LOCK_LOST:
            return cls.bailed(f"resource {rid}: its lock was taken by another engine")
        return SUPERSEDED


SUPERSEDED = Outcome(Result.SUPERSEDED)
ENDED = Outcome(Result.ENDED)
REPLAN = Outcome(Result.REPLAN)

# A check's end left to the report's transaction: (row, action, values, op request).
End = tuple[int, str, dict, "int | None"]
Head = tuple["models.Stack | None", "models.StackResource | None"]


@dataclass
class Ctx:
    """One node's check: what it was asked, and what it holds."""

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
    end: End | None = None  # the row's end, when left to the report's transaction
    template: Template | None = None  # the traversal's: what successors read (passed_on)


@dataclass(frozen=True)
class Claimed:
    """A successor's check this engine claimed as it made the node ready."""

    req_id: int
    args: dict
    head: Head
