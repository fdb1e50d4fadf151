"""How a traversal starts and ends, and how a stalled one is set going again.

Preparation (``prepare.py``) builds a traversal in the caller's transaction;
the transactions that start one (:func:`create_stack`,
:func:`prepare_traversal`) and everything after that which changes the stack
row as a whole live here, so that each rule is written once:

* :func:`complete_tx` (:func:`end_tx`, then :func:`purge_tx`) — the stack's
  SyncPoint heard from every root;
* :func:`fail` — a node failed, the traversal timed out, or a user cancelled
  it: the traversal is marked FAILED and, unless rollback is off (or the
  traversal was a DELETE or a ROLLBACK), the ROLLBACK traversal is prepared
  in the same transaction;
* :func:`retrigger_tx` — doc/specs.rst, spec 001: enqueue a resource's nodes in the current
  traversal when they are ready and have not reported yet (a check that found
  its traversal superseded, and the watchdog, call it);
* :func:`stalled_nodes` — what the watchdog looks for: nodes that are ready,
  have not reported, and have no live request.

A node has *reported* once its key is in the input data of every successor's
SyncPoint (the stack's point for a root): reporting is the last thing a check
does, so a node that has reported needs nothing more.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from oslo_log import log as logging
from sharemgr.common import metrics, vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import prepare
from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.template import Template
from sharemgr.db import models, stack_events, stack_purge, stacks, sync_points
from sharemgr.db.engine import Database, after_commit
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import Session

T = TypeVar("T")

LOG = logging.getLogger(__name__)

# A traversal's points as read: (entity id, is_update) -> the reports it holds.
Points = Mapping[tuple[str, bool], Mapping[str, JSONValue]]

ROLLING_BACK = "rolling back: "  # status_reason prefix of a rollback after a failure


class _Ended(Exception):
    """``fail_tx``'s own finding that the traversal is no longer current
    (nothing written): ``fail`` answers False. A TraversalLost from the
    rollback's preparation is not this and goes up."""


# Starting ----------------------------------------------------------------------------


@retry_on_conflict
def create_stack(db: Database, name: str, template: Template, disable_rollback: bool = False,
                 timeout_seconds: int | None = None) -> prepare.Traversal:
    """A new stack row and its CREATE traversal, in one transaction: together
    or not at all."""
    with db.session() as session:
        stack = stacks.stack_create_tx(session, name, disable_rollback)
        return prepare.prepare_traversal_tx(session, stack, vocab.STACK_CREATE, template,
                                            timeout_seconds)


@retry_on_conflict
def prepare_traversal(
    db: Database, stack: models.Stack, action: str, template: Template | None = None,
    timeout_seconds: int | None = None, guard: prepare.Guard | None = None,
) -> prepare.Traversal:
    """:func:`prepare.prepare_traversal_tx` in a transaction of its own."""
    with db.session() as session:
        return prepare.prepare_traversal_tx(session, stack, action, template, timeout_seconds,
                                            guard=guard)


# Completion --------------------------------------------------------------------------


def complete_tx(session: Session, stack_id: str, traversal_id: str) -> bool:
    """The stack's SyncPoint is complete: :func:`end_tx` and
    :func:`purge_tx`. True if this call ended the traversal."""
    return purge_tx(session, end_tx(session, stack_id, traversal_id))


@dataclass(frozen=True)
class Ended:
    """What :func:`end_tx` wrote: the stack as read, and whether its
    conditional update ended the traversal (None: the stack is gone)."""

    stack: models.Stack | None
    done: bool = False
    reason: str = ""


def end_tx(session: Session, stack_id: str, traversal_id: str) -> Ended:
    """The first half of a completion: delete the traversal's points (first,
    for the lock order points, stack, resources) and mark the stack
    COMPLETE (a DELETE soft-deletes it). The last node's own row writes go
    between the halves (after the stack row, in lock order; before the
    purge, which must see them)."""
    stack = stacks.stack_get_tx(session, stack_id)
    if stack is None:
        return Ended(None)
    reason = f"Stack {stack.action} completed"
    if stack.action == vocab.STACK_ROLLBACK and \
            (stack.status_reason or "").startswith(ROLLING_BACK):
        reason += f"; rolled back because {(stack.status_reason or '')[len(ROLLING_BACK):]}"
    sync_points.delete_all_tx(session, stack_id, traversal_id)
    # Its event is written by purge_tx, after the last node's: in order.
    done = stacks.stack_set_status_tx(session, stack_id, traversal_id, vocab.STACK_COMPLETE,
                                      reason, event=False)
    return Ended(stack, done, reason)


