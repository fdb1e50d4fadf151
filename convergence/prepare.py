"""Traversal preparation (doc/specs.rst, spec 003).

:func:`prepare_traversal` starts a CREATE, UPDATE, DELETE or ROLLBACK of a
stack, in one transaction:

1. delete the stack's old SyncPoints (first, for the lock order — see
   ``db/sync_points.py``): an engine still working on the old traversal then
   finds its points gone and knows it was superseded (doc/specs.rst, spec 001);
2. lock the stack row and check that its ``current_traversal`` is still the
   one the caller saw (else :class:`TraversalLost`);
3. store the template (a rollback reuses the stored one);
4. load every extant resource row, choose for each resource of the template
   the most up-to-date row in a valid state, create rows for new names;
5. build the traversal graph (``graph.build_traversal_graph``);
6. a SyncPoint per node left to traverse (not settled) plus the stack's;
7. swap ``current_traversal`` (``WHERE current_traversal = :previous``) and
   store ``current_deps``, the template ids, action and status;
8. enqueue a ``check_resource`` request for each leaf.

All of it commits together or not at all: the loser of a race leaves no row
behind (the work runs in a SAVEPOINT, rolled back before
:class:`TraversalLost` is raised, so this holds even inside a caller's
transaction), and a prepared traversal is durable — its first triggers are
request rows, not messages.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import settle
from sharemgr.convergence.graph import (
    ExistingResource,
    Graph,
    Node,
    build_traversal_graph,
)
from sharemgr.convergence.template import Template, template_from_dict
from sharemgr.db import api, models, new_stack_rows, stack_purge, sync_points
from sharemgr.db import stacks as db_stacks
from sharemgr.db.engine import Database
from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)

_ANY = None
# The stack states (action, status; None = any) each action refuses to start from.
# A stack being deleted, or whose delete failed, is only deleted again (as in
# Heat): its delete has already forgotten its template and parameters, so an
# update would judge its surviving resources against defaults and replace them.
REFUSED_FROM: Mapping[str, tuple[tuple[str | None, str | None], ...]] = {
    vocab.STACK_CREATE: (),  # checked apart: only a stack that never had a traversal
    vocab.STACK_UPDATE: ((vocab.STACK_INIT, _ANY), (vocab.STACK_DELETE, _ANY)),
    vocab.STACK_ROLLBACK: ((vocab.STACK_INIT, _ANY), (vocab.STACK_DELETE, _ANY)),
    vocab.STACK_DELETE: (),
}


class PrepareError(Exception):
    pass


class TraversalLost(PrepareError):
    """Another preparation changed the stack's traversal first; nothing of
    this one was kept."""


class InvalidStackAction(PrepareError):
    pass


@dataclass(frozen=True)
class Traversal:
    """What a preparation produced. ``graph`` is also stored in
    ``stacks.current_deps`` (``Graph.from_json`` reads it back)."""

    stack_id: str
    traversal_id: str
    action: str
    template_id: int
    template: Template
    graph: Graph
    names: Mapping[int, str]  # resource row id -> resource name, for every node
    chosen: Mapping[str, int]  # resource name -> row id of its update node
    created: tuple[int, ...]  # rows this preparation inserted
    leaves: tuple[Node, ...]  # triggered (requests enqueued) in the same transaction
    complete: bool  # empty graph, or every node settled: the stack was marked COMPLETE at once
    settled: frozenset[Node] = frozenset()  # nodes settled by the preparation (settle.py)


@dataclass(frozen=True)
class Prepared:
    """What a :data:`Guard` sees of a preparation before its points,
    swap and triggers are written: the stack row as locked (its template
    still the current one), every extant row (not those deleted, waiting
    for the purge) and what was settled."""

    stack: models.Stack
    rows: Sequence[models.StackResource]
    settled: settle.Settled


# Called inside the preparation's transaction: raising refuses the traversal
# and rolls back everything the preparation wrote (``stack update``'s
# safeguard against replacing shares: preview.refuse_lost_shares).
Guard = Callable[[Prepared], None]


# Triggers ------------------------------------------------------------------------


def check_request_args(
    stack_id: str, traversal_id: str, node: tuple[int, bool],
    input_data: Mapping[str, JSONValue] | None,
) -> dict[str, JSONValue]:
    """The ``args`` of a ``check_resource`` request for a graph node."""
    return {
        "stack_id": stack_id,
        "traversal": traversal_id,
        "resource_id": int(node[0]),
        "is_update": bool(node[1]),
        "input_data": dict(input_data or {}),
    }


def enqueue_check_tx(
    session: Session,
    stack_id: str,
    traversal_id: str,
    node: tuple[int, bool],
    input_data: Mapping[str, JSONValue] | None = None,
) -> models.Request:
    """Add the ``check_resource`` request of a node in the caller's
    transaction — from a preparation for the leaves, and from the report
    whose CAS completed a successor's SyncPoint (its predecessors have all
    reported). Any
    engine may claim it (host None)."""
    return api.request_add_tx(
        session,
        vocab.STACK_RESOURCE,
        str(int(node[0])),
        vocab.ACTION_CHECK,
        None,
        check_request_args(stack_id, traversal_id, node, input_data),
    )


# Choosing rows ----------------------------------------------------------------------


def _usable(row: models.StackResource) -> bool:
    # A row being (or already) deleted is never updated again: its resource
    # gets a fresh row. This is doc/specs.rst, spec 001: "an update node whose resource is
    # DELETE_IN_PROGRESS gets a replacement", decided here once instead of
    # by every engine that meets the row.
    return row.action != vocab.STACK_DELETE


def choose_rows(
    rows: Sequence[models.StackResource],
    template: Template,
    new_template_id: int | None,
    current_template_id: int | None,
) -> tuple[dict[str, models.StackResource], dict[str, models.StackResource]]:
    """For each resource of ``template``, the row its update node works on.

    Among the usable rows of the same name and type, the best is, in order:
    of the new template (a rollback finds the row it left), not FAILED, not
    replaced by another extant row, of the stack's current template, newest.
    Returns (chosen name -> row, replaced name -> row): the second lists
    resources with no usable row of the right type but a usable row of
    another type (a type change), which a new row is to replace.
    O(rows), not O(rows x names): rows are grouped by name first.
    """
    by_name: dict[str, list[models.StackResource]] = defaultdict(list)
    for row in rows:
        by_name[row.name].append(row)
    extant = {row.id for row in rows}
    superseded = {r.replaces for r in rows if r.replaces in extant}
    superseded |= {r.id for r in rows if r.replaced_by in extant}

    def rank(row: models.StackResource) -> tuple[bool, bool, bool, bool, int]:
        return (
            new_template_id is not None and row.template_id == new_template_id,
            row.status != vocab.STACK_FAILED,
            row.id not in superseded,
            current_template_id is not None and row.template_id == current_template_id,
            row.id,
        )

    chosen: dict[str, models.StackResource] = {}
    replaced: dict[str, models.StackResource] = {}
    for name, defn in template.resources.items():
        usable = [r for r in by_name.get(name, ()) if _usable(r)]
        same_type = [r for r in usable if r.type == defn.type]
        if same_type:
            chosen[name] = max(same_type, key=rank)
        elif usable:
            replaced[name] = max(usable, key=rank)
    return chosen, replaced


# Preparation ----------------------------------------------------------------------------


def _check_action(stack: models.Stack, action: str) -> None:
    if action == vocab.STACK_INIT or action not in vocab.STACK_ACTIONS:  # INIT: never started
        raise InvalidStackAction(f"unknown stack action {action!r}")
    if action == vocab.STACK_CREATE:
        if stack.current_traversal is not None or stack.action != vocab.STACK_INIT:
            raise InvalidStackAction(
                f"stack {stack.name!r} was created already ({stack.action} {stack.status})"
            )
        return
    for refused_action, refused_status in REFUSED_FROM[action]:
        if stack.action == refused_action and refused_status in (None, stack.status):
            raise InvalidStackAction(
                f"cannot {action.lower()} stack {stack.name!r} while it is "
                f"{stack.action} {stack.status}" + _after_delete(stack))


def _after_delete(stack: models.Stack) -> str:
    """What may follow a stack's delete, for a refusal's message."""
    if stack.action != vocab.STACK_DELETE:
        return ""
    if stack.status == vocab.STACK_IN_PROGRESS:
        return ("; only a delete may follow, and this one is still running ('sharectl "
                "stack show' follows it), or 'sharectl stack abandon' to keep its resources")
    return ("; only a delete may follow: 'sharectl stack delete' again once what stopped it "
            "is gone, or 'sharectl stack abandon' to keep its resources")


def _target_template(
    session: Session, stack: models.Stack, action: str, template: Template | None
) -> tuple[Template, int]:
    """The template to converge to and its id (stored now unless it is a
    rollback to a template kept from before)."""
    if action in (vocab.STACK_CREATE, vocab.STACK_UPDATE):
        if template is None:
            raise InvalidStackAction(f"{action} needs a template")
    elif action == vocab.STACK_DELETE:
        template = Template.empty()
    else:  # ROLLBACK: to the last template that completed
        completed = stack.status == vocab.STACK_COMPLETE
        target = stack.template_id if completed else stack.prev_template_id
        if target is not None:
            stored = db_stacks.template_get_tx(session, target)
            if stored is not None:
                return template_from_dict(stored), target
        template = Template.empty()  # nothing ever completed: roll back to nothing
    return template, db_stacks.template_create_tx(session, template.to_dict(), stack.id)


def prepare_traversal_tx(
    session: Session,
    stack: models.Stack,
    action: str,
    template: Template | None = None,
    timeout_seconds: int | None = None,
    event: bool = True,
    guard: Guard | None = None,
) -> Traversal:
    """Prepare a traversal in the caller's transaction (see the module doc).

    ``stack`` is the row as the caller saw it: its ``current_traversal`` is
    the one this preparation expects to replace. ``template`` is a validated
    template for CREATE and UPDATE; DELETE converges to the empty template
    and ROLLBACK to the last template that completed (both ignore it).
    ``timeout_seconds`` replaces the stack's timeout (0: none; None: keep it).
    ``event`` False: the caller records the stack's new status as an event
    itself (with a reason of its own, in the same transaction).
    ``guard``: called once the nodes are settled; what it raises refuses the
    traversal, nothing written.
    Raises :class:`TraversalLost` (nothing written), InvalidStackAction,
    StackNotFound.
    """
    previous = stack.current_traversal
    with session.begin_nested():
        sync_points.delete_all_tx(session, stack.id)
        locked = db_stacks.stack_get_tx(session, stack.id, lock="update")
        if locked is None:
            raise db_stacks.StackNotFound(f"stack {stack.id} does not exist")
        if locked.current_traversal != previous:
            raise TraversalLost(
                f"stack {locked.name!r} moved to traversal {locked.current_traversal} "
                f"before this {action} could replace {previous}"
            )
        _check_action(locked, action)
        result = _prepare_locked(session, locked, action, template, previous, timeout_seconds,
                                 event, guard)
    return result


def _prepare_locked(
    session: Session,
    stack: models.Stack,
    action: str,
    template: Template | None,
    previous: str | None,
    timeout_seconds: int | None = None,
    event: bool = True,
    guard: Guard | None = None,
) -> Traversal:
    template, template_id = _target_template(session, stack, action, template)
    # The last template that completed stays the rollback target while
    # traversals that have not completed come and go — a rollback included:
    # a rollback of a COMPLETE stack that is superseded (by another rollback,
    # say) must still lead back to that stack's template, not past it.
    completed = stack.status == vocab.STACK_COMPLETE
    prev_template_id = stack.template_id if completed else stack.prev_template_id

    rows = [
        r for r in db_stacks.resource_list_tx(session, stack.id)
        # done, waiting for purge
        if not (r.action == vocab.STACK_DELETE and r.status == vocab.STACK_COMPLETE)
    ]
    chosen_rows, replaced_rows = choose_rows(rows, template, template_id, stack.template_id)

    # Rows for resources without a usable row; a type change replaces the old row.
    replaces = {name: old.id for name, old in replaced_rows.items()}
    new_names = [name for name in template.resources if name not in chosen_rows]
    chosen = {name: row.id for name, row in chosen_rows.items()}
    chosen.update(new_stack_rows.insert_tx(session, stack.id, template_id, [
        (name, template.resources[name].type, replaces.get(name)) for name in new_names]))
    deps = template.dependencies()
    # A new row requires what its resource requires, so that should this
    # traversal be cut short, the next one still cleans up in order.
    requires = {chosen[name]: sorted(chosen[d] for d in deps[name]) for name in new_names}
    new_stack_rows.require_tx(session, {rid: req for rid, req in requires.items() if req})
    for name, old in replaced_rows.items():
        db_stacks.resource_update_tx(
            session, old.id, {"replaced_by": None}, {"replaced_by": chosen[name]}
        )

    graph = build_traversal_graph(
        {chosen[name]: [chosen[d] for d in deps[name]] for name in template.resources},
        [ExistingResource(r.id, tuple(r.requires or ()), r.replaces) for r in rows]
        + [ExistingResource(chosen[n], tuple(requires[chosen[n]]), replaces.get(n))
           for n in new_names],
    )

    traversal_id = str(uuid.uuid4())
    values: dict[str, object] = {
        "action": action,
        "template_id": template_id,
        "prev_template_id": prev_template_id,
        "current_deps": graph.to_json(),
        "traversal_started_at": api.DB_NOW,  # the stack's timeout counts from it
    }
    if timeout_seconds is not None:
        values["timeout_seconds"] = timeout_seconds or None
    # Nodes whose check would change nothing, settled here (settle.py).
    settled = settle.settle_tx(session, action, template, graph, chosen_rows, deps)
    if guard is not None:
        guard(Prepared(stack, rows, settled))
    reports = settled.reports(graph)
    complete = len(graph) == len(settled)
    if complete:
        # Nothing to do, and no node would ever report: finish here, or the
        # stack would wait IN_PROGRESS forever.
        what = "nothing to do" if not settled else "nothing changed"
        values.update(status=vocab.STACK_COMPLETE,
                      status_reason=f"Stack {action} completed ({what})")
        if action == vocab.STACK_DELETE:
            values["deleted_at"] = models.utcnow()
    else:
        values.update(status=vocab.STACK_IN_PROGRESS, status_reason=f"Stack {action} started")
        # Points for the nodes to traverse only: a settled node's is never
        # read (its check never runs), and at 1 % changed that is 99 % of them.
        roots = graph.roots()
        sync_points.create_tx(
            session, stack.id, traversal_id,
            ((n.resource_id, n.is_update) for n in graph if n not in settled),
            reported=reports, roots=[r.key for r in roots if r not in settled],
            settled_roots=sum(1 for r in roots if r in settled),
        )
    if settled.rows:
        db_stacks.resources_settle_tx(session, settled.rows, template_id)
    if not db_stacks.stack_swap_traversal_tx(session, stack.id, previous, traversal_id, values,
                                             event):
        # Not reachable while the stack row is locked above; kept because the
        # swap, not the lock, is what the design promises.
        raise TraversalLost(f"stack {stack.id}: traversal {previous} was replaced concurrently")
    if complete:
        stack_purge.purge_tx(session, stack.id)

    leaves = () if complete else tuple(sorted(
        settled.ready(graph) if settled else graph.leaves(),
        key=lambda n: (not n.is_update, n.resource_id)))
    api.requests_add_tx(session, vocab.STACK_RESOURCE, vocab.ACTION_CHECK, [
        (str(leaf.resource_id), check_request_args(
            stack.id, traversal_id, leaf,
            reports.get((str(leaf.resource_id), leaf.is_update)) if leaf.is_update else None))
        for leaf in leaves])
    LOG.info(
        "stack %s: %s traversal %s prepared: %d nodes (%d settled), %d triggered, %d new rows",
        stack.name, action, traversal_id, len(graph), len(settled), len(leaves), len(new_names),
    )
    return Traversal(
        stack_id=stack.id,
        traversal_id=traversal_id,
        action=action,
        template_id=template_id,
        template=template,
        graph=graph,
        names={**{r.id: r.name for r in rows}, **{chosen[n]: n for n in new_names}},
        chosen=chosen,
        created=tuple(sorted(chosen[n] for n in new_names)),
        leaves=leaves,
        complete=complete,
        settled=frozenset(settled.data),
    )


# Helpers for the check-resource workflow ---------------------------------------------


def load_traversal_graph(stack: models.Stack) -> Graph:
    """The graph of the stack's current traversal, from ``current_deps``."""
    return Graph.from_json(stack.current_deps)


def graph_dot(db: Database, stack: models.Stack) -> str:
    """DOT source of the stack's current traversal (``sharectl stack graph``)."""
    names = {r.id: r.name for r in db_stacks.resource_list(db, stack.id)}
    return load_traversal_graph(stack).to_dot(names, title=stack.name)


def node_ready(graph: Graph, node: tuple[int, bool], input_data: Mapping[str, JSONValue] | None
               ) -> bool:
    """Whether every predecessor of ``node`` has reported (doc/specs.rst, spec 001: the check
    before retriggering a node in a newer traversal)."""
    return sync_points.is_ready(input_data or {}, graph.requires_keys(node))


__all__ = [
    "InvalidStackAction",
    "PrepareError",
    "Traversal",
    "TraversalLost",
    "check_request_args",
    "choose_rows",
    "enqueue_check_tx",
    "graph_dot",
    "load_traversal_graph",
    "node_ready",
    "prepare_traversal_tx",
]
