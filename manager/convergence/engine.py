"""The convergence engine inside ``share-manager``: the ``check_resource``
handler, the hosts it claims check requests for, and resumption."""

from __future__ import annotations

import threading
from typing import Any

from sharemgr.db.engine import Database
from sharemgr.manager.convergence import prepare as P
from sharemgr.manager.convergence.physical import ANY_HOST, Placement
from sharemgr.manager.convergence.resume import Resumer
from sharemgr.manager.convergence.worker import Worker
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import Operations


class StackEngine:
    def __init__(self, db: Database, operations: Operations, coordinator: Coordinator,
                 engine_id: str, host: str, drivers: dict[str, Any]) -> None:
        self.drivers = drivers
        placement = Placement(host, {b: bool(getattr(d, "driver_handles_share_servers", False))
                                     for b, d in drivers.items()})
        self.worker = Worker(db, operations, coordinator, engine_id, placement)
        self.resumer = Resumer(db, coordinator, engine_id, self.worker)

    def register(self, handlers: Any) -> None:
        """Check requests without a host are for any engine (hostless)."""
        handlers.add(P.REQUEST_RESOURCE_TYPE, P.CHECK_RESOURCE, self.worker, hostless=True)

    def claim_hosts(self) -> list[str]:
        """'*@backend' for each backend served: checks that create a resource
        on a backend, wherever its host."""
        return [f"{ANY_HOST}@{backend}" for backend in self.drivers]

    def start(self, passes: Any, stopping: threading.Event) -> None:
        """Resume cut traversals after the startup reconciliation pass (at once
        if there is none), then periodically."""
        if passes is not None:
            self.resumer.after_startup(passes)
        else:
            threading.Thread(target=self.resumer.run_safely, daemon=True).start()
        self.resumer.start_periodic(stopping)