def purge_tx(session: Session, ended: Ended) -> bool:
    """The second half: purge the finished rows and unused templates of a
    traversal :func:`end_tx` ended. True if it did end it."""
    if ended.stack is None or not ended.done:
        return False
    # The stack's COMPLETE event, after the last node's (a completed
    # DELETE's goes with the others in the purge).
    stack_events.stack_event_tx(session, ended.stack.id, vocab.STACK_COMPLETE)
    stack_purge.purge_tx(session, ended.stack.id)
    LOG.info("stack %s: %s", ended.stack.name, ended.reason)
    _count_traversal(session, ended.stack, vocab.STACK_COMPLETE)
    return True


def _count_traversal(session: Session, stack: models.Stack, status: str) -> None:
    """The ended traversal into the metrics once its end is committed (the
    conditional update may still be rolled back with its transaction)."""
    action, started = stack.action, stack.traversal_started_at

    def count() -> None:
        seconds = (models.utcnow() - started).total_seconds() if started else 0.0
        metrics.TRAVERSAL_SECONDS.labels(action, status).observe(max(seconds, 0.0))

    after_commit(session, count)


# Failure, timeout, cancel -------------------------------------------------------------


@retry_on_conflict
def fail(db: Database, stack_id: str, traversal_id: str, reason: str,
         rollback: bool | None = None, node: bool = False) -> bool:
    """Mark the traversal FAILED with ``reason`` (with ``node``, a node's
    failure: ``Resource <ACTION> failed: <reason>``) and start the rollback
    (``rollback`` None: unless the stack disables it), in one transaction.
    False if the traversal is no longer current; True if it is FAILED (or
    rolling back) now, by this call or an earlier one."""
    try:
        with db.session() as session:
            return fail_tx(session, stack_id, traversal_id, reason, rollback, node)
    except _Ended:
        return False


def fail_tx(session: Session, stack_id: str, traversal_id: str, reason: str,
            rollback: bool | None = None, node: bool = False) -> bool:
    stack = stacks.stack_get_tx(session, stack_id)
    if stack is None or stack.current_traversal != traversal_id:
        return False
    if stack.status != vocab.STACK_IN_PROGRESS:
        return True  # failed already (another node, the watchdog)
    if node:
        reason = f"Resource {stack.action} failed: {reason}"
    if rollback is None:
        rollback = not stack.disable_rollback
    rollback = rollback and stack.action in (vocab.STACK_CREATE, vocab.STACK_UPDATE)
    # The points go with the traversal, rolled back or not (before the stack
    # row, for the lock order): a point exists only while its traversal is
    # current and in progress, which a report relies on (``report._inline``).
    sync_points.delete_all_tx(session, stack_id)
    if not stacks.stack_set_status_tx(session, stack_id, traversal_id, vocab.STACK_FAILED, reason):
        raise _Ended(f"stack {stack_id}: traversal {traversal_id} ended meanwhile")
    LOG.warning("stack %s: %s", stack.name, reason)
    _count_traversal(session, stack, vocab.STACK_FAILED)
    if rollback:
        failed = stacks.stack_get_tx(session, stack_id, lock="update")
        if failed is None:  # written FAILED just above, in this transaction
            raise _Ended(f"stack {stack_id}: gone while failing")
        # Its event is the one of the note below (same status, the reason why).
        tr = prepare.prepare_traversal_tx(session, failed, vocab.STACK_ROLLBACK, event=False)
        expected = vocab.STACK_COMPLETE if tr.complete else vocab.STACK_IN_PROGRESS
        note = (f"Stack ROLLBACK completed (nothing to do); rolled back because {reason}"
                if tr.complete else ROLLING_BACK + reason)
        stacks.stack_set_status_tx(session, stack_id, tr.traversal_id, expected, note,
                                   expected_status=expected)
        LOG.warning("stack %s: rolling back (traversal %s)", stack.name, tr.traversal_id)
    return True


def cancel(db: Database, stack: models.Stack, rollback: bool = True) -> bool:
    """Heat's cancel-update: stop the stack's traversal and roll back (or,
    without ``rollback``, leave it FAILED). Checks still running stop at
    their next step: they find the traversal superseded or ended. False if
    the stack was not IN_PROGRESS (or moved on meanwhile)."""
    if stack.status != vocab.STACK_IN_PROGRESS or stack.current_traversal is None:
        return False
    return fail(db, stack.id, stack.current_traversal,
                f"Stack {stack.action} cancelled by the user", rollback)


def deadline(stack: models.Stack) -> datetime.datetime | None:
    if not stack.timeout_seconds or stack.traversal_started_at is None:
        return None
    return stack.traversal_started_at + datetime.timedelta(seconds=stack.timeout_seconds)


