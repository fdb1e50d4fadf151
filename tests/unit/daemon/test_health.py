"""The health endpoint in-process, on a stand-in for the daemon: what
/healthcheck answers when each check passes or fails (a hung one included),
/metrics, and a port already in use."""

from __future__ import annotations

import json
import logging
import socket
import threading
import types
import urllib.error
import urllib.request

import pytest
from sharemgr.common import vocab
from sharemgr.daemon import health
from sharemgr.db import api


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


class _Coordinator:
    def __init__(self, members: set[str], hang: threading.Event | None = None) -> None:
        self.members = members
        self.hang = hang

    def engines(self) -> set[str]:
        if self.hang is not None:
            self.hang.wait(30)
        return self.members


def _service(db=None, coordinator=None, runner=None, drivers=None):
    return types.SimpleNamespace(db=db, coordinator=coordinator, runner=runner,
                                 drivers=drivers or {}, host="hostA", engine_id="hostA.e1",
                                 hosts=[f"hostA@{b}" for b in drivers or {}])


@pytest.fixture
def serve():
    started = []

    def start(service, timeout: float = 5.0, **kwargs) -> health.HealthServer:
        server = health.HealthServer(service, "127.0.0.1", 0, timeout, **kwargs)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_healthy(serve, sqlite_db):
    server = serve(_service(sqlite_db, _Coordinator({"hostA.e1"}), runner=object(),
                            drivers={"dummy": object(), "other": object()}))
    code, body, ctype = _get(server.url + "/healthcheck")
    assert code == 200 and ctype == "application/json"
    answer = json.loads(body)
    assert answer["status"] == "OK" and answer["engine_id"] == "hostA.e1"
    assert answer["checks"] == {
        "database": {"ok": True, "detail": "answers"},
        "coordination": {"ok": True, "detail": "member of the engines group"},
        "engine": {"ok": True, "detail": "taking requests"},
        "backend:dummy": {"ok": True, "detail": "set up"},
        "backend:other": {"ok": True, "detail": "set up"},
    }
    head = urllib.request.Request(server.url + "/healthcheck", method="HEAD")
    with urllib.request.urlopen(head, timeout=30) as resp:
        assert resp.status == 200 and resp.read() == b""


def test_starting_is_unhealthy(serve):
    server = serve(_service())
    code, body, _ = _get(server.url + "/healthcheck")
    assert code == 503
    checks = json.loads(body)["checks"]
    assert json.loads(body)["status"] == "FAILED"
    assert checks["database"] == {"ok": False, "detail": "not connected yet"}
    assert checks["coordination"] == {"ok": False, "detail": "not started yet"}
    assert checks["engine"] == {"ok": False, "detail": "starting"}


def test_not_a_member_and_a_failing_backend(serve, sqlite_db):
    svc = _service(sqlite_db, _Coordinator({"someone.else"}), runner=object(),
                   drivers={"dummy": object()})
    svc.backend_states = {"dummy": "up", "flaky": "failed (no route to array)"}
    code, body, _ = _get(serve(svc).url + "/healthcheck")
    assert code == 503
    checks = json.loads(body)["checks"]
    assert checks["coordination"]["ok"] is False
    assert checks["backend:dummy"]["ok"] is True
    assert checks["backend:flaky"] == {"ok": False,
                                       "detail": "failed (no route to array)"}


