"""The one owner of the daemon's background work.

Everything that runs in the background is registered here as it starts: the
periodic tasks (one futurist ``PeriodicWorker``), and each component that has
threads or executors of its own (the request runner, the pass runner) with
the call that stops it. ``stop`` stops them in the reverse order of their
start, so what was started last (the request runner, whose driver calls may
still run) is stopped first while the heartbeat and the membership watch
still run, and a failure to stop one never keeps the next from stopping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import futurist
from futurist import periodics
from oslo_log import log as logging
from sharemgr.common import tasks

LOG = logging.getLogger(__name__)


class Background:
    def __init__(self) -> None:
        self._periodic: list[tuple[Callable[[], Any], tuple, dict]] = []
        self._stops: list[tuple[str, Callable[[], Any]]] = []
        self._worker: periodics.PeriodicWorker | None = None
        self._executor: futurist.SynchronousExecutor | None = None
        self._thread: threading.Thread | None = None

    def every(self, spacing: float, what: str, fn: Callable[[], Any]) -> None:
        """Run ``fn`` every ``spacing`` seconds once periodics start; a
        failure is logged with its traceback and the task goes on."""

        @periodics.periodic(spacing=spacing, run_immediately=False)
        def task() -> None:
            fn()

        task.__name__ = what  # futurist names the task in its own messages
        self._periodic.append((task, (), {}))

    def own(self, what: str, stop: Callable[[], Any]) -> None:
        """A started component and how to stop it."""
        self._stops.append((what, stop))

    def start_periodics(self) -> None:
        # Periodic tasks run one after another in the worker's thread: they
        # are short, and a synchronous executor stops at once.
        self._executor = futurist.SynchronousExecutor()
        self._worker = periodics.PeriodicWorker(
            self._periodic, executor_factory=lambda: self._executor,
            on_failure=tasks.log_periodic_failure,
        )
        self._thread = tasks.start_thread(self._worker.start, name="periodics")
        self.own("periodic tasks", self._stop_periodics)

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
