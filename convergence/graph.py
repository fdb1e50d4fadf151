"""The traversal graph of a stack (doc/specs.rst, spec 003).

A node is ``(resource_id, is_update)``: the *update* node of a resource row
creates or updates it, its *clean-up* node deletes it when it is no longer
wanted (and is a no-op for a row the template still uses). An edge
``a -> b`` means "b runs after a": a is one of b's *requirements*
(:meth:`Graph.requires`), b is *required by* a (:meth:`Graph.required_by`).
A traversal starts at the :meth:`Graph.leaves` (nothing to wait for) and
ends at the :meth:`Graph.roots` (nothing waits for them), which report to the
stack's own SyncPoint.

The rules (:func:`build_traversal_graph`):

1. update nodes follow the template's dependencies: a resource is updated
   after everything it requires;
2. clean-up runs in reverse: a row is cleaned up after every row that
   required it (its stored ``requires``) has been cleaned up;
3. a row's clean-up comes after its own update;
4. a replaced row is cleaned up after its replacement's clean-up (and so after
   the replacement exists).

Everything here is O(nodes + edges): no per-node scans of the whole graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, cast

from oslo_log import log as logging
from sharemgr.common.jsontypes import JSONValue

LOG = logging.getLogger(__name__)

UPDATE = True
CLEANUP = False
_DIRECTION = {True: "update", False: "cleanup"}


class GraphJSON(TypedDict):
    """:meth:`Graph.to_json`'s form: nodes as ``[resource_id, is_update]``
    (a bool is an int), edges as ``[i, j]`` indexes into ``nodes``."""

    nodes: list[list[int]]
    edges: list[list[int]]


class Node(NamedTuple):
    resource_id: int
    is_update: bool

    @property
    def key(self) -> str:
        return node_key(self)

    def __str__(self) -> str:
        return node_key(self)


def node_key(node: tuple[int, bool]) -> str:
    """The string form of a node, ``"12:update"`` / ``"12:cleanup"``: the key a
    sender uses in SyncPoint input data (JSON keys must be strings)."""
    return f"{node[0]}:{_DIRECTION[bool(node[1])]}"


def resource_ids_in(data: Mapping[str, object] | None) -> set[int]:
    """The resource ids of the nodes of a stored graph (``Graph.to_json``'s
    shape), without building the graph."""
    nodes = cast("list[list[int]]", (data or {}).get("nodes") or [])
    return {int(node[0]) for node in nodes}


class GraphCycleError(ValueError):
    pass


class Graph:
    """A directed acyclic graph of :class:`Node` with both adjacency
    directions kept, so every query is O(degree)."""

    __slots__ = ("_requires", "_required_by", "_root_keys", "_keys")

    def __init__(self) -> None:
        self._requires: dict[Node, set[Node]] = {}
        self._required_by: dict[Node, set[Node]] = {}
        self._root_keys: frozenset[str] | None = None  # every root's report asks for it
        # requires_keys by node: a fan-in's every sender asks for its point's
        self._keys: dict[Node, frozenset[str]] = {}

    # Building ---------------------------------------------------------------

    def add_node(self, node: tuple[int, bool]) -> Node:
        node = Node(*node)
        if node not in self._requires:
            self._root_keys = None
            self._keys.clear()
            self._requires[node] = set()
            self._required_by[node] = set()
        return node

    def add_edge(self, before: tuple[int, bool], after: tuple[int, bool]) -> None:
        """``after`` runs once ``before`` is done."""
        before, after = self.add_node(before), self.add_node(after)
        if before == after:
            raise GraphCycleError(f"node {before} cannot require itself")
        self._requires[after].add(before)
        self._required_by[before].add(after)
        self._root_keys = None
        self._keys.clear()

    def remove_edge(self, before: tuple[int, bool], after: tuple[int, bool]) -> None:
        self._requires[Node(*after)].discard(Node(*before))
        self._required_by[Node(*before)].discard(Node(*after))
        self._root_keys = None
        self._keys.clear()

    # Queries ----------------------------------------------------------------

    def __contains__(self, node: object) -> bool:
        return node in self._requires

    def __len__(self) -> int:
        return len(self._requires)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._requires)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self._requires == other._requires

    def nodes(self) -> list[Node]:
        return sorted(self._requires)

    def edges(self) -> Iterator[tuple[Node, Node]]:
        """(before, after) pairs."""
        for after, reqs in self._requires.items():
            for before in reqs:
                yield before, after

    def requires(self, node: tuple[int, bool]) -> frozenset[Node]:
        """The nodes that must finish before ``node`` (its SyncPoint waits for them)."""
        return frozenset(self._requires[Node(*node)])

    def required_by(self, node: tuple[int, bool]) -> frozenset[Node]:
        """The nodes that wait for ``node`` (it reports to their SyncPoints)."""
        return frozenset(self._required_by[Node(*node)])

    def leaves(self) -> list[Node]:
        """Nodes that require nothing: the traversal starts with them."""
        return sorted(n for n, reqs in self._requires.items() if not reqs)

    def roots(self) -> list[Node]:
        """Nodes nothing requires: the stack's SyncPoint waits for them."""
        return sorted(n for n, deps in self._required_by.items() if not deps)

    def is_root(self, node: tuple[int, bool]) -> bool:
        return not self._required_by[Node(*node)]

    def requires_keys(self, node: tuple[int, bool]) -> frozenset[str]:
        """Sender keys ``node``'s SyncPoint must hear from before it is ready."""
        node = Node(*node)
        keys = self._keys.get(node)
        if keys is None:
            keys = self._keys[node] = frozenset(node_key(n) for n in self._requires[node])
        return keys

    def surely_before(self, a: Node, b: Node) -> bool:
        """Whether every traversal finishes ``a`` before it starts ``b``, as
        far as a look two edges back from ``b`` tells (``b`` requires ``a``,
        or requires a node that does: an update before its dependent's
        clean-up, say). False says only that this look did not tell."""
        reqs = self._requires[b]
        return a in reqs or any(a in self._requires[m] for m in reqs)

    def reported_before(self, sender: Node, node: Node) -> frozenset[Node] | None:
        """The other senders of ``node``'s point that have reported when
        ``sender`` reports to it, if the graph's order tells: each comes
        surely before ``sender`` or surely after it. None when one may run
        at the same time (two dependents' clean-ups of one row). A guess, as
        far as the points go (a sender's reports can be split over
        transactions, or sent twice): the write that relies on it checks
        it (``sync_points.blind_write_tx``)."""
        before = []
        for other in self._requires[node]:
            if other == sender:
                continue
            if self.surely_before(other, sender):
                before.append(other)
            elif not self.surely_before(sender, other):
                return None
        return frozenset(before)

    def sent(self, sender: Node, succ: Node, data: dict[str, JSONValue] | None
             ) -> tuple[dict[str, JSONValue] | None, dict[str, JSONValue] | None]:
        """What ``sender`` writes into ``succ``'s point, and what that point
        holds before, when the graph's order tells (``sync_tx``'s ``known``:
        a write without a read). A clean-up node reads nothing of its input:
        its point gets None from every sender, so what it holds before is
        the keys of the senders surely before this one (a chain's row: its
        update's, before its dependent's clean-up)."""
        if succ.is_update:
            return data, None
        before = self.reported_before(sender, succ)
        return None, None if before is None else dict.fromkeys(map(node_key, before))

    def cleanups_ahead(self, start: list[Node], limit: int) -> list[int]:
        """The rows of up to ``limit`` clean-up nodes of rows the traversal
        keeps: those of ``start`` and the clean-up nodes after them, breadth
        first (clean-ups follow only clean-ups), looking at no more than
        ``4 * limit`` nodes (a report reads them in one statement)."""
        out: list[int] = []
        queue = [n for n in start if not n.is_update]
        seen = set(queue)
        while queue and len(out) < limit and len(seen) <= 4 * limit:
            node = queue.pop(0)
            if (node.resource_id, True) in self:
                out.append(node.resource_id)
            for succ in sorted(self.required_by(node)):
                if succ not in seen and not succ.is_update:
                    seen.add(succ)
                    queue.append(succ)
        return out

    def root_keys(self) -> frozenset[str]:
        """Sender keys the stack's SyncPoint must hear from (kept until the
        graph changes: a stack of N roots asks N times)."""
        if self._root_keys is None:
            self._root_keys = frozenset(node_key(n) for n in self.roots())
        return self._root_keys

    def resource_ids(self) -> set[int]:
        return {n.resource_id for n in self._requires}

    def topological_order(self) -> list[Node]:
        """Every node after all it requires (Kahn's algorithm)."""
        order, left = _kahn(self)
        if left:
            raise GraphCycleError(f"cycle among {sorted(left)[:10]}")
        return order

    # Serialisation ------------------------------------------------------------

    def to_json(self) -> GraphJSON:
        """``{"nodes": [[id, is_update], ...], "edges": [[i, j], ...]}`` where
        ``[i, j]`` means nodes[i] runs before nodes[j]: compact even for
        thousands of nodes, and what ``stacks.current_deps`` stores."""
        nodes = self.nodes()
        index = {n: i for i, n in enumerate(nodes)}
        edges = sorted([index[b], index[a]] for b, a in self.edges())
        return {"nodes": [[n.resource_id, n.is_update] for n in nodes], "edges": edges}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Graph:
        # Not checked: the stored column is read back in the shape to_json wrote.
        graph = cls()
        if not data:
            return graph
        nodes = [graph.add_node((int(rid), bool(upd))) for rid, upd in data.get("nodes", [])]
        for i, j in data.get("edges", []):
            graph.add_edge(nodes[i], nodes[j])
        return graph

    def to_dot(self, names: Mapping[int, str] | None = None, title: str = "traversal") -> str:
        """Graphviz source; edges point from what runs first to what runs
        after. ``names`` maps resource ids to resource names for labels."""
        names = names or {}

        def esc(text: str) -> str:
            return text.replace("\\", "\\\\").replace('"', '\\"')

        def q(text: str) -> str:
            return f'"{esc(text)}"'

        lines = [f"digraph {q(title)} {{", "  rankdir=LR;", "  node [shape=box];"]
        for n in self.nodes():
            name = esc(names.get(n.resource_id, "?"))
            # \n inside a DOT string is a line break in the label.
            label = f'"{name}\\n{_DIRECTION[n.is_update]} #{n.resource_id}"'
            style = "" if n.is_update else ", style=dashed"
            lines.append(f"  {q(n.key)} [label={label}{style}];")
        for before, after in sorted(self.edges()):
            lines.append(f"  {q(before.key)} -> {q(after.key)};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _kahn(graph: Graph) -> tuple[list[Node], set[Node]]:
    indegree = {n: len(reqs) for n, reqs in graph._requires.items()}
    ready = sorted((n for n, d in indegree.items() if d == 0), reverse=True)
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for m in graph._required_by[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    return order, {n for n, d in indegree.items() if d > 0}


def _strongly_connected(graph: Graph, nodes: Iterable[Node]) -> list[set[Node]]:
    """Tarjan's algorithm (iterative: stacks of thousands of resources would
    exhaust Python's recursion limit), restricted to ``nodes``; returns the
    components with more than one node."""
    allowed = set(nodes)
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    on_stack: set[Node] = set()
    stack: list[Node] = []
    out: list[set[Node]] = []
    counter = 0
    for start in sorted(allowed):
        if start in index:
            continue
        work = [(start, iter(sorted(graph._required_by[start] & allowed)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph._required_by[child] & allowed))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExistingResource:
    """What the graph needs of an extant ``stack_resources`` row."""

    id: int
    requires: tuple[int, ...] = ()  # row ids it depended on when last updated
    replaces: int | None = None  # the row it replaces


def build_traversal_graph(
    update_requires: Mapping[int, Iterable[int]], existing: Iterable[ExistingResource]
) -> Graph:
    """The traversal graph.

    ``update_requires`` maps each row chosen for the new template to the rows
    chosen for the resources it requires in that template (the template's
    dependency graph, translated to row ids). ``existing`` is every extant
    row of the stack, chosen ones included (a row created for a new resource
    is extant too).
    """
    graph = Graph()
    existing = list(existing)
    extant = {r.id for r in existing}

    # 1. update nodes in dependency order.
    for rid, reqs in update_requires.items():
        graph.add_node((rid, UPDATE))
        for req in reqs:
            graph.add_edge((req, UPDATE), (rid, UPDATE))

    requires_edges: list[tuple[Node, Node]] = []
    replaces_edges: list[tuple[Node, Node]] = []
    for row in existing:
        cleanup = graph.add_node((row.id, CLEANUP))
        # 2. reverse order: what this row required is cleaned up after it.
        for req in row.requires:
            if req in extant and req != row.id:
                edge = (cleanup, Node(req, CLEANUP))
                graph.add_edge(*edge)
                requires_edges.append(edge)
        # 4. a replaced row after its replacement.
        if row.replaces in extant and row.replaces != row.id:
            edge = (cleanup, Node(row.replaces, CLEANUP))
            graph.add_edge(*edge)
            replaces_edges.append(edge)
        # 3. clean-up after update.
        if (row.id, UPDATE) in graph:
            graph.add_edge((row.id, UPDATE), cleanup)

    _break_cleanup_cycles(graph, requires_edges, replaces_edges)
    return graph


def _break_cleanup_cycles(
    graph: Graph,
    requires_edges: list[tuple[Node, Node]],
    replaces_edges: list[tuple[Node, Node]],
) -> None:
    """Stored ``requires`` lists come from different templates (a row last
    updated for template 1, another for template 2), so in odd histories the
    clean-up order they imply can loop. Update edges cannot (the template is
    acyclic and no clean-up node precedes an update node), so every cycle is
    among clean-up nodes. Heat raised and left the stack stuck; here the
    clean-up edges inside each cycle are dropped — first the ``requires``
    ones, then, should a cycle remain, the ``replaces`` ones — and a warning
    logged. The traversal then always terminates."""
    _, left = _kahn(graph)
    if not left:
        return
    for kind, edges in (("requires", requires_edges), ("replaces", replaces_edges)):
        components = _strongly_connected(graph, left)
        if not components:
            return
        member = {n: i for i, comp in enumerate(components) for n in comp}
        dropped = 0
        for before, after in edges:
            i = member.get(before)
            if i is not None and member.get(after) == i:
                graph.remove_edge(before, after)
                dropped += 1
        LOG.warning(
            "clean-up order of %d resources loops; dropped %d %s edges inside the loop(s)",
            sum(len(c) for c in components), dropped, kind,
        )
        _, left = _kahn(graph)
        if not left:
            return
    raise GraphCycleError(f"cycle among {sorted(left)[:10]}")  # pragma: no cover - impossible
