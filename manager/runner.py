"""The request loop: claim pending requests for this engine's hosts and run
them on futurist thread pools, one per backend (a lane) and one for the
rest, so that a slow or hung backend only ever holds its own workers."""

from __future__ import annotations

import functools
import logging as std_logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Never

import futurist
import tenacity
from futurist import waiters
from oslo_context import context
from oslo_log import log as logging
from sharemgr.common import messages, metrics, tasks, vocab
from sharemgr.common.outcome import Outcome, Result
from sharemgr.db import api as db_api
from sharemgr.db import models, notify
from sharemgr.db.engine import Database
from sharemgr.manager.hosts import backend_of
from sharemgr.manager.op_errors import OperationFailed, Stale, outcome_of
from sharemgr.manager.outage import Backoff, is_outage

LOG = logging.getLogger(__name__)

# A handler's outcome says how its request ends (``REQUEST_ENDS``); RECORDED:
# it wrote that itself (a stack check does, in its report's transaction).
RequestHandler = Callable[[models.Request], Outcome[object]]


def observe(resource_type: str, action: str, status: str, error: str | None,
            started: float) -> None:
    """A request's run time into its histogram. A stale request is
    recorded done (with its reason as the error); the metric keeps it apart.
    The request loop's, and a stack's chained checks' (convergence/worker.py)."""
    outcome = "stale" if status == vocab.REQUEST_DONE and error else status
    metrics.REQUEST_SECONDS.labels(resource_type, action, outcome).observe(
        time.monotonic() - started)


def request_context(req_id: int, resource_type: str, resource_id: str) -> None:
    """Every line logged from now on in this thread (the operation, the
    driver) carries the request's id and resource (doc/design.rst, "Logs")."""
    context.RequestContext(request_id=f"req-{req_id}",
                           resource_uuid=f"{resource_type}:{resource_id}", overwrite=True)


@dataclass(frozen=True)
class RequestEnd:
    status: str  # the request's
    note: str  # put before the outcome's reason in the request's error
    message: str | None  # the user message's detail id (common/messages.py)
    level: int  # how the ending is logged, with its reason


# How a request ends, by its handler's outcome.
REQUEST_ENDS: dict[Result, RequestEnd] = {
    Result.DONE: RequestEnd(vocab.REQUEST_DONE, "", None, std_logging.DEBUG),
    Result.RECORDED: RequestEnd(vocab.REQUEST_DONE, "", None, std_logging.DEBUG),
    # Nothing to do: the resource moved on without it.
    Result.STALE: RequestEnd(vocab.REQUEST_DONE, "stale: ", None, std_logging.INFO),
    # Another engine or a reconciliation took the resource: this request's
    # outcome is not the resource's (never 'done').
    Result.LOST: RequestEnd(vocab.REQUEST_ABANDONED, "lost: ", messages.TAKEN_OVER,
                            std_logging.WARNING),
    # Nothing reached the driver: a member runs it (this engine too, once
    # it has rejoined).
    Result.NOT_NOW: RequestEnd(vocab.REQUEST_PENDING, "given back: ", None, std_logging.WARNING),
    Result.FAILED: RequestEnd(vocab.REQUEST_FAILED, "", messages.FAILED, std_logging.DEBUG),
}


def unexpected(exc: Exception, req_id: int, what: str) -> Outcome[Never]:
    """The outcome of a handler that raised: an operation's own exception
    (``outcome_of``) or a bug, whose traceback is logged (called in the
    ``except`` block)."""
    if isinstance(exc, (Stale, OperationFailed)):
        return outcome_of(exc)
    LOG.exception("request %s (%s) failed", req_id, what)
    return Outcome.failed(f"{type(exc).__name__}: {exc}", messages.UNEXPECTED)


def request_end(outcome: Outcome[object], req_id: int, what: str
                ) -> tuple[str, str | None, str | None]:
    """What a request whose handler came back with ``outcome`` ends as: its
    status, error and user message's detail id. The request loop and a
    stack's chained checks both read it."""
    end = REQUEST_ENDS.get(outcome.result)
    if end is None:  # a node's own result that its check did not turn into a request's: a bug
        LOG.error("request %s (%s): its handler ended %s, which no request ends as",
                  req_id, what, outcome.result)
        return vocab.REQUEST_FAILED, f"unexpected outcome {outcome.result}: " \
            f"{outcome.reason or ''}", messages.UNEXPECTED
    if outcome.result in (Result.DONE, Result.RECORDED):
        return end.status, None, None
    error = f"{end.note}{outcome.reason or ''}"
    LOG.log(end.level, "request %s (%s): %s", req_id, what, error)
    return end.status, error, outcome.detail or end.message


