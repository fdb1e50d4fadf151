"""Each backend's set-up, as Manila's share manager does it: one whose
``do_setup`` or ``check_for_setup_error`` fails does not stop the daemon.
It is recorded ``failed`` with the reason and retried on the Background
owner's pool with capped exponential back-off (tenacity; the waits read
the mutable options at each wait, the sleep is the daemon's stopping event
so SIGTERM ends it at once) while the other backends serve. When a try
passes, the backend joins the running service."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tenacity
from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.daemon.parts import started
from sharemgr.db import services as db_services
from sharemgr.drivers import loader
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import capabilities, ensure

if TYPE_CHECKING:
    from sharemgr.daemon.service import ShareManagerService

LOG = logging.getLogger(__name__)


def _set_up(driver: ShareDriver) -> loader.BackendSetupError | None:
    """The driver's set-up; its failure returned, not raised."""
    try:
        loader.setup_driver(driver)
    except loader.BackendSetupError as exc:
        return exc
    return None


class BackendSetup:
    """The set-up of one service's backends (``service``: a started or
    starting ShareManagerService)."""

    def __init__(self, service: ShareManagerService) -> None:
        self.service = service
        self.failed: dict[str, ShareDriver] = {}  # backend -> its driver, set-up failed
        # backend -> 'up', 'initializing' or 'failed (<reason>)': what the
        # health endpoint reports (daemon/health.py, backend_states).
        self.states: dict[str, str] = {}

    def record(self, backend: str, state: str, reason: str | None = None) -> None:
        """The backend's state in service_backends; the database away only
        leaves the list stale (the retries and the join go on)."""
        svc = self.service
        self.states[backend] = f"{state} ({reason})" if reason else state
        try:
            db_services.service_backend_set(started(svc.db), svc.engine_id, backend, state, reason)
        except Exception:  # oslo.log appends the error's first line
            LOG.warning("backend [%s]: could not record its state '%s'", backend, state)

    def first_tries(self, constructed: dict[str, ShareDriver]) -> dict[str, ShareDriver]:
        """Set each backend up once, at start; returns those that are up."""
        for backend in constructed:
            self.record(backend, vocab.BACKEND_INITIALIZING)
        up = {}
        for backend, driver in constructed.items():
            failure = _set_up(driver)
            if failure is None:
                up[backend] = driver
                self.record(backend, vocab.BACKEND_UP)
                continue
            # Outside the except block: oslo.log would repeat the error.
            cause = failure.__cause__ or failure
            LOG.debug("backend [%s]: %s", backend, failure,
                      exc_info=(type(cause), cause, cause.__traceback__))
            LOG.warning("backend [%s]: %s; the other backends serve, this one is "
                        "retried with back-off", backend, failure)
            self.failed[backend] = driver
            self.record(backend, vocab.BACKEND_FAILED, str(failure))
        return up

    def retry_failed(self) -> None:
        """Start the retries (once the service serves: a join needs it)."""
        for backend, driver in self.failed.items():
            # A thread each: a retry waits between tries.
            self.service.background.submit(
                f"set-up of backend [{backend}]", self._retry, backend, driver,
                workers=len(self.failed))

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        conf = self.service.conf  # read at each wait: both options are mutable
        return tenacity.wait_exponential(
            multiplier=2 * conf.backend_setup_retry_interval,
            max=conf.backend_setup_retry_max_interval)(retry_state)

    def _retry(self, backend: str, driver: ShareDriver) -> None:
        """Until the set-up passes (then the backend joins) or the daemon stops."""
        stopping = self.service.stopping
        if stopping.wait(self.service.conf.backend_setup_retry_interval):
            return

        def attempt() -> bool:
            if stopping.is_set():
                return False
            loader.setup_driver(driver)
            return True

        def sleep(seconds: float) -> None:  # a stop ends the wait at once
            stopping.wait(seconds)

        def failed(retry_state: tenacity.RetryCallState) -> None:
            outcome, action = retry_state.outcome, retry_state.next_action
            reason = str(outcome.exception() if outcome else "failed")
            LOG.info("backend [%s]: %s; next try in %.1fs", backend, reason,
                     action.sleep if action else 0.0)
            self.record(backend, vocab.BACKEND_FAILED, reason)

        try:
            up = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(loader.BackendSetupError),
                wait=self._wait,
                stop=lambda _state: stopping.is_set(),
                sleep=sleep,
                before_sleep=failed,
                reraise=True,
            )(attempt)
        except loader.BackendSetupError:
            return  # stopping
        if up and not stopping.is_set():
            self._join(backend, driver)

    def _join(self, backend: str, driver: ShareDriver) -> None:
        """Ensure its resources, report its stats, claim its requests, reconcile."""
        svc = self.service
        host = f"{svc.host}@{backend}"
        LOG.info("backend [%s]: set-up passed; %s joins", backend, host)
        try:
            ensure.ensure_backend(started(svc.db), host, driver)
        except Exception:  # as at start: logged, the backend still serves
            LOG.exception("%s: ensure_driver_resources failed", host)
        # A new dict, not an insert: a pass or refresh may be iterating.
        svc.drivers = {**svc.drivers, backend: driver}
        stacks = started(svc.stacks)
        for holder in (started(svc.operations), started(svc.reconciler), stacks):
            holder.drivers = svc.drivers
        self.failed.pop(backend, None)
        svc.hosts = [*svc.hosts, host]
        try:
            capabilities.refresh(started(svc.db), host, driver, svc.engine_id)
        except Exception:  # an outage: the periodic refresh reports it later
            LOG.warning("%s: stats not reported yet", host)  # oslo.log appends why
        started(svc.runner).add_hosts([host, *stacks.add_backend(backend, driver)])
        self.record(backend, vocab.BACKEND_UP)
        if svc.conf.startup_reconciliation_enabled:
            started(svc.passes).run_soon(f"backend:{backend}")
