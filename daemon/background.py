"""The one owner of the daemon's background work.

Everything that runs in the background is registered here as it starts: the
periodic tasks (one futurist ``PeriodicWorker``), one-off work such as a
backend's set-up retries (one futurist pool), and each component that has
threads or executors of its own (the request runner, the pass runner) with
the call that stops it. ``stop`` stops them in the reverse order of their
start, so what was started last (the request runner, whose driver calls may
still run) is stopped first while the heartbeat and the membership watch
still run, and a failure to stop one never keeps the next from stopping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

import futurist
from futurist import periodics, waiters
from oslo_log import log as logging
from sharemgr.common import tasks
from sharemgr.common.outage import Backoff
from sharemgr.manager.outage import backing_off

LOG = logging.getLogger(__name__)
T = TypeVar("T")

# Seconds the stop waits for an offloaded task's run (every() offload).
OFFLOAD_STOP_WAIT = 10.0


class Background:
    def __init__(self) -> None:
        self._periodic: list[tuple[Callable[[], None], tuple[object, ...], dict[str, object]]] = []
        self._stops: list[tuple[str, Callable[[], object]]] = []
        self._worker: periodics.PeriodicWorker | None = None
        self._executor: futurist.SynchronousExecutor | None = None
        self._thread: threading.Thread | None = None
        self._pool: futurist.ThreadPoolExecutor | None = None
        # Tasks with a thread and a clock of their own (every(alone=True)).
        self._alone: list[tuple[str, float, Callable[[], None]]] = []

    def every(self, spacing: float, what: str, fn: Callable[[], object],
              outage_max_interval: float = 30.0, offload: bool = False,
              alone: bool = False) -> None:
        """Run ``fn`` every ``spacing`` seconds once periodics start; a
        failure is logged with its traceback and the task goes on. While the
        database or the coordination backend is away, the task skips its
        runs with capped exponential back-off and the outage is logged once
        for the process (common/outage.py), without a traceback.

        ``offload``: ``fn`` may wait long (a driver call): each run goes to a
        thread of the task's own, one run at a time, so that it never holds
        up the other periodic tasks (the heartbeat, the membership, the
        lease renewals).

        ``alone``: ``fn`` runs on a thread of its own, on a clock of its own,
        not when the periodic thread gets to it: no other task, however long
        it waits (a database whose packets are dropped holds a connect for
        minutes), can delay it. For the membership check, whose silence
        would take the engine out of the group."""
        backoff = Backoff(what, spacing, max(spacing, outage_max_interval))

        def run() -> None:
            backing_off(backoff, fn)

        if alone:
            def due() -> None:
                if time.monotonic() >= backoff.retry_at:
                    run()

            self._alone.append((what, spacing, due))
            return
        if offload:
            run = self._offloaded(what, run)

        @periodics.periodic(spacing=spacing, run_immediately=False)
        def task() -> None:
            if time.monotonic() < backoff.retry_at:
                return
            run()

        # futurist names the task in its messages, tasks.py by its qualname.
        task.__name__ = task.__qualname__ = what
        self._periodic.append((task, (), {}))

    def _offloaded(self, what: str, run: Callable[[], None]) -> Callable[[], None]:
        """``run`` on a thread of its own, skipped while a run is going on."""
        executor = futurist.ThreadPoolExecutor(max_workers=1)
        busy = threading.Event()
        running: list[futures.Future[None]] = []

        def stop() -> None:
            # A run that ends soon (it checks the stopping event between
            # driver calls) ends before the database goes; a hung driver call
            # must not hold up the stop (the worker is a daemon thread).
            if running and not running[0].done():
                waiters.wait_for_all(running, timeout=OFFLOAD_STOP_WAIT)
            executor.shutdown(wait=False)

        self.own(what, stop)

        def body() -> None:
            try:
                run()
            finally:
                busy.clear()

        def start() -> None:
            if busy.is_set():
                return
            busy.set()
            try:
                running[:] = [tasks.submit_logged(executor, body, what=what)]
            except RuntimeError:  # shut down: the daemon stops
                busy.clear()

        return start

    def submit(self, what: str, fn: Callable[..., T], *args: object, workers: int = 4
               ) -> futures.Future[T]:
        """Run ``fn(*args)`` on the owner's worker pool (e.g. a backend's
        set-up retries); its exception is logged with its traceback. The
        pool (``workers`` threads, set by the first call: work that waits
        long needs a thread each) is stopped in its place in the order,
        waiting for its work: the work must return once the daemon's
        stopping event is set."""
        if self._pool is None:
            self._pool = futurist.ThreadPoolExecutor(max_workers=max(1, workers))
            self.own("background work", self._stop_pool)
        return tasks.submit_logged(self._pool, fn, *args, what=what)

    def _stop_pool(self) -> None:
        assert self._pool is not None
        self._pool.shutdown(wait=True)

    def own(self, what: str, stop: Callable[[], object]) -> None:
        """A started component and how to stop it."""
        self._stops.append((what, stop))

    def start_periodics(self) -> None:
        # Periodic tasks run one after another in the worker's thread: they
        # are short, and a synchronous executor stops at once.
        executor = self._executor = futurist.SynchronousExecutor()
        self._worker = periodics.PeriodicWorker(
            self._periodic, executor_factory=lambda: executor,
            on_failure=tasks.log_periodic_failure,
        )
        self._thread = tasks.start_thread(self._worker.start, name="periodics")
        self.own("periodic tasks", self._stop_periodics)
        for what, spacing, due in self._alone:
            self._start_alone(what, spacing, due)

    def _start_alone(self, what: str, spacing: float, due: Callable[[], None]) -> None:
        stopping = threading.Event()

        def loop() -> None:
            while not stopping.wait(spacing):
                try:
                    due()
                except Exception:  # logged; the next run comes on time
                    LOG.exception("periodic task %s failed", what)

        thread = tasks.start_thread(loop, name=what)

        def stop() -> None:
            stopping.set()
            thread.join(OFFLOAD_STOP_WAIT)  # a hung check must not hold up the stop

        self.own(what, stop)

    def _stop_periodics(self) -> None:
        assert self._worker is not None and self._executor is not None
        self._worker.stop()
        self._worker.wait()
        self._executor.shutdown(wait=True)

    def stop(self) -> None:
        """Stop every owned component, the last started first."""
        while self._stops:
            what, stop = self._stops.pop()
            try:
                stop()
            except Exception:  # the next component must still stop
                LOG.exception("stopping %s failed", what)