class _Lane:
    """The workers of one backend (its ``host@backend`` and ``*@backend``
    requests), or the general lane (this host's own requests and those
    without a host). Each lane claims only what its free workers can take."""

    def __init__(self, name: str, workers: int, any_host: bool) -> None:
        self.name = name
        self.workers = workers
        self.any_host = any_host
        self.hosts: list[str] = []
        self.executor = futurist.ThreadPoolExecutor(max_workers=workers)
        self.inflight: set[futurist.Future[None]] = set()


class RequestRunner:
    def __init__(
        self,
        db: Database,
        engine_id: str,
        hosts: list[str],
        dispatch: Callable[[models.Request], RequestHandler | None],
        workers: int,
        poll_interval: float,
        any_host: bool,
        max_poll_interval: float | None = None,
        outage_max_interval: float = 30.0,
        backend_workers: dict[str, int] | None = None,
    ) -> None:
        """``workers``: the general lane's size; ``backend_workers``: each
        backend's lane size (a backend not named there is in the general
        lane)."""
        self.db = db
        self.engine_id = engine_id
        self.hosts: list[str] = []
        self.dispatch = dispatch
        self.poll_interval = poll_interval
        # Idle, the poll slows down to this; wake-ups (db/notify.py) keep a
        # new request's start prompt on SQLite and PostgreSQL meanwhile.
        self.max_poll_interval = max(poll_interval, max_poll_interval or poll_interval)
        self.any_host = any_host
        # The database away: back off up to this, one WARNING, one INFO.
        self.outage_max_interval = outage_max_interval
        self.outage = Backoff("request loop", poll_interval, outage_max_interval)
        # Why this engine may not claim now (manager/membership.py), or None.
        self.not_member: Callable[[], str | None] = lambda: None
        #: How long the user messages of failed or lost requests are kept.
        self.message_ttl: float = messages.DEFAULT_TTL
        self.general = _Lane("general", workers, any_host)
        self.lanes = [self.general] + [_Lane(backend, n, False)
                                       for backend, n in (backend_workers or {}).items()]
        self._stopping = threading.Event()
        self._lane = threading.local()  # the lane of the request a thread runs
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._place(hosts)

    def _place(self, added: list[str]) -> None:
        by_backend = {lane.name: lane for lane in self.lanes[1:]}
        for host in added:
            if host in self.hosts:
                continue
            # 'h@b' and '*@b' are backend b's; a plain host is none's ("").
            lane = by_backend.get(backend_of(host), self.general)
            # New lists: a claim in progress keeps the old ones.
            lane.hosts = [*lane.hosts, host]
            self.hosts = [*self.hosts, host]

    def start(self) -> None:
        notify.subscribe(self.db, self.wake)
        if notify.can_listen(self.db):
            self._listener = tasks.start_thread(notify.listen, self.db, self.wake,
                                                self._stopping, name="request-wakeups")
        self._thread = tasks.start_thread(self._loop, name="requests")

    def add_hosts(self, hosts: list[str]) -> None:
        """Claim requests for these hosts too (a backend whose set-up passed
        late), each in its backend's lane."""
        with self._lock:
            self._place(hosts)
        self.wake()

    def may_claim(self) -> bool:
        """Whether the request running in this thread may take a pending
        hostless request for itself now (a stack check's report takes the
        next check): as this loop would claim one for the thread's lane —
        the general lane (a backend's lane is kept for its backend), not
        stopping, a member."""
        return (getattr(self._lane, "any_host", False) and not self._stopping.is_set()
                and self.not_member() is None)

    def wake(self) -> None:
        """Look for requests now (e.g. after this engine queued one)."""
        self._wake.set()

    def _loop(self) -> None:
        wait = self.poll_interval
        while not self._stopping.is_set():
            try:
                busy = self._claim_and_submit()
                self.outage.recovered()
            except Exception as exc:  # a dead loop would leave the daemon up, claiming nothing
                if is_outage(exc):
                    # Requests stay pending in the database until it is back.
                    self._stopping.wait(self.outage.failed(exc))
                    continue
                LOG.exception("request loop failed; retrying")
                busy = False
            if busy:
                wait = self.poll_interval
                continue
            woken = self._wake.wait(wait)
            self._wake.clear()
            # Found nothing and nobody called: look less often, up to the cap.
            wait = self.poll_interval if woken else min(wait * 2, self.max_poll_interval)

    def _claim_and_submit(self) -> bool:
        """In each lane, claim what its free workers can take and submit it;
        True to look again at once (a lane claimed some and still has free
        workers), False to wait for a wake-up or the poll interval."""
        if self.not_member() is not None:
            # Out of the engines group (paused, cut off): a request claimed
            # now could not be locked, and a peer would abandon it.
            return False
        again = False
        for lane in self.lanes:
            with self._lock:
                free = lane.workers - len(lane.inflight)
            if free <= 0 or not (lane.hosts or lane.any_host):
                continue
            try:
                claimed = db_api.request_claim(self.db, lane.hosts, self.engine_id, free,
                                               any_host=lane.any_host)
            except Exception as exc:
                if is_outage(exc):
                    raise
                LOG.exception("claiming requests failed; retrying")
                continue
            for req in claimed:
                fut = tasks.submit_logged(
                    lane.executor, self._execute, req, lane.any_host,
                    what=f"request {req.id} ({req.action} {req.resource_type} "
                         f"{req.resource_id})")
                with self._lock:
                    lane.inflight.add(fut)
                fut.add_done_callback(functools.partial(self._done, lane))
            again = again or (bool(claimed) and free > len(claimed))
        return again

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def _done(self, lane: _Lane, fut: futurist.Future[object]) -> None:
        with self._lock:
            lane.inflight.discard(fut)
        self._wake.set()

    def _execute(self, req: models.Request, any_host: bool = False) -> None:
        self._lane.any_host = any_host
        request_context(req.id, req.resource_type, req.resource_id)
        what = f"{req.action} {req.resource_type} {req.resource_id}"
        LOG.info("request %s (%s) started", req.id, what)
        started = time.monotonic()
        handler = self.dispatch(req)
        metrics.REQUESTS_RUNNING.inc()  # every Exception is caught below: the dec runs
        try:
            outcome: Outcome[object] = handler(req) if handler is not None else \
                Outcome.failed(f"no handler for {req.resource_type} {req.action}")
        except Exception as exc:  # a bug or an unreachable service too: keep serving
            outcome = unexpected(exc, req.id, what)
        metrics.REQUESTS_RUNNING.dec()
        status, error, message = request_end(outcome, req.id, what)
        observe(req.resource_type, req.action, status, error, started)
        LOG.info("request %s (%s) %s in %.2fs%s", req.id, what, status,
                 time.monotonic() - started, f": {error}" if error else "")
        if outcome.result is Result.RECORDED:
            return
        try:
            # The database away: wait for it (back-off) rather than leave the
            # request 'running' for good; a stop gives up (reconciliation).
            for attempt in tenacity.Retrying(
                    retry=tenacity.retry_if_exception(is_outage),
                    wait=tenacity.wait_exponential(multiplier=self.poll_interval,
                                                   max=self.outage_max_interval),
                    stop=lambda _state: self._stopping.is_set(),
                    sleep=self._sleep, reraise=True):
                with attempt:
                    if status == vocab.REQUEST_PENDING:
                        db_api.request_release(self.db, req.id, self.engine_id, error or "")
                    else:
                        db_api.request_finish(self.db, req.id, self.engine_id, status, error,
                                              message, self.message_ttl)
        except Exception:
            LOG.exception("could not record the outcome of request %s", req.id)

    def stop(self, timeout: float) -> bool:
        """Stop claiming; wait up to ``timeout`` for running requests.
        Returns True if all finished."""
        self._stopping.set()
        self._wake.set()
        notify.unsubscribe(self.db, self.wake)
        for thread in (self._thread, self._listener):
            if thread is not None:
                thread.join()
        with self._lock:
            pending = [f for lane in self.lanes for f in lane.inflight]
        done = waiters.wait_for_all(pending, timeout=timeout) if pending else None
        finished = done is None or not done.not_done
        # Nothing is running any more (or we gave up on it): no need to wait
        # for futurist's idle workers to notice the shutdown.
        for lane in self.lanes:
            lane.executor.shutdown(wait=False)
        return finished
