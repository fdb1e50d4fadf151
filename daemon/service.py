"""The ``share-manager`` daemon: start-up, periodic tasks and shutdown."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable

from oslo_config import cfg
from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence.engine import StackEngine
from sharemgr.daemon import health, heap, signals, systemd
from sharemgr.daemon.backends import BackendSetup
from sharemgr.daemon.background import Background
from sharemgr.daemon.database import open_database
from sharemgr.daemon.heal import StackHealer
from sharemgr.daemon.parts import started
from sharemgr.db import messages as db_messages
from sharemgr.db import migration, models
from sharemgr.db import services as db_services
from sharemgr.db.engine import Database, DatabaseUnavailable, safe_url
from sharemgr.drivers import loader
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import (
    backup_ops,
    capabilities,
    clone_poll,
    config,
    ensure,
    handlers,
    leases,
    migration_continue,
    operation_table,
    outage,
    replica_ops,
)
from sharemgr.manager.coordination import CoordinationUnavailable, Coordinator
from sharemgr.manager.membership import Membership
from sharemgr.manager.operations import Operations
from sharemgr.manager.runner import RequestHandler, RequestRunner
from sharemgr.reconcile import drift
from sharemgr.reconcile.drift import DriftChecker
from sharemgr.reconcile.reconciler import Reconciler
from sharemgr.reconcile.runner import PassRunner
from sharemgr.reconcile.stack_check import StackChecker

LOG = logging.getLogger(__name__)
BINARY = "share-manager"
CONTEXT_FORMAT = ("%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s "
                  "[%(request_id)s] %(instance)s%(message)s")


class Handlers(dict[tuple[str, str], "RequestHandler"]):
    """(resource_type, action) → handler of a claimed request."""

    def __init__(self) -> None:
        super().__init__()
        self.hostless: set[str] = set()

    def add(self, rtype: str, action: str, handler: RequestHandler, hostless: bool = False) -> None:
        self[(rtype, action)] = handler
        if hostless:
            self.hostless.add(rtype)

    def get_handler(self, req: models.Request) -> RequestHandler | None:
        return self.get((req.resource_type, req.action))


class StartupError(Exception):
    """A problem that stops the daemon at start; its message is one line."""


class ShareManagerService:
    """One engine: a member of ``sharemgr-engines`` with a services row."""

    def __init__(self, conf: cfg.ConfigOpts, worker: int = 0) -> None:
        self.conf = conf
        #: Its index among this share-manager's engine processes (``workers``; 0: alone).
        self.worker = worker
        self.host = conf.host
        self.engine_id = f"{conf.host}.{uuid.uuid4()}"
        self.stopping = threading.Event()
        self.db: Database | None = None
        self.coordinator: Coordinator | None = None
        self.membership: Membership | None = None
        self.background = Background()
        self.registered = False
        self.cut_short = False  # driver calls outlived graceful_shutdown_timeout
        # The backends that are up; one whose set-up failed joins when a
        # retry passes (daemon/backends.py: a new dict for every holder).
        self.drivers: dict[str, ShareDriver] = {}
        self.backends = BackendSetup(self)
        self.reload_requested = False  # SIGHUP, handled by wait()
        self.notifier = systemd.Notifier()
        self.hosts: list[str] = []
        self.handlers = Handlers()
        self.operations: Operations | None = None
        self.runner: RequestRunner | None = None
        self.reconciler: Reconciler | None = None
        self.passes: PassRunner | None = None
        self.stacks: StackEngine | None = None
        self.healer: StackHealer | None = None

    # Start -----------------------------------------------------------------

    def start(self) -> None:
        LOG.info("share-manager starting: engine %s, database %s, coordination %s",
                 self.engine_id, safe_url(config.database_url(self.conf)),
                 safe_url(config.coordination_url(self.conf)))
        try:
            # The default database, coordination and dummy state live here.
            os.makedirs(self.conf.state_path, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create state_path {self.conf.state_path}: "
                               f"{exc.strerror or exc}")
        try:
            self.db = open_database(self.conf, self.stopping)
        except DatabaseUnavailable as exc:
            raise StartupError(str(exc))
        runs, why = migration.can_run(self.db)
        if not runs:
            raise StartupError(f"database {safe_url(self.db.url)}: {why}")
        if why:
            LOG.warning("database %s: %s", safe_url(self.db.url), why)
        self._start_health()
        try:
            self.coordinator = Coordinator(config.coordination_url(self.conf), self.engine_id)
            self.coordinator.start(heartbeat=True)
            self.coordinator.join_engines()
        except CoordinationUnavailable as exc:
            raise StartupError(str(exc))
        self.membership = Membership(self.coordinator, self.engine_id,
                                     float(self.conf.coordination.membership_timeout))
        try:
            # A configuration mistake stops the daemon; a set-up that fails
            # (an array not reachable yet) is retried below.
            constructed = loader.load_drivers(self.conf, self.host, self.engine_id,
                                              setup=False)
        except loader.DriverOptionError as exc:
            raise config.ConfigError(str(exc))  # a bad value: exit 2, as at load
        except loader.DriverLoadError as exc:
            raise StartupError(str(exc))
        for where in config.unknown_options(self.conf):
            LOG.warning("unknown option, ignored: %s", where)
        db_services.service_register(self.db, self.host, BINARY, self.engine_id)
        self.registered = True
        self.drivers = self.backends.first_tries(constructed)
        self.hosts = [f"{self.host}@{backend}" for backend in self.drivers]
        self.operations = Operations(self.db, self.drivers, self.coordinator, self.engine_id,
                                     handlers.HANDLERS)
        self.operations.leases = leases.Leases.from_conf(self.conf)
        self.operations.copy_bwlimit_kib = self.conf.migration_copy_bwlimit
        self.operations.not_member = self.membership.not_member
        self.operations.on_lost = self._reobserve
        for rtype, action in handlers.HANDLERS:
            self.handlers.add(rtype, action, self.operations.handle)
        self.stacks = StackEngine(self.db, self.operations, self.coordinator, self.engine_id,
                                  self.host, self.drivers)
        self.stacks.register(self.handlers)
        self.ensure_driver_resources()
        self.refresh_backend_stats()
        self._start_periodics()
        self._start_reconciliation()
        self.runner = RequestRunner(
            self.db,
            self.engine_id,
            # 'host@backend' for resource requests; plain 'host' for requests to
            # any engine of this host (e.g. sharectl reconcile run).
            self.hosts + [self.host] + self.stacks.claim_hosts(),
            self.handlers.get_handler,
            workers=self.conf.request_workers,
            poll_interval=self.conf.request_poll_interval,
            max_poll_interval=self.conf.request_poll_max_interval,
            any_host=bool(self.handlers.hostless),
            outage_max_interval=self.conf.outage_retry_max_interval,
            # Every configured backend, those whose set-up failed too: a lane
            # is ready for a backend that joins later.
            backend_workers={b: self.conf[b].request_workers or self.conf.request_workers
                             for b in self.conf.enabled_share_backends},
        )
        self.runner.not_member = self.membership.not_member
        self.stacks.take_checks_when(self.runner.may_claim)
        self.runner.message_ttl = self.conf.message_ttl
        self.runner.start()
        self.background.own("request runner", self._stop_runner)
        self.backends.retry_failed()
        LOG.info("share-manager up: host %s, engine %s, backends %s", self.host,
                 self.engine_id, ", ".join(
                     [*self.drivers, *(f"{b} (set-up failed, retrying)"
                                       for b in self.backends.failed)]) or "none")
        self.notifier.ready()

    @property
    def backend_states(self) -> dict[str, str]:
        """Each backend's state for the health endpoint (daemon/backends.py)."""
        return dict(self.backends.states)

    def _start_health(self) -> None:
        """The optional /healthcheck and /metrics endpoint, early: a port in
        use stops the start before anything joins or loads; until the engine
        is up, /healthcheck says what is missing (503)."""
        opts = self.conf.health
        if not opts.enabled:
            return
        try:
            # Engine process N of several listens on port + N (0: any port).
            port = opts.port + self.worker if opts.port else 0
            server = health.HealthServer(self, opts.bind_host, port, opts.check_timeout,
                                         disable_by_file=opts.disable_by_file)
        except health.HealthUnavailable as exc:
            raise StartupError(str(exc))
        server.start()
        self.background.own("health endpoint", server.stop)

    def _start_reconciliation(self) -> None:
        self.reconciler = Reconciler(
            started(self.db), self.drivers, started(self.coordinator),
            started(self.operations), self.host, self.engine_id,
            self.conf.reconciliation_workers,
        )
        self.reconciler.message_ttl = self.conf.message_ttl
        self.passes = PassRunner(self.reconciler, self.stopping)
        self.background.own("pass runner", self._stop_passes)
        self.handlers.add(vocab.RECONCILE, vocab.ACTION_RUN, self.passes.handle_request)
        try:
            self.passes.drift = DriftChecker(self.reconciler,
                                             drift.policy_table(self.conf.drift_policy))
        except ValueError as exc:
            raise StartupError(str(exc))
        self.handlers.add(vocab.RECONCILE, vocab.ACTION_DRIFT, self.passes.handle_request)
        checker = StackChecker(self.passes.drift)
        self.handlers.add(vocab.STACK, vocab.ACTION_STACK_CHECK, checker.handle, hostless=True)
        self.healer = StackHealer(checker)
        if self.conf.startup_reconciliation_enabled:
            # Deferred: the daemon takes requests while the pass waits and runs.
            self.passes.defer_startup(self.conf.startup_reconciliation_wait_seconds)
            self.passes.watch_peers(self.coordinator, self.host, self.engine_id,
                                    self.conf.peer_reconciliation_grace_seconds)
        else:
            # No automatic pass at all (startup, peer or periodic); 'reconcile
            # run' still works.
            LOG.info("startup reconciliation disabled")
        # The stack watchdog starts once the pass has settled what a crash left.
        started(self.stacks).start(
            self.passes if self.conf.startup_reconciliation_enabled else None)

    def ensure_driver_resources(self) -> None:
        for backend, driver in self.drivers.items():
            host = f"{self.host}@{backend}"
            try:
                ensure.ensure_backend(started(self.db), host, driver)
            except Exception:  # one backend's trouble must not stop the others
                LOG.exception("%s: ensure_driver_resources failed", host)

    def refresh_backend_stats(self) -> None:
        """Each backend's get_share_stats() into backend_stats; a failure is
        logged with its traceback and leaves the previous report."""
        for backend in list(self.drivers):
            if self.stopping.is_set():
                return
            self.refresh_stats_of(backend)

    def refresh_stats_of(self, backend: str) -> None:
        """One backend's report (nothing while its set-up has not passed)."""
        driver = self.drivers.get(backend)
        if driver is not None and not self.stopping.is_set():
            capabilities.refresh(started(self.db), f"{self.host}@{backend}", driver,
                                 self.engine_id)

    def on_backend(self, task: Callable[[Operations, list[str]], object], backend: str) -> None:
        """A periodic task about one backend's resources (started backups,
        migrations, creates from a snapshot still copying, secondary
        replicas), while its driver is up."""
        if backend in self.drivers and not self.stopping.is_set():
            task(started(self.operations), [f"{self.host}@{backend}"])

    def _start_periodics(self) -> None:
        bg = self.background
        db, membership = started(self.db), started(self.membership)
        operations = started(self.operations)
        most = self.conf.outage_retry_max_interval
        bg.every(self.conf.heartbeat_interval, "heartbeat",
                 lambda: db_services.service_heartbeat(db, self.engine_id,
                                                       membership.not_member()), most)
        # A thread and a clock of its own: with packets dropped a check waits
        # for the client's socket timeout, and the heartbeat must go on
        # meanwhile; and no task of the periodic thread (a heartbeat to a
        # database that does not answer) may keep the check from running,
        # or the engine would take itself out of the group for it.
        membership.begin()  # its staleness counts from the first check, not from the join
        bg.every(1.0, "membership", self._membership, most, alone=True)
        bg.every(self.conf.stack_watchdog_interval, "stack_watchdog", self._stack_watchdog,
                 most)
        # Driver calls: off the periodic thread (a hung get_share_stats must
        # not hold up the heartbeat, the membership or the lease renewals),
        # a thread per backend (nor another backend's report).
        for backend in self.conf.enabled_share_backends:
            bg.every(self.conf.backend_stats_interval, f"backend_stats:{backend}",
                     functools.partial(self.refresh_stats_of, backend), most,
                     offload=True)
            for interval, name, task in (
                    (self.conf.backup_continue_interval, "backup_continue",
                     backup_ops.continue_backups),
                    (self.conf.migration_continue_interval, operation_table.MIGRATION_CONTINUE,
                     migration_continue.continue_migrations),
                    (self.conf.clone_poll_interval, "clone_poll", clone_poll.poll_clones),
                    (self.conf.replica_state_update_interval, "replica_state",
                     replica_ops.update_replica_states)):
                bg.every(interval, f"{name}:{backend}",
                         functools.partial(self.on_backend, task, backend), most, offload=True)
        if self.notifier.watchdog_interval:
            bg.every(self.notifier.watchdog_interval, "systemd_watchdog",
                     self.notifier.watchdog)
        if operations.leases.heartbeat:
            # A third of the heartbeat: two renewals may be missed before a
            # running call's lease runs out.
            bg.every(max(1.0, operations.leases.heartbeat / 3), "lease_renewal",
                     operations.keeper.renew, most)
        if self.conf.periodic_reconciliation_interval:
            bg.every(self.conf.periodic_reconciliation_interval, "periodic_reconciliation",
                     self._periodic_pass, most)
        bg.every(self.conf.stack_watchdog_interval, "stack_heal", self._stack_heal, most)
        bg.every(self.conf.message_reap_interval, "message_reap",
                 lambda: db_messages.reap(db), most)
        if self.conf.drift_check_interval:
            bg.every(self.conf.drift_check_interval, "drift_check",
                     self._drift_check, most)
        bg.start_periodics()

    def _periodic_pass(self) -> None:
        # The periodic tasks start before the pass runner; reconciliation
        # disabled means no automatic pass at all.
        if self.passes is not None and self.conf.startup_reconciliation_enabled:
            self.passes.periodic()

    def _drift_check(self) -> None:
        if self.passes is not None:
            self.passes.drift_periodic()

    def _membership(self) -> None:
        started(self.membership).check()
        started(self.coordinator).run_watchers()

    def _reobserve(self, rtype: str, ident: str) -> None:
        """An outcome that could not be written: the resource is asked about
        at once (a drift check of it, by the configured policy) unless it is
        in a transient status, which its new owner or a reconciliation
        settles (doc/reconciliation.rst, "Fencing")."""
        if self.passes is not None:
            self.passes.reobserve(rtype, ident)

    def _stack_heal(self) -> None:
        # Not before the startup pass has settled what a crash left.
        passes = self.passes
        if self.healer is not None and passes is not None and not self.stopping.is_set() \
                and not passes.startup_pending:
            self.healer.tick(passes.then)

    def _stack_watchdog(self) -> None:
        if not self.stopping.is_set():
            started(self.stacks).watchdog.run_safely()

    # Stop ------------------------------------------------------------------

    def wait(self) -> None:
        while not self.stopping.wait(0.5):
            if self.reload_requested:
                self.reload_requested = False
                self.reload()

    def request_reload(self, _signum: int | None = None) -> None:
        """SIGHUP: only a flag; the main thread reloads (wait)."""
        self.reload_requested = True

    def reload(self) -> None:
        """Re-read the config files (manager/config.py's ``reload``). Log
        files need no reopening: oslo.log's WatchedFileHandler does it."""
        LOG.info("share-manager got SIGHUP: reloading the mutable options")
        failure = None
        try:
            config.reload(self.conf)
        except Exception as exc:  # a broken file or value: say so in one line
            failure = " ".join(str(exc).split())
        if failure is not None:  # outside the except: oslo.log would repeat it
            LOG.error("reloading the configuration failed: %s; every option keeps the "
                      "value it had", failure)

    def request_stop(self, signum: int | None = None) -> None:
        """SIGTERM or SIGINT, on the signals thread (daemon/signals.py)."""
        if signum is not None and not self.stopping.is_set():
            LOG.info("share-manager got signal %s, stopping", signum)
        self.stopping.set()

    def _stop_runner(self) -> None:
        if not started(self.runner).stop(self.conf.graceful_shutdown_timeout):
            self.cut_short = True  # serve() ends the process: they end with it
            LOG.warning("driver calls still running after graceful_shutdown_timeout "
                        "(%ss); their resources stay transient until reconciled",
                        self.conf.graceful_shutdown_timeout)

    def _stop_passes(self) -> None:
        self.stopping.set()  # a pass still waiting for its start returns at once
        started(self.passes).stop()

    def stop(self) -> None:
        self.notifier.stopping()
        self.stopping.set()  # waits of set-up retries and passes return at once
        # The request runner first (its driver calls may finish while the
        # heartbeat still runs), then the pass runner, then the periodics.
        self.background.stop()
        self.stopping.set()  # also when start failed before the pass runner
        if self.coordinator is not None:
            self.coordinator.stop()
        if self.db is not None and self.registered:
            try:
                db_services.service_stopped(self.db, self.engine_id)
            except Exception as exc:  # the database may be the reason we stop
                if outage.is_outage(exc):
                    LOG.warning("could not mark the service row stopped: the database is "
                                "away (%s)", (str(exc).strip().splitlines() or [""])[0])
                else:
                    LOG.exception("could not mark the service row stopped")
        if self.db is not None:
            self.db.dispose()
        LOG.info("share-manager stopped: engine %s", self.engine_id)


