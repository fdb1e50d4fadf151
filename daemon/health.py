"""The daemon's optional HTTP endpoint: ``/healthcheck`` and ``/metrics``.

Off unless ``[health] enabled``; bound to loopback unless ``bind_host``
says otherwise. One WSGI app on the standard library's ``wsgiref`` server
(with ``ThreadingMixIn``: a slow check never holds a scrape) in one thread
the daemon's ``Background`` owns and stops.

``/metrics`` is prometheus_client's own WSGI app on a registry of this
daemon: the shared metrics of ``common/metrics.py`` and the queue collector
on this daemon's database (one grouped query per scrape).

``/healthcheck`` (liveness) follows the style of Manila's per-process
healthcheck (oslo.middleware): a JSON body naming each check and why it
failed; 503 when the process cannot work — the database does not answer
``SELECT 1``, this engine is not a member of the coordination group, it has
not finished starting, or every one of its backends has failed — and 200
otherwise: ``OK``, or ``DEGRADED`` when some backends failed while others
serve (a restart would not mend an array that is down, and the others must
go on). ``/readiness`` says whether to send the engine work: 200 only when
it is live, at least one backend serves and it is not drained (``[health]
disable_by_file`` exists), with the backends that serve.
The database and coordination checks run on a small pool and are given up
after ``[health] check_timeout``: a hung server makes the probe answer 503
in time instead of hanging the probe.
"""

from __future__ import annotations

import json
import logging as std_logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from oslo_log import log as logging
from prometheus_client import CollectorRegistry, make_wsgi_app
from sharemgr.common import metrics, tasks, vocab
from sharemgr.daemon.parts import started
from sharemgr.db import status as db_status
from sharemgr.manager import capabilities

if TYPE_CHECKING:
    from sharemgr.db.engine import Database
    from sharemgr.manager.coordination import Coordinator

LOG = logging.getLogger(__name__)

Environ = dict[str, object]  # a WSGI request's environment


class Engine(Protocol):
    """What the endpoint reads of its daemon, at each check (the
    ShareManagerService; ``membership``, ``runner`` and ``backend_states``
    too where it has them)."""

    @property
    def db(self) -> Database | None: ...  # None until start() connects

    @property
    def coordinator(self) -> Coordinator | None: ...

    @property
    def engine_id(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def hosts(self) -> list[str]: ...  # 'host@backend' of the backends that serve

    @property
    def drivers(self) -> Mapping[str, object]: ...  # backend -> its driver


class HealthUnavailable(Exception):
    """The endpoint cannot listen (one line: the address and why)."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a probe still being answered never holds the stop


class _Server6(_Server):
    address_family = socket.AF_INET6  # bind_host = ::1 or another IPv6 address


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        # Probes come every few seconds: the access log goes to debug.
        LOG.debug("health endpoint: %s: " + format, self.address_string(), *args)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def backend_states(service: Engine) -> dict[str, tuple[bool, str]]:
    """Each backend's state as the daemon knows it: ``{backend: (ok,
    detail)}``. Today a backend is in ``service.drivers`` only once its
    driver is loaded and set up (a load failure stops the daemon), so each
    is up. Where the daemon keeps a per-backend state (``backend_states``:
    backend -> state, a setup being retried), a state other than set up is
    a failure, with its text."""
    known = getattr(service, "backend_states", None)
    if isinstance(known, dict):
        return {name: (str(state) == vocab.BACKEND_UP, str(state))
                for name, state in known.items()}
    return {name: (True, "set up") for name in service.drivers}


def _listen(bind_host: str, port: int) -> _Server:
    """The endpoint's server, bound and listening (no application yet);
    HealthUnavailable, in one line, if it cannot be."""
    try:
        return (_Server6 if ":" in bind_host else _Server)((bind_host, port), _Handler)
    except OSError as exc:
        raise HealthUnavailable(
            f"[health] cannot listen on {bind_host}:{port}: {exc.strerror or exc}")


def cannot_listen(bind_host: str, port: int) -> str | None:
    """Why the endpoint could not listen on ``bind_host:port`` now (None:
    it could), found by binding as the endpoint does and letting go: a
    parent checks its children's ports before it forks any."""
    try:
        _listen(bind_host, port).server_close()
    except HealthUnavailable as exc:
        return str(exc)
    return None


