"""Resuming traversals cut by a crash.

A check request claimed by an engine that died stays ``running`` (host-less
and ``*@backend`` ones: reconciliation leaves them) or is marked
``abandoned`` by reconciliation (``host@backend`` ones). Either way nothing
would ever run that node again, and the stack would stay IN_PROGRESS — what
Heat did until the next user update. :meth:`Resumer.run_once` queues a copy
of each such request, once (the old row is marked ``resumed as request N``
in the same transaction, conditionally, so engines resuming at once queue
one copy).

Order matters: a resumed check must find its physical resource settled. So a
request is resumed only when none of its rows' physical resources is in a
transient status — on the engine's start that is after the startup
reconciliation pass (:meth:`Resumer.after_startup` queues the first run on
the pass runner's single worker, behind the pass), later after a peer's
pass, since :meth:`Resumer.run_once` also runs periodically. While a
request waits on a transient resource, the resumer asks that resource's host
for another reconciliation pass now and then: a pass skips a resource whose
tooz lock the dead engine still holds (Redis keeps it until the lock times
out). Requests whose host is down wait for it.

The periodic run is also the safety net of the check workflow: a check that
could not even record its failure (the database went away) ends ``failed``;
if its stack still waits on that traversal, the stack is marked FAILED. And
a check this engine claimed but no longer runs (its outcome was lost) is
resumed like a dead engine's.
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

from oslo_log import log as logging
from sharemgr.db import models as M
from sharemgr.db import stack_work as ws
from sharemgr.db import stacks
from sharemgr.db.engine import Database
from sharemgr.db.stacks import IN_PROGRESS
from sharemgr.manager.convergence import physical as phys
from sharemgr.manager.convergence.worker import Worker
from sharemgr.manager.coordination import Coordinator

LOG = logging.getLogger(__name__)

INTERVAL = 5.0  # seconds between periodic runs
OWN_STALE_AFTER = 60.0  # a check of this engine not in flight this long after its claim is lost
PASS_INTERVAL = 10.0  # seconds between reconciliation passes asked of one host


class Resumer:
    def __init__(self, db: Database, coordinator: Coordinator, engine_id: str,
                 worker: Worker) -> None:
        self.db = db
        self.coordinator = coordinator
        self.engine_id = engine_id
        self.worker = worker
        self._lock = threading.Lock()  # one run at a time per engine
        self._passes_asked: dict[str, float] = {}

    def run_once(self) -> dict[str, int]:
        """Resume what can be resumed; returns counts for the log and tests."""
        with self._lock:
            counts = {"resumed": 0, "waiting": 0, "passes_requested": 0, "failed_stacks": 0}
            # Requests first, membership second: an engine that joins and
            # claims in between is seen alive, never as a missing claimant.
            candidates = ws.checks_to_resume(self.db)
            alive = self.coordinator.engines()
            inflight = self.worker.inflight()
            busy_hosts: set[str] = set()
            for req in candidates:
                note = self._lost(req, alive, inflight)
                if note is None:
                    continue
                busy = self._busy_hosts(req)
                if busy:
                    counts["waiting"] += 1
                    busy_hosts |= busy
                    continue
                new = ws.resume_check(self.db, req, note)
                if new is not None:
                    counts["resumed"] += 1
                    LOG.info("check request %s (%s): resumed as request %s", req.id, note, new)
            counts["passes_requested"] = self._request_passes(busy_hosts)
            counts["failed_stacks"] = self._fail_orphans()
            if counts["resumed"] or counts["failed_stacks"] or counts["passes_requested"]:
                LOG.info("stack resumption: %s", counts)
            return counts

    def _lost(self, req: M.Request, alive: set[str], inflight: set[int]) -> str | None:
        """Why ``req`` will not finish by itself, or None if it may."""
        if req.status == "abandoned":
            return "abandoned by reconciliation"
        if req.engine_id not in alive:
            return f"engine {req.engine_id} died"
        if req.engine_id == self.engine_id and req.id not in inflight:
            claimed = req.claimed_at or M.utcnow()
            if M.utcnow() - claimed > datetime.timedelta(seconds=OWN_STALE_AFTER):
                return "its outcome was lost"
        return None

    def _busy_hosts(self, req: M.Request) -> set[str]:
        """Hosts ('host@backend') of the request's rows' physical resources
        that are mid-operation: the request waits until they are settled."""
        rid = (req.args or {}).get("resource_id")
        row = stacks.resource_get(self.db, int(rid)) if rid is not None else None
        rows = [row] if row is not None else []
        if row is not None and row.replaced_by is not None:
            new = stacks.resource_get(self.db, row.replaced_by)
            if new is not None:
                rows.append(new)
        busy = set()
        for r in rows:
            observed = phys.observe(self.db, r.type, r.physical_id)
            if observed.state == phys.BUSY:
                busy.add(observed.host or "")
        return busy

    def _request_passes(self, hosts: set[str]) -> int:
        """Ask each host for a reconciliation pass (as ``sharectl reconcile
        run`` does), at most every PASS_INTERVAL seconds. Its startup or peer
        pass may have skipped the resource: the dead engine's tooz lock can
        outlive it (Redis keeps it until ``lock_timeout``)."""
        now = time.monotonic()
        asked = 0
        for host in sorted({h.split("@", 1)[0] for h in hosts if h}):
            if now - self._passes_asked.get(host, -PASS_INTERVAL) < PASS_INTERVAL:
                continue
            self._passes_asked[host] = now
            if ws.request_reconcile(self.db, host, "stack resumption waits for "
                                    "a transient resource"):
                asked += 1
                LOG.info("asked host %s for a reconciliation pass: a cut stack check "
                         "waits for a resource in a transient status", host)
        return asked

    def _fail_orphans(self) -> int:
        failed = 0
        for req in ws.failed_checks(self.db):
            args = req.args or {}
            stack = ws.stack_head(self.db, args.get("stack_id", ""))
            if stack is None or stack.status != IN_PROGRESS or \
                    stack.current_traversal != args.get("traversal"):
                continue
            reason = f"check of resource {args.get('resource_id')} failed: {req.error}"
            if self.worker.fail_stack(stack.id, stack.current_traversal, reason):
                failed += 1
        return failed

    # Scheduling ------------------------------------------------------------------------------

    def after_startup(self, passes: Any) -> None:
        """Queue a run behind the startup reconciliation pass (the pass
        runner has one worker, so it runs when the pass is over)."""
        passes.executor.submit(self.run_safely)

    def start_periodic(self, stopping: threading.Event, interval: float = INTERVAL) -> None:
        def loop() -> None:
            while not stopping.wait(interval):
                self.run_safely()

        threading.Thread(target=loop, name="stack-resume", daemon=True).start()

    def run_safely(self) -> None:
        try:
            self.run_once()
        except Exception:  # the next run tries again
            LOG.exception("stack resumption failed")
