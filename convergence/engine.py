"""The convergence engine inside ``share-manager``: the ``check_resource``
handler, the hosts it claims check requests for, and the watchdog."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sharemgr.common import vocab
from sharemgr.convergence.physical import ANY_HOST, Placement
from sharemgr.convergence.watchdog import Watchdog
from sharemgr.convergence.worker import Worker
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import Operations
from sharemgr.manager.runner import RequestHandler


# The daemon's handler registry and the reconciliation's pass runner, by
# what the engine calls: both live in layers convergence may not import.
class HandlerRegistry(Protocol):
    def add(self, rtype: str, action: str, handler: RequestHandler,
            hostless: bool = False) -> None: ...


class Passes(Protocol):
    def then(self, fn: Callable[[], object], what: str) -> None: ...


class StackEngine:
    def __init__(self, db: Database, operations: Operations, coordinator: Coordinator,
                 engine_id: str, host: str, drivers: dict[str, ShareDriver]) -> None:
        self.drivers = drivers
        # Grows when a backend's set-up passes late (add_backend).
        self._dhss = {b: bool(getattr(d, "driver_handles_share_servers", False))
                      for b, d in drivers.items()}
        placement = Placement(host, self._dhss)
        self.worker = Worker(db, operations, coordinator, engine_id, placement)
        self.watchdog = Watchdog(db, coordinator, engine_id, self.worker)

    def register(self, handlers: HandlerRegistry) -> None:
        """Check requests without a host are for any engine (hostless)."""
        handlers.add(vocab.STACK_RESOURCE, vocab.ACTION_CHECK, self.worker,
                     hostless=True)

    def take_checks_when(self, may: Callable[[], bool]) -> None:
        """A check's report takes the next pending check, or claims a
        successor it made ready, to run next in its thread, whenever
        ``may()`` (the request loop's ``may_claim``)."""
        self.worker.reporter.take_next = may
        self.worker.reporter.may_chain = may

    def add_backend(self, backend: str, driver: ShareDriver) -> list[str]:
        """A backend that came up after start (its driver is in ``drivers``
        already); returns the hosts to claim check requests for."""
        self._dhss[backend] = bool(getattr(driver, "driver_handles_share_servers", False))
        return [f"{ANY_HOST}@{backend}"]

    def claim_hosts(self) -> list[str]:
        """'*@backend' for each backend served: checks that create a resource
        on a backend, wherever its host."""
        return [f"{ANY_HOST}@{backend}" for backend in self.drivers]

    def start(self, passes: Passes | None) -> None:
        """Arm the watchdog once the startup reconciliation pass has settled
        what a crash left (the pass runner has one worker: this runs after
        the pass), at once if there is no pass. It runs as a periodic task
        of the service (``run_safely``)."""
        if passes is not None:
            passes.then(self.watchdog.arm, "arming the stack watchdog")
        else:
            self.watchdog.arm()
