"""The order a stack's resources are made in: each after everything it
requires, and on a cycle an error naming the resources in it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sharemgr.convergence.resource_types import TemplateError


def toposort(requires: Mapping[str, Iterable[str]]) -> list[str]:
    """Kahn's algorithm, O(n + e). On a cycle, name the resources in it."""
    indegree = {n: 0 for n in requires}
    dependants: dict[str, list[str]] = {n: [] for n in requires}
    for n, reqs in requires.items():
        for r in reqs:
            indegree[n] += 1
            dependants[r].append(n)
    ready = [n for n in requires if indegree[n] == 0]
    ready.reverse()  # pop() from the end keeps the template's order
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for d in reversed(dependants[n]):
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
    if len(order) != len(requires):
        cycle = find_cycle(requires, indegree)
        raise TemplateError(
            f"resource {cycle[0]!r}: dependency cycle: "
            + " requires ".join(repr(n) for n in cycle)
        )
    return order


def find_cycle(requires: Mapping[str, Iterable[str]], indegree: Mapping[str, int]) -> list[str]:
    """One cycle among the nodes Kahn's algorithm could not order: every such
    node has a requirement that is also unordered, so walking requirements
    must come back to a node already on the path."""
    left = {n for n, d in indegree.items() if d > 0}
    start = min(left)
    path, index = [start], {start: 0}
    while True:
        nxt = min(r for r in requires[path[-1]] if r in left)
        if nxt in index:
            return path[index[nxt]:] + [nxt]  # each element requires the next
        index[nxt] = len(path)
        path.append(nxt)

