"""What this engine's checks are doing now, as the watchdog asks it: the check
requests they run, the rows they hold or are taking, the nodes whose reports
they are still writing. One lock guards the three: the request threads
update them, the watchdog's thread reads them."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable

from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence.graph import Node

Reporting = tuple[str, str, Node]  # (stack id, traversal, sender)


class Tracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight: set[int] = set()
        self._claims: collections.Counter[int] = collections.Counter()
        self._reporting: collections.Counter[Reporting] = collections.Counter()

    # Check requests ------------------------------------------------------------------

    def running(self, req_id: int) -> None:
        with self._lock:
            self._inflight.add(req_id)

    def finished(self, *req_ids: int) -> None:
        with self._lock:
            self._inflight.difference_update(req_ids)

    def inflight(self) -> set[int]:
        """Ids of the check requests this engine is running now."""
        with self._lock:
            return set(self._inflight)

    # Rows ----------------------------------------------------------------------------

    def claim(self, rid: int) -> None:
        """A check of this engine holds, or is taking, row ``rid``'s lock."""
        with self._lock:
            self._claims[rid] += 1

    def unclaim(self, rid: int) -> None:
        with self._lock:
            self._claims[rid] -= 1
            if self._claims[rid] <= 0:
                del self._claims[rid]

    def holds(self, rid: int) -> bool:
        """Whether a check of this engine holds (or is taking) row ``rid``'s lock."""
        with self._lock:
            return self._claims[rid] > 0

    def held_by_another(self, rid: int) -> bool:
        """Whether another check of this engine than the caller's (which has
        claimed it) holds or takes row ``rid``'s lock."""
        with self._lock:
            return self._claims[rid] > 1

    # Reports -------------------------------------------------------------------------

    def mark_reporting(self, stack_id: str, traversal: str,
                       work: Iterable[tuple[Node, dict[str, JSONValue] | None, list[Node]]],
                       add: bool = True) -> None:
        """``work``'s senders have reports left to write (or, ``add=False``,
        no longer)."""
        with self._lock:
            for sender, _data, _succs in work:
                key = (stack_id, traversal, sender)
                self._reporting[key] += 1 if add else -1
                if self._reporting[key] <= 0:
                    del self._reporting[key]

    def reporting(self) -> set[Reporting]:
        """``(stack id, traversal, node)`` of the nodes whose reports a check
        of this engine is still writing, a transaction after another (a wide
        fan-out, a clean-up reported for where it became ready): whose
        request, if they had one, is done already. The watchdog takes them
        for live, not stalled."""
        with self._lock:
            return set(self._reporting)
