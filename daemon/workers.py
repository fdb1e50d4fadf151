"""``[DEFAULT] workers`` > 1: several engine processes under one parent.

The parent is cotyledon's ServiceManager (the process launcher of
OpenStack's Telemetry services, without eventlet): it forks the engine
processes, starts a new one in place of one that dies (same worker index),
and passes SIGTERM and SIGHUP on to them. Each child is a whole engine
(``ShareManagerService``): its own engine id, membership, leases, request
lanes, startup pass and health endpoint. A child that dies is an engine
of this host leaving the group: its peers' peer pass, or its successor's
startup pass, settles what it left, exactly as for separate daemons.

With one worker no parent is started (as oslo.service's launcher runs one
service in process): the engine is the process systemd and the tests
signal. Why a separate parent is not simply N daemons started by systemd:
one unit, one config, one SIGHUP, and a child restarted within a second
rather than after the unit's RestartSec.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import cotyledon
from cotyledon.types import WorkerId
from oslo_config import cfg
from oslo_log import log as logging
from sharemgr.common import tasks
from sharemgr.daemon import health, signals, systemd
from sharemgr.daemon.database import open_database
from sharemgr.db import migration
from sharemgr.db.engine import DatabaseUnavailable, safe_url
from sharemgr.manager import config

LOG = logging.getLogger(__name__)

# Seconds the parent gives a stopping child beyond graceful_shutdown_timeout
# (its driver calls) for the rest of its stop (passes, coordinator, database)
# before cotyledon ends the children at once.
STOP_MARGIN = 30


class Service(Protocol):
    """What a child runs: daemon/service.py's ShareManagerService."""

    notifier: systemd.Notifier

    def request_stop(self, signum: int | None = None) -> None: ...

    def request_reload(self, _signum: int | None = None) -> None: ...


S = TypeVar("S", bound=Service)


@dataclass(frozen=True)
class Engine(Generic[S]):
    """How a child builds its engine and runs it (daemon/service.py's, given
    by its ``main``: this module does not import it)."""

    build: Callable[[cfg.ConfigOpts, int], S]
    serve: Callable[[S], int]


class EngineProcess(cotyledon.Service):
    """One engine process: cotyledon calls ``run`` on a thread of its own,
    and ``terminate`` (SIGTERM) and ``reload`` (SIGHUP) on others; the
    process's main thread is cotyledon's signal loop."""

    name = "share-manager engine"

    def __init__(self, worker_id: WorkerId, conf: cfg.ConfigOpts, up_fd: int,
                 engine: Engine[Service]) -> None:
        super().__init__(worker_id)
        self.engine = engine
        self.service = engine.build(conf, worker_id)
        # Its "up" goes to the parent, which tells systemd once all are.
        self.service.notifier = ToParent(up_fd)
        self.stopped = threading.Event()
        # On the child's main thread: the only one that may set handlers.
        signals.stacks_on_usr2()

    def run(self) -> None:
        try:
            code = self.engine.serve(self.service)
        finally:
            self.stopped.set()
        if code:
            # Its start failed: the parent starts another in its place
            # (cotyledon slows down a child that keeps failing).
            raise SystemExit(code)

    def terminate(self) -> None:
        self.service.request_stop(signal.SIGTERM)
        self.stopped.wait()

    def reload(self) -> None:
        self.service.request_reload()


class ToParent(systemd.Notifier):
    """A child's notifier: "up" is one byte on the pipe the parent reads
    (``_count_up``); nothing else is sent (the parent stops and feeds
    the watchdog)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.watchdog_interval = 0.0

    def ready(self) -> None:
        try:
            os.write(self.fd, b"u")
        except OSError:  # the parent is gone: this child stops anyway
            pass

    def stopping(self) -> None:
        pass


def preflight(conf: cfg.ConfigOpts) -> str | None:
    """What stops every child at once, found before any is forked (None:
    nothing): a health port in use (child N listens on port + N: one taken
    would have that child fail its start and be started again, in a loop)
    and the database's schema. The parent holds no connection after."""
    health_opts = conf.health
    if health_opts.enabled and health_opts.port:
        for worker in range(conf.workers):
            why = health.cannot_listen(health_opts.bind_host, health_opts.port + worker)
            if why is not None:
                return f"{why} (engine process {worker} of {conf.workers} listens on " \
                       f"[health] port + {worker})"
    try:
        db = open_database(conf)
    except DatabaseUnavailable as exc:
        return str(exc)
    try:
        runs, why = migration.can_run(db)
    finally:
        db.dispose()
    return None if runs else f"database {safe_url(db.url)}: {why}"


def run(conf: cfg.ConfigOpts, engine: Engine[S]) -> int:
    """The parent: start ``conf.workers`` engine processes and supervise
    them until SIGTERM (exits 0 once they have stopped)."""
    failure = preflight(conf)
    if failure is not None:
        LOG.error("share-manager cannot start: %s", failure)
        return 1
    if config.database_url(conf).startswith("sqlite"):
        LOG.warning("%d engine processes on SQLite: one of them writes at a time, the "
                    "others wait (doc/operations.rst, 'Engine processes')", conf.workers)
    # Read before NOTIFY_SOCKET goes: cotyledon's run() would say READY=1
    # as soon as it forks; here it is said once every child is up.
    notifier = systemd.Notifier()
    os.environ.pop("NOTIFY_SOCKET", None)
    up_read, up_write = os.pipe()
    tasks.start_thread(_count_up, up_read, conf.workers, notifier, name="children_up")
    manager = cotyledon.ServiceManager(
        graceful_shutdown_timeout=conf.graceful_shutdown_timeout + STOP_MARGIN)
    manager.add(EngineProcess, workers=conf.workers, args=(conf, up_write, engine))
    manager.register_hooks(on_terminate=notifier.stopping,
                           on_dead_worker=_dead_worker)
    if notifier.watchdog_interval:
        interval = notifier.watchdog_interval

        def feed() -> None:
            while True:
                notifier.watchdog()
                time.sleep(interval)

        tasks.start_thread(feed, name="systemd_watchdog")
    LOG.info("share-manager parent %d: %d engine processes", os.getpid(), conf.workers)
    manager.run()  # returns only by exiting (sys.exit(0) after SIGTERM)
    return 0


def _count_up(fd: int, workers: int, notifier: systemd.Notifier) -> None:
    """READY=1 once ``workers`` children have said they are up. A child
    started in place of a dead one says so again: read (a full pipe would
    block its start), not re-sent."""
    seen = 0
    while got := os.read(fd, 64):
        seen += len(got)
        if seen - len(got) < workers <= seen:
            LOG.info("share-manager parent: all %d engine processes up", workers)
            notifier.ready()


def _dead_worker(_service_id: object, worker_id: WorkerId, exit_code: int) -> None:
    how = f"killed by signal {-exit_code}" if exit_code < 0 else f"exited {exit_code}"
    LOG.warning("engine process %d %s; starting another in its place", worker_id, how)
