"""The traversal graph (doc/specs.rst, spec 003): rules, queries, JSON, DOT, large stacks."""

from __future__ import annotations

import json
import logging

import pytest
from sharemgr.convergence.graph import (
    ExistingResource,
    Graph,
    GraphCycleError,
    Node,
    build_traversal_graph,
    node_key,
)

U, C = True, False


def edges(graph):
    return set(graph.edges())


def test_node_keys():
    assert node_key((12, True)) == "12:update"
    assert node_key(Node(3, False)) == "3:cleanup"
    assert Node(4, False).key == "4:cleanup"


def test_create_chain():
    # data(1) <- snap(2) <- copy(3), all new rows requiring their dependencies.
    graph = build_traversal_graph(
        {1: [], 2: [1], 3: [2]},
        [ExistingResource(1), ExistingResource(2, (1,)), ExistingResource(3, (2,))],
    )
    assert edges(graph) == {
        (Node(1, U), Node(2, U)), (Node(2, U), Node(3, U)),  # rule 1
        (Node(1, U), Node(1, C)), (Node(2, U), Node(2, C)), (Node(3, U), Node(3, C)),  # rule 3
        (Node(3, C), Node(2, C)), (Node(2, C), Node(1, C)),  # rule 2
    }
    assert graph.leaves() == [Node(1, U)]
    assert graph.roots() == [Node(1, C)]
    assert graph.requires(Node(2, C)) == {Node(2, U), Node(3, C)}
    assert graph.required_by(Node(1, U)) == {Node(1, C), Node(2, U)}
    assert graph.requires_keys(Node(2, U)) == {"1:update"}
    assert graph.root_keys() == {"1:cleanup"}
    order = graph.topological_order()
    assert order.index(Node(3, U)) < order.index(Node(3, C)) < order.index(Node(1, C))


def test_which_senders_of_a_point_reported_before_another():
    """A clean-up point's senders are ordered when the graph says so within
    two edges: in a chain, a row's update comes before the clean-up of the
    row that requires it. Two dependents' clean-ups of one row are not
    ordered: nothing is known."""
    chain = build_traversal_graph(
        {1: [], 2: [1], 3: [2]},
        [ExistingResource(1), ExistingResource(2, (1,)), ExistingResource(3, (2,))],
    )
    assert chain.surely_before(Node(1, U), Node(2, C))
    assert not chain.surely_before(Node(2, C), Node(1, U))
    assert chain.reported_before(Node(1, U), Node(1, C)) == frozenset()
    assert chain.reported_before(Node(2, C), Node(1, C)) == {Node(1, U)}
    assert chain.reported_before(Node(3, C), Node(2, C)) == {Node(2, U)}
    # Two shares 2 and 3 on share 1: their clean-ups may run together.
    fork = build_traversal_graph(
        {1: [], 2: [1], 3: [1]},
        [ExistingResource(1), ExistingResource(2, (1,)), ExistingResource(3, (1,))],
    )
    assert fork.reported_before(Node(2, C), Node(1, C)) is None
    assert fork.reported_before(Node(1, U), Node(1, C)) == frozenset()
    # A row removed from the template (no update node): its dependent's
    # clean-up is its point's other sender; unordered with nothing, so known.
    removed = build_traversal_graph({2: []}, [ExistingResource(1), ExistingResource(2, (1,))])
    assert removed.reported_before(Node(2, C), Node(1, C)) == frozenset()


def test_update_with_replacement_and_removed_resource():
    # Extant: share 1 (kept), snapshot 2 (removed from the template, required 1),
    # share 3 replaced by the new row 4 (a type change found at preparation),
    # which requires 1.
    graph = build_traversal_graph(
        {1: [], 4: [1]},
        [
            ExistingResource(1),
            ExistingResource(2, (1,)),
            ExistingResource(3, (1,)),
            ExistingResource(4, (1,), replaces=3),
        ],
    )
    assert Node(2, U) not in graph and Node(3, U) not in graph  # no longer wanted
    assert {Node(2, C), Node(3, C)} <= set(graph)
    # Rule 4: the replaced row goes after its replacement's clean-up,
    # which itself waits for the replacement's update.
    assert (Node(4, C), Node(3, C)) in edges(graph)
    assert (Node(4, U), Node(4, C)) in edges(graph)
    # Rule 2: what required row 1 is cleaned up before row 1.
    for rid in (2, 3, 4):
        assert (Node(rid, C), Node(1, C)) in edges(graph)
    assert set(graph.leaves()) == {Node(1, U), Node(2, C)}
    assert graph.roots() == [Node(1, C)]