def test_one_failed_backend_of_two_is_live_and_degraded(serve, sqlite_db, tmp_path):
    """A backend whose array is down cannot be mended by a restart, and the
    other must go on: /healthcheck 200 DEGRADED; /readiness names the
    backend that serves. Every backend failed: 503 for both. The drain
    file: not ready, still live."""
    drain = tmp_path / "drain"
    svc = _service(sqlite_db, _Coordinator({"hostA.e1"}), runner=object(),
                   drivers={"dummy": object()})
    svc.backend_states = {"dummy": "up", "flaky": "failed (no route to array)"}
    server = serve(svc, disable_by_file=str(drain))
    code, body, _ = _get(server.url + "/healthcheck")
    answer = json.loads(body)
    assert (code, answer["status"]) == (200, "DEGRADED")
    assert answer["checks"]["backend:flaky"]["ok"] is False
    code, body, _ = _get(server.url + "/readiness")
    assert code == 200 and json.loads(body)["backends_serving"] == ["dummy"]
    text = _get(server.url + "/metrics")[1].decode()
    assert 'sharemgr_backend_up{backend="dummy"} 1.0' in text
    assert 'sharemgr_backend_up{backend="flaky"} 0.0' in text
    from sharemgr.common.version import version
    assert f'sharemgr_build_info{{version="{version()}"}} 1.0' in text

    drain.write_text("")
    code, body, _ = _get(server.url + "/readiness")
    assert code == 503 and json.loads(body)["reasons"] == [f"drained: {drain} exists"]
    assert _get(server.url + "/healthcheck")[0] == 200
    drain.unlink()

    svc.backend_states = {"dummy": "failed (gone)", "flaky": "initializing"}
    code, body, _ = _get(server.url + "/healthcheck")
    assert (code, json.loads(body)["status"]) == (503, "FAILED")
    code, body, _ = _get(server.url + "/readiness")
    assert code == 503 and json.loads(body)["reasons"] == ["no backend serves"]


def test_a_hung_check_answers_in_time(serve, sqlite_db):
    hang = threading.Event()
    try:
        server = serve(_service(sqlite_db, _Coordinator({"hostA.e1"}, hang), runner=object()),
                       timeout=0.2)
        code, body, _ = _get(server.url + "/healthcheck")
        assert code == 503
        checks = json.loads(body)["checks"]
        assert checks["coordination"] == {"ok": False, "detail": "no answer in 0.2s"}
        assert checks["database"]["ok"] is True
    finally:
        hang.set()


def test_metrics_and_unknown_paths(serve, sqlite_db):
    with sqlite_db.session() as session:
        api.request_add_tx(session, vocab.SHARE_INSTANCE, "r1", "create", "hostB@dummy")
    server = serve(_service(sqlite_db, drivers={"dummy": object()}))
    code, body, ctype = _get(server.url + "/metrics")
    assert code == 200 and ctype.startswith("text/plain")
    text = body.decode()
    assert 'sharemgr_requests{host="hostB@dummy",status="pending"} 1.0' in text
    # This engine's own host shows even with nothing open.
    assert 'sharemgr_requests{host="hostA@dummy",status="pending"} 0.0' in text
    code, body, _ = _get(server.url + "/other")
    assert code == 404 and json.loads(body)["paths"] == ["/healthcheck", "/metrics",
                                                         "/readiness"]


def test_a_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(health.HealthUnavailable) as exc:
            health.HealthServer(_service(), "127.0.0.1", port, 1.0)
    assert str(exc.value) == f"[health] cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_port_is_checked_as_the_endpoint_binds_it_and_let_go():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert health.cannot_listen("127.0.0.1", port) == \
            f"[health] cannot listen on 127.0.0.1:{port}: Address already in use"
    # Free: the check leaves nothing bound, and the endpoint then listens there.
    assert health.cannot_listen("127.0.0.1", port) is None
    server = health.HealthServer(_service(), "127.0.0.1", port, 1.0)
    server.start()
    server.stop()


def test_ipv6_loopback():
    try:
        server = health.HealthServer(_service(), "::1", 0, 1.0)
    except health.HealthUnavailable as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    try:
        server.start()
        assert server.url == f"http://[::1]:{server.address[1]}"
        code, _, _ = _get(server.url + "/healthcheck")
        assert code == 503
    finally:
        server.stop()


def test_a_change_of_answer_is_logged_once(serve, caplog):
    caplog.set_level(logging.INFO, logger="sharemgr.daemon.health")
    svc = _service()
    server = serve(svc)
    for _ in range(3):
        _get(server.url + "/healthcheck")
    assert caplog.text.count("healthcheck fails: database: not connected yet") == 1
    svc.coordinator = _Coordinator({"hostA.e1"})
    svc.runner = object()
    svc.db = types.SimpleNamespace(check=lambda: None)
    code, _, _ = _get(server.url + "/healthcheck")
    assert code == 200 and caplog.text.count("healthcheck passes") == 1
