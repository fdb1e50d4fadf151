"""Settling unchanged nodes in bulk, at a traversal's preparation (issue 29:
an update costs what it changes).

An update node whose check would find nothing to do — its row complete and
free, its definition resolving to the properties the row holds, its physical
resource there and unchanged, and every predecessor settled too — is
*settled* by the preparation: its report (the data it would pass on) is
written into its successors' SyncPoints as they are inserted, its row's
``template_id`` set as its check would, and no check request is written for
it. A clean-up node of a row the traversal keeps, whose predecessors are all
settled, is settled likewise (its check only reports). Only the other nodes
— the changed ones and everything downstream of them — are traversed.

The rule is the one the check applies (``decide.decide``: NOOP), read in
bulk: the resource rows the preparation loaded, and one read per 500 shares
for the physical side. Anything it cannot tell in bulk (a type not observed
from its own rows, a row some engine holds, a replacement under way, a
property that does not resolve) is left to a check, as before. Settling
happens in the preparation's transaction: it commits with the traversal's
swap or not at all, so the crash guarantees are those of the preparation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from sharemgr.common import vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.properties import (
    ResourceData,
    data_by_name,
    diff_properties,
    resolve_properties,
)
from sharemgr.convergence.template import Template
from sharemgr.db import models, status_reads
from sharemgr.manager import kinds
from sqlalchemy.orm import Session

# The actions whose update nodes may be settled: a create has nothing to
# settle, a delete no update node.
SETTLING_ACTIONS = frozenset({vocab.STACK_UPDATE, vocab.STACK_ROLLBACK})
# CHECK COMPLETE: a mark-unhealthy reset; CHECK FAILED (marked unhealthy)
# is never settled, its check replaces it (status COMPLETE is required).
_SETTLED_ACTIONS = frozenset({vocab.STACK_CREATE, vocab.STACK_UPDATE, vocab.STACK_CHECK})


@dataclass(frozen=True)
class Settled:
    """What :func:`settle_tx` found: the settled nodes and what each passes
    on (None: a clean-up node's report), and the rows whose ``template_id``
    is to be recorded."""

    data: Mapping[Node, dict[str, JSONValue] | None] = field(default_factory=dict)
    rows: tuple[int, ...] = ()

    def __contains__(self, node: object) -> bool:
        return node in self.data

    def __len__(self) -> int:
        return len(self.data)

    def reports(self, graph: Graph) -> dict[tuple[str, bool], dict[str, JSONValue]]:
        """The reports the points of the nodes left to traverse start with
        (``sync_points.create_tx``'s ``reported``): a settled node's to each
        of its successors that is not settled too — its data to an update
        node, None to a clean-up node, which reads nothing. Settled nodes
        and settled roots' points at the stack have no point (the stack's
        point counts those roots)."""
        out: dict[tuple[str, bool], dict[str, JSONValue]] = {}
        for node, data in self.data.items():
            for succ in graph.required_by(node):
                if succ not in self.data:
                    out.setdefault((str(succ.resource_id), succ.is_update), {})[node.key] = \
                        data if succ.is_update else None
        return out

    def ready(self, graph: Graph) -> list[Node]:
        """The nodes left to traverse whose predecessors are all settled
        (the leaves among them too): those the preparation triggers."""
        return [n for n in graph if n not in self.data
                and all(p in self.data for p in graph.requires(n))]


def settle_tx(
    session: Session,
    action: str,
    template: Template,
    graph: Graph,
    chosen: Mapping[str, models.StackResource],
    deps: Mapping[str, Collection[str]],
) -> Settled:
    """The nodes of ``graph`` to settle (see the module doc). ``chosen``:
    the existing rows the update nodes work on, by resource name (not the
    rows this preparation inserted); ``deps``: the template's dependencies."""
    if action not in SETTLING_ACTIONS:
        return Settled()
    candidates = {row.id: (name, row) for name, row in chosen.items() if _plain(row)}
    if not candidates:
        return Settled()
    shares = status_reads.shares_with_status_tx(
        session, (row.physical_id or "" for _n, row in candidates.values()
                  if row.type == vocab.SHARE))
    row_of_name = {name: row.id for name, row in chosen.items()}
    data: dict[Node, dict[str, JSONValue] | None] = {}
    rows: list[int] = []
    for node in graph.topological_order():
        preds = graph.requires(node)
        if any(p not in data for p in preds):
            continue
        if not node.is_update:
            if node.resource_id in candidates and (node.resource_id, True) in data:
                data[node] = None  # a kept row's clean-up: it only reports
            continue
        found = candidates.get(node.resource_id)
        if found is None:
            continue
        name, row = found
        if {row_of_name.get(d) for d in deps.get(name, ())} != {p.resource_id for p in preds}:
            continue
        sent = _unchanged(template, name, row, shares, {p.key: data[p] for p in preds})
        if sent is not None:
            data[node] = sent
            rows.append(row.id)
    return Settled(data, tuple(rows))


def _plain(row: models.StackResource) -> bool:
    """A row whose update node may be settled if nothing changed: complete,
    nobody's, not part of a replacement, with a physical resource of a type
    observed in bulk."""
    return (row.type == vocab.SHARE and row.physical_id is not None
            and row.action in _SETTLED_ACTIONS and row.status == vocab.STACK_COMPLETE
            and row.engine_id is None and row.replaced_by is None and row.replaces is None)


def _unchanged(template: Template, name: str, row: models.StackResource,
               shares: Mapping[str, tuple[object, object | None]],
               input_data: Mapping[str, object]) -> dict[str, JSONValue] | None:
    """What the update node of ``row`` passes on if its check would change
    nothing on the row or its resource (``decide``'s NOOP, and the row's
    properties, attributes and dependencies as the check would write them);
    else None."""
    found = shares.get(row.physical_id or "")
    if found is None or found[1] is None:
        return None
    observed = kinds.observe_rows(row.type, {models.Share: found[0],
                                             models.ShareInstance: found[1]})
    if observed is None or observed.state != kinds.OK:
        return None
    try:
        props = resolve_properties(template.resources[name], data_by_name(input_data))
    except Exception:  # the check fails the node with the reason
        return None
    diff = diff_properties(row.type, {**(row.properties or {}), **observed.actual}, props)
    if diff.changed or diff.replace or props != (row.properties or {}) \
            or dict(observed.attributes) != (row.attributes or {}):
        return None
    requires = sorted({d["resource_id"] for d in input_data.values()
                       if isinstance(d, Mapping) and d.get("resource_id") is not None})
    if sorted(row.requires or ()) != requires:
        return None
    return ResourceData(name, row.id, row.physical_id,
                        observed.attributes).passed_on(template)