class HealthServer:
    """The endpoint of one daemon (``service``: its ``db``, ``coordinator``,
    ``engine_id``, ``host`` and ``drivers``, read at each check)."""

    def __init__(self, service: Engine, bind_host: str, port: int, check_timeout: float,
                 states: Callable[[Engine], dict[str, tuple[bool, str]]] = backend_states,
                 disable_by_file: str | None = None) -> None:
        self.service = service
        self.disable_by_file = disable_by_file
        self.check_timeout = check_timeout
        self.states = states
        self.registry: CollectorRegistry = metrics.daemon_registry(
            # Before start() connects, a scrape's read fails: logged, the series left out.
            metrics.QueueCollector(lambda: db_status.request_counts(started(service.db)),
                                   vocab.REQUEST_OPEN, lambda: service.hosts),
            metrics.BackendCollector(lambda: self.states(service)),
            metrics.PoolCollector(lambda: capabilities.pool_states(started(service.db))))
        self._metrics_app = make_wsgi_app(self.registry)
        # A check that hangs keeps its worker until it returns (bounded by the
        # database's connect_timeout); later probes use the other workers, or
        # time out waiting for one: either way they answer in time.
        self._pool = futures.ThreadPoolExecutor(max_workers=4,
                                                thread_name_prefix="health-check")
        try:
            self._server = _listen(bind_host, port)
        except HealthUnavailable:
            self._pool.shutdown(wait=False)
            raise
        self._server.set_app(self._app)
        self.address = self._server.server_address[:2]
        self._lock = threading.Lock()
        self._failed: list[str] = []
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        self._thread = tasks.start_thread(self._server.serve_forever, name="health-endpoint")
        LOG.info("health endpoint listening on %s (/healthcheck, /metrics)", self.url)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # Checks --------------------------------------------------------------------

    def _timed(self, name: str, fn: Callable[[], tuple[bool, str]]) -> Check:
        try:
            ok, detail = self._pool.submit(fn).result(timeout=self.check_timeout)
        except futures.TimeoutError:
            ok, detail = False, f"no answer in {self.check_timeout:g}s"
        except Exception as exc:  # the failure is the check's answer
            ok, detail = False, _one_line(exc)
        return Check(name, ok, detail)

    def _database(self) -> tuple[bool, str]:
        db = self.service.db
        if db is None:
            return False, "not connected yet"
        db.check()  # connect and SELECT 1; one line if it fails
        return True, "answers"

    def _coordination(self) -> tuple[bool, str]:
        coord = self.service.coordinator
        if coord is None:
            return False, "not started yet"
        membership = getattr(self.service, "membership", None)
        if membership is not None:
            state: tuple[bool, str] = membership.state()
            return state
        if self.service.engine_id in coord.engines():
            return True, "member of the engines group"
        return False, "this engine is not a member of the engines group"

    def checks(self) -> list[Check]:
        found = [self._timed("database", self._database),
                 self._timed("coordination", self._coordination)]
        # Up once the request runner takes requests (the last step of start).
        up = getattr(self.service, "runner", None) is not None
        found.append(Check("engine", up, "taking requests" if up else "starting"))
        states = self.states(self.service)
        found += [Check(f"backend:{name}", ok, detail)
                  for name, (ok, detail) in sorted(states.items())]
        return found

    # WSGI ----------------------------------------------------------------------

    def _app(self, environ: Environ, start_response: Callable[..., object]
             ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        try:
            if path == "/metrics":
                body: Iterable[bytes] = self._metrics_app(environ, start_response)
                return body
            if path == "/healthcheck":
                return self._healthcheck(environ, start_response)
            if path == "/readiness":
                return self._readiness(environ, start_response)
            return _reply(start_response, "404 Not Found",
                          {"error": "not found",
                           "paths": ["/healthcheck", "/metrics", "/readiness"]})
        except Exception:  # a bug: the probe sees a 500, the log the traceback
            LOG.exception("health endpoint: %s failed", path)
            return _reply(start_response, "500 Internal Server Error", {"error": "internal"})

    def _healthcheck(self, environ: Environ, start_response: Callable[..., object]
                     ) -> Iterable[bytes]:
        found = self.checks()
        healthy = _live(found)
        failed = [f"{c.name}: {c.detail}" for c in found if not c.ok]
        # A probe comes every few seconds: log a change, not every answer.
        with self._lock:
            changed, self._failed = failed != self._failed, failed
        if changed and failed:
            # Degraded: the failed backend has said so itself, at WARNING.
            LOG.log(std_logging.INFO if healthy else std_logging.WARNING, "healthcheck %s: %s",
                    "degraded" if healthy else "fails", "; ".join(failed))
        elif changed:
            LOG.info("healthcheck passes")
        body = {
            "status": vocab.HEALTH_FAILED if not healthy else vocab.HEALTH_DEGRADED if failed
            else vocab.HEALTH_OK,
            "host": self.service.host,
            "engine_id": self.service.engine_id,
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in found},
        }
        status = "200 OK" if healthy else "503 Service Unavailable"
        return _reply(start_response, status, body,
                      head=environ.get("REQUEST_METHOD") == "HEAD")

    def _readiness(self, environ: Environ, start_response: Callable[..., object]
                   ) -> Iterable[bytes]:
        found = self.checks()
        serving = [c.name.split(":", 1)[1] for c in found
                   if c.name.startswith("backend:") and c.ok]
        why = [f"{c.name}: {c.detail}" for c in found
               if not c.ok and not c.name.startswith("backend:")]
        if not serving:
            why.append("no backend serves")
        if self.disable_by_file and os.path.exists(self.disable_by_file):
            why.append(f"drained: {self.disable_by_file} exists")
        body = {"ready": not why, "reasons": why, "backends_serving": serving,
                "host": self.service.host, "engine_id": self.service.engine_id}
        return _reply(start_response, "503 Service Unavailable" if why else "200 OK", body,
                      head=environ.get("REQUEST_METHOD") == "HEAD")


def _live(found: list[Check]) -> bool:
    """Whether the process can work: every check but the backends' passes,
    and at least one backend serves when it has any."""
    backends = [c for c in found if c.name.startswith("backend:")]
    others = [c for c in found if not c.name.startswith("backend:")]
    return all(c.ok for c in others) and (not backends or any(c.ok for c in backends))


def _reply(start_response: Callable[..., object], status: str, body: Mapping[str, object],
           head: bool = False) -> list[bytes]:
    data = json.dumps(body, sort_keys=True).encode() + b"\n"
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [] if head else [data]