def minutes(seconds: int) -> str:
    """Seconds as the minutes a user gave (``1``, ``0.05``)."""
    return f"{seconds / 60:g}"


def fail_if_timed_out(db: Database, stack: models.Stack, now: datetime.datetime | None = None
                      ) -> bool:
    """Fail (and roll back, as for a failed node) a traversal that has run
    longer than the stack's timeout. True if this call did."""
    end = deadline(stack)
    if stack.status != vocab.STACK_IN_PROGRESS or end is None or (now or models.utcnow()) < end:
        return False
    reason = (f"Stack {stack.action} timed out after {minutes(stack.timeout_seconds or 0)} "
              "minute(s)")  # a deadline means a timeout
    return fail(db, stack.id, stack.current_traversal or "", reason)


# Retriggering ------------------------------------------------------------------------


def reported(graph: Graph, points: Points, stack_id: str, node: Node) -> bool:
    """Whether ``node`` has reported to every successor (and, from a root,
    to the stack's point). A missing point counts as not reported."""
    targets = [(str(s.resource_id), s.is_update) for s in graph.required_by(node)]
    if graph.is_root(node):
        targets.append((sync_points.root_entity(stack_id, node.key), False))
    return all(node.key in (points.get(t) or {}) for t in targets)


def ready(graph: Graph, points: Points, node: Node) -> bool:
    point = points.get((str(node.resource_id), node.is_update))
    return point is not None and sync_points.is_ready(point, graph.requires_keys(node))


def _points_tx(session: Session, stack_id: str, traversal_id: str, nodes: Iterable[Node],
               graph: Graph) -> dict[tuple[str, bool], dict[str, JSONValue]]:
    """The points a readiness-and-reported test of ``nodes`` reads."""
    keys: set[tuple[str, bool]] = set()
    for node in nodes:
        keys.add((str(node.resource_id), node.is_update))
        keys.update((str(s.resource_id), s.is_update) for s in graph.required_by(node))
        if graph.is_root(node):
            keys.add((sync_points.root_entity(stack_id, node.key), False))
    out = {}
    for entity, is_update in keys:
        point = sync_points.get_tx(session, entity, traversal_id, is_update)
        if point is not None:
            out[(entity, is_update)] = point.input_data
    return out


def retrigger_tx(session: Session, stack_id: str, resource_id: int,
                 only: Collection[Node] | None = None) -> list[models.Request]:
    """Spec 001: enqueue the checks of ``resource_id``'s nodes (``only``
    those, if given) in the stack's current traversal that are ready and
    have not reported, each with its point's input data. Several engines may
    do this for one node; the resource lock lets one proceed and a SyncPoint
    fires once, so a duplicate costs a check, never a wrong result."""
    stack = stacks.stack_get_tx(session, stack_id)
    if stack is None or stack.current_traversal is None or stack.status != vocab.STACK_IN_PROGRESS:
        return []
    graph = prepare.load_traversal_graph(stack)
    nodes = [n for n in (Node(resource_id, True), Node(resource_id, False))
             if n in graph and (only is None or n in only)]
    if not nodes:
        return []
    points = _points_tx(session, stack_id, stack.current_traversal, nodes, graph)
    out = []
    for node in nodes:
        if ready(graph, points, node) and not reported(graph, points, stack_id, node):
            data = points[(str(node.resource_id), node.is_update)]
            out.append(prepare.enqueue_check_tx(session, stack_id, stack.current_traversal, node,
                                          data))
    return out


def retrigger(db: Database, stack_id: str, resource_id: int,
              only: Collection[Node] | None = None) -> list[models.Request]:
    with db.session() as session:
        return retrigger_tx(session, stack_id, resource_id, only)


# What the watchdog looks for --------------------------------------------------------------


@dataclass(frozen=True)
class Stalled:
    node: Node
    input_data: dict[str, JSONValue]


def stalled_nodes(graph: Graph, points: Points, stack_id: str, live: Collection[Node]
                  ) -> list[Stalled]:
    """Nodes that are ready, have not reported, and have no live check
    request. ``live`` must be read before ``points``: a check that ended
    before the requests were read has reported in the points read after."""
    out = []
    for node in graph:
        if node in live or not ready(graph, points, node):
            continue
        if reported(graph, points, stack_id, node):
            continue
        out.append(Stalled(node, dict(points[(str(node.resource_id), node.is_update)])))
    return out


def in_one_transaction(db: Database, work: Callable[[Session], T]) -> T:
    """Run ``work`` in one transaction: the writes of a traversal step that
    commit together or not at all (a node's end, its report to a successor
    and that successor's claim). The traversal's transactions are opened here
    or in db/, so its crash windows can be read in one place."""
    with db.session() as session:
        return work(session)