def test_delete_is_clean_up_only_in_reverse_order():
    graph = build_traversal_graph(
        {}, [ExistingResource(1), ExistingResource(2, (1,)), ExistingResource(3, (2, 99))]
    )
    assert all(not n.is_update for n in graph)
    assert graph.topological_order() == [Node(3, C), Node(2, C), Node(1, C)]  # 99 not extant
    assert graph.leaves() == [Node(3, C)] and graph.roots() == [Node(1, C)]


def test_empty_graph():
    graph = build_traversal_graph({}, [])
    assert len(graph) == 0 and graph.leaves() == [] and graph.roots() == []
    assert Graph.from_json(graph.to_json()) == graph
    assert Graph.from_json({}) == graph


def test_json_round_trip_is_exact_and_serialisable():
    graph = build_traversal_graph(
        {1: [], 2: [1], 5: [1, 2]},
        [ExistingResource(1), ExistingResource(2, (1,)), ExistingResource(5, (1, 2)),
         ExistingResource(7, (5,))],
    )
    data = json.loads(json.dumps(graph.to_json()))
    again = Graph.from_json(data)
    assert again == graph
    assert edges(again) == edges(graph)
    assert again.leaves() == graph.leaves() and again.roots() == graph.roots()


def test_to_dot():
    graph = build_traversal_graph({1: [], 2: [1]}, [ExistingResource(1), ExistingResource(2, (1,))])
    dot = graph.to_dot({1: "data", 2: 'odd "name"'}, title="web")
    assert dot.startswith('digraph "web" {')
    assert '"1:update" -> "2:update";' in dot
    assert '"2:cleanup" -> "1:cleanup";' in dot
    assert 'label="data\\nupdate #1"' in dot
    assert 'odd \\"name\\"' in dot
    assert dot.count("->") == len(list(graph.edges()))
    assert dot.rstrip().endswith("}")


def test_graph_refuses_self_edges_and_reports_cycles():
    graph = Graph()
    with pytest.raises(GraphCycleError):
        graph.add_edge((1, U), (1, U))
    graph.add_edge((1, U), (2, U))
    graph.add_edge((2, U), (1, U))
    with pytest.raises(GraphCycleError):
        graph.topological_order()


def test_cleanup_cycle_from_stored_requires_is_broken(caplog):
    # Rows last updated by different templates: 1 says it requires 2, 2 says
    # it requires 1. Heat raised and left the stack stuck; here the loop's
    # requires edges are dropped and the traversal can run.
    with caplog.at_level(logging.WARNING):
        graph = build_traversal_graph(
            {1: [], 2: [1], 3: []},
            [ExistingResource(1, (2,)), ExistingResource(2, (1,)),
             ExistingResource(3, (1,))],
        )
    order = graph.topological_order()
    assert len(order) == len(graph)
    assert (Node(1, U), Node(2, U)) in edges(graph)  # update order is kept
    assert (Node(3, C), Node(1, C)) in edges(graph)  # requires edges outside the loop too
    assert "loops" in caplog.text


def test_large_stack_is_linear():
    # A few thousand resources: a long chain, a wide fan-out and a wide
    # fan-in, plus a previous version of each chain row being replaced. This
    # only has to finish quickly; it would take minutes if any step were
    # quadratic. No timing is asserted.
    n = 3000
    update_requires = {i: ([i - 1] if i > 1 else []) for i in range(1, n + 1)}
    hub = n + 1
    update_requires[hub] = list(range(1, n + 1))  # fan-in: needs everything
    existing = [ExistingResource(i, tuple(update_requires[i])) for i in range(1, n + 2)]
    existing += [ExistingResource(10_000 + i, (), replaces=None) for i in range(1, n + 1)]
    existing += [ExistingResource(20_000 + i, (10_000 + i,), replaces=10_000 + i)
                 for i in range(1, n + 1)]
    graph = build_traversal_graph(update_requires, existing)
    assert len(graph) == (n + 1) * 2 + 2 * n
    order = graph.topological_order()
    assert len(order) == len(graph)
    assert len(graph.requires(Node(hub, U))) == n
    again = Graph.from_json(json.loads(json.dumps(graph.to_json())))
    assert again == graph
    assert len(graph.to_dot()) > 0
