"""When passes run: deferred after start, on request, after a peer's death.

Passes of one engine run one at a time on a single futurist worker, so a
startup pass, a manual one and a peer one never overlap in one process (the
per-resource try-locks keep engines apart).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Never

import futurist
import tenacity
from futurist import waiters
from oslo_log import log as logging
from sharemgr.common import tasks, vocab
from sharemgr.common.outcome import Outcome
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.manager import kinds
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.op_errors import OperationFailed
from sharemgr.manager.outage import Backoff
from sharemgr.reconcile import drift as drift_mod
from sharemgr.reconcile.reconciler import Reconciler, interrupts
from sharemgr.reconcile.scan import Candidate
from tooz import coordination

LOG = logging.getLogger(__name__)

PassResult = dict[str, object] | None  # a pass's summary; None when it did not run
# What the pass worker has been given: passes, re-observations, ``then``'s calls.
Pending = futures.Future[PassResult] | futures.Future[None] | futures.Future[object]



def engine_host(engine_id: str) -> str:
    """'<host>.<uuid4>' → '<host>' (hosts may contain dots; uuids have 36 chars)."""
    return engine_id[:-37] if len(engine_id) > 37 and engine_id[-37] == "." else ""


class PassRunner:
    def __init__(self, reconciler: Reconciler, stopping: threading.Event) -> None:
        self.reconciler = reconciler
        self.stopping = stopping
        # A pass under way when the engine is asked to stop starts no more
        # driver calls: they outlived graceful_shutdown_timeout one by one.
        reconciler.stopping = stopping
        self.executor = futurist.ThreadPoolExecutor(max_workers=1)
        self._futures: list[Pending] = []
        # Until the startup pass begins, a peer of this host that leaves (this
        # engine's own previous life, killed) is the startup pass's to settle.
        self._startup_pending = threading.Event()
        # A periodic pass is queued or running: no second one.
        self._periodic_queued = threading.Event()
        # Drift checks (reconcile/drift.py) run on the same worker, never
        # during a pass; set by the daemon.
        self.drift: drift_mod.DriftChecker | None = None
        self._drift_queued = threading.Event()

    def _after(self, delay: float, trigger: str, dry_run: bool = False) -> dict[str, object] | None:
        if delay and self.stopping.wait(delay):
            return None
        if self.stopping.is_set():
            return None
        if trigger == "startup":
            self._startup_pending.clear()
        try:
            if trigger.startswith("manual:") or trigger.startswith("drift:"):
                return self._run(trigger, dry_run)  # someone waits: tell them at once
            # An automatic pass the database or coordination interrupts runs
            # again once they are back (one WARNING for the outage, no traceback).
            backoff = Backoff(f"reconciliation pass ({trigger})", 1.0, 30.0)
            def wait(state: tenacity.RetryCallState) -> float:
                exc = state.outcome.exception() if state.outcome else None
                return backoff.failed(exc or RuntimeError("a try failed"))

            def sleep(seconds: float) -> None:
                self.stopping.wait(seconds)

            result = tenacity.Retrying(
                retry=tenacity.retry_if_exception(interrupts),
                wait=wait,
                stop=lambda _state: self.stopping.is_set(),
                sleep=sleep,
                reraise=True,
            )(self._run_unless_stopping, trigger, dry_run)
            backoff.recovered()
            return result
        finally:
            if trigger == "drift":
                self._drift_queued.clear()
            if trigger == "periodic":
                # Cleared once it is over: a tick during the pass would see
                # the requests it is about to take over and queue another.
                self._periodic_queued.clear()

    def _run(self, trigger: str, dry_run: bool) -> dict[str, object] | None:
        if trigger.startswith("drift"):
            if self.drift is None:
                raise OperationFailed("this engine does not check drift")
            return self.drift.run(trigger, dry_run)
        return self.reconciler.run(trigger, dry_run)

    def _run_unless_stopping(self, trigger: str, dry_run: bool) -> dict[str, object] | None:
        return None if self.stopping.is_set() else self._run(trigger, dry_run)

    def defer_startup(self, wait_seconds: int) -> futures.Future[PassResult]:
        LOG.info("startup reconciliation in %ss", wait_seconds)
        self._startup_pending.set()
        return self._submit(wait_seconds, "startup")

    @property
    def startup_pending(self) -> bool:
        return self._startup_pending.is_set()

    def periodic(self) -> None:
        """A periodic tick (daemon periodics, ``periodic_reconciliation_interval``):
        one indexed query for running requests of this host whose lease has
        expired; only when there are some, a pass (trigger ``periodic``)
        settles them by the same rules as the startup pass."""
        if self.stopping.is_set() or self._periodic_queued.is_set() or \
                self._startup_pending.is_set():
            return  # the pass already queued (or the startup pass) will see them
        rec = self.reconciler
        stuck = db_leases.expired_leases(rec.db, rec.hosts)
        if not stuck:
            return
        LOG.warning("%d operation(s) of %s past their lease (requests %s): periodic "
                    "reconciliation pass", len(stuck), rec.host,
                    ", ".join(str(r.id) for r in stuck[:10]))
        self._periodic_queued.set()
        self._submit(0, "periodic")

    def drift_periodic(self) -> None:
        """A periodic drift check (``drift_check_interval``); one at a time."""
        if self.drift is None or self.stopping.is_set() or self._drift_queued.is_set():
            return
        self._drift_queued.set()
        self._submit(0, "drift")

    def run_soon(self, trigger: str) -> futures.Future[PassResult]:
        """A pass after those asked for so far (e.g. 'backend:<name>' when a
        backend's set-up passed after start)."""
        return self._submit(0, trigger)

    def then(self, fn: Callable[[], object], what: str) -> None:
        """Run ``fn`` once the passes asked for so far are done (the worker
        is single: it runs after them), e.g. arming the stack watchdog after
        the startup pass."""
        fut = tasks.submit_logged(self.executor, fn, what=what)
        self._futures = [f for f in self._futures if not f.done()] + [fut]

    def handle_request(self, req: models.Request) -> Outcome[Never]:
        """Handler of a 'reconcile run' request (sharectl reconcile run) and
        of a 'reconcile drift' one (a drift check)."""
        dry_run = bool((req.args or {}).get("dry_run"))
        drift = getattr(req, "action", vocab.ACTION_RUN) == vocab.ACTION_DRIFT
        trigger = f"drift:{req.id}" if drift else f"manual:{req.id}"
        if drift and self.drift is None:
            return Outcome.failed("this engine does not check drift")
        fut = self._submit(0, trigger, dry_run)
        try:
            fut.result()
        except Exception as exc:
            # Logged with its traceback and recorded as a failed pass already:
            # the request only needs the reason (sharectl prints it).
            lines = str(exc).strip().splitlines()
            return Outcome.failed(f"{type(exc).__name__}: {lines[0] if lines else ''}")
        return Outcome.done()

    def watch_peers(self, coordinator: Coordinator | None, host: str, engine_id: str,
                    grace: int) -> None:
        """Reconcile what a peer of this host leaves behind when it drops out
        of the engines group (a crash without restart)."""

        def left(event: coordination.MemberLeftGroup) -> None:
            member = event.member_id.decode() if isinstance(event.member_id, bytes) \
                else event.member_id
            if member != engine_id and engine_host(member) == host:
                if self.stopping.is_set():
                    return  # this engine stops too; the next start's pass settles it
                if self._startup_pending.is_set():
                    LOG.info("engine %s of this host left the group; the startup pass, "
                             "yet to run, settles what it left", member)
                    return
                LOG.warning("engine %s of this host left the group; reconciling what it "
                            "left in %ss", member, grace)
                self._submit(grace, f"peer:{member}")

        if coordinator is None:
            raise RuntimeError("watch_peers: the engine has no coordinator yet")
        coordinator.watch_leave(left)

    def reobserve(self, rtype: str, ident: str) -> futures.Future[None] | None:
        """Ask the backend about a resource whose outcome could not be
        written (doc/reconciliation.rst, "Fencing"), on the pass worker."""
        if self.stopping.is_set():
            return None
        fut = tasks.submit_logged(self.executor, self._reobserve, rtype, ident,
                                  what=f"re-observation of {rtype} {ident}")
        self._futures = [f for f in self._futures if not f.done()] + [fut]
        return fut

    def _reobserve(self, rtype: str, ident: str) -> None:
        db = self.reconciler.db
        kind = kinds.kind(rtype)
        row = db_api.get(db, kind.model, ident)
        if row is None or row.status != vocab.AVAILABLE:
            # Transient: its new owner (a request, a reconciliation pass)
            # settles it from the backend; an error status stays for the user.
            LOG.info("re-observing %s %s: %s; left to its owner", kind.what, ident,
                     "gone" if row is None else row.status)
            return
        if self.drift is None or rtype not in drift_mod.TARGET:
            LOG.warning("%s %s: a late outcome was not written and this engine checks no "
                        "drift of it: 'sharectl reconcile drift' compares it with the backend",
                        kind.what, ident)
            return
        host = kind.host_of(db, row)
        if host is None:  # its parent is gone: nothing on a backend to compare
            LOG.info("re-observing %s %s: it has no host; left to its owner", kind.what, ident)
            return
        summary, missed = self.drift.check_resources(
            [Candidate(rtype, row.id, row.status, host, row)], self.drift.policies)
        LOG.warning("re-observed %s %s after a late outcome: %s", kind.what, ident,
                    "not checked (busy or changed)" if missed else
                    ("; ".join(str(i["kind"]) for i in summary.items)
                     or "the backend agrees"))

    def _submit(self, delay: float, trigger: str, dry_run: bool = False
                ) -> futures.Future[PassResult]:
        # A pass that fails is logged with its traceback here, whether or not
        # anyone waits for it (a peer pass has nobody), and recorded as
        # failed by the reconciler.
        fut = tasks.submit_logged(self.executor, self._after, delay, trigger, dry_run,
                                  what=f"reconciliation pass ({trigger})")
        self._futures = [f for f in self._futures if not f.done()] + [fut]
        return fut

    def stop(self) -> None:
        """Let a running pass finish (a waiting one returns at once: the
        stopping event is set), then drop the idle worker without futurist's
        1 s idle wait."""
        pending = [f for f in self._futures if not f.done()]
        if pending:
            waiters.wait_for_all(pending)
        self.executor.shutdown(wait=False)