def main(argv: list[str] | None = None) -> int:
    argv, conf = sys.argv[1:] if argv is None else argv, config.CONF
    heap.tune()
    # Before load(): oslo.config caches values once read.
    logging.set_defaults(
        # A request's lines show its id, and its resource as oslo.log shows
        # a context's resource_uuid ("[instance: ...]"; manager/runner.py).
        logging_context_format_string=CONTEXT_FORMAT,
        default_log_levels=logging.get_default_log_levels() + [
            "alembic=WARN", "tooz=WARN",
            # Its 'Could not load' line for an unknown tooz backend repeats
            # the one-line start-up error.
            "stevedore=CRITICAL"],
    )
    # With its hooks (a SIGHUP's new log level, the formatters' config).
    logging.register_options(conf)
    try:
        config.load(argv, conf=conf, prog=BINARY)
    except config.ConfigError as exc:
        print(f"{BINARY}: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.setup(conf, "sharemgr")
    if conf.workers > 1:
        from sharemgr.daemon import workers  # cotyledon: only for a parent

        return workers.run(conf, workers.Engine(
            lambda conf, worker: ShareManagerService(conf, worker=worker), serve))
    service = ShareManagerService(conf)
    signals.watch({signal.SIGTERM: service.request_stop, signal.SIGINT: service.request_stop,
                   signal.SIGHUP: service.request_reload, signal.SIGUSR2: signals.log_stacks})
    return serve(service)


def serve(service: ShareManagerService) -> int:
    """Start ``service``, run it until it is asked to stop, stop it: the
    exit code (2: a bad option value, 1: another start-up failure)."""
    failure, code = None, 1
    try:
        service.start()
    except StartupError as exc:
        failure = str(exc)
    except config.ConfigError as exc:  # a bad option value, as at load: exit 2
        failure, code = str(exc), 2
    else:
        heap.freeze_started()  # start-up's objects: out of the collector's passes
    if failure is not None:
        service_stopped = service.stopping.is_set()
        # Logged outside the except block: oslo.log would append the exception.
        if service_stopped:
            # Asked to stop while it waited (a database late at start): what
            # it was asked, not a failure to report (systemd's stop, exit 0).
            LOG.info("share-manager stopped before it was up (it was waiting: %s)", failure)
        else:
            LOG.error("share-manager cannot start: %s", failure)
            if service.conf.log_file or service.conf.use_journal or service.conf.use_syslog:
                # The log is elsewhere: who started it by hand sees the line too.
                print(f"{BINARY}: cannot start: {failure}", file=sys.stderr)
        service.stop()
        return 0 if service_stopped else code
    service.wait()
    service.stop()
    if service.cut_short:  # its threads would keep the process (oslo.service's way too)
        signals.end_process(1, "share-manager exits with driver calls still running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
