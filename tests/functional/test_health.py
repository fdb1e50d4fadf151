"""The health endpoint and ``sharectl status`` through a real share-manager:
on SQLite + file locks and on PostgreSQL + Redis, /healthcheck answers 200
with its checks, a share's create moves the request and driver-call
histograms of /metrics, a request no engine takes shows in the pending
gauge and in ``sharectl status``. Off by default: no socket listens. A port
in use stops the start with one line."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

import psutil
import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api

from tests.conftest import PG_ADMIN
from tests.functional.harness import SETUPS, database, servers
from tests.functional.test_daemon import one_error_line

pytestmark = pytest.mark.functional

HEALTH = {"health": {"enabled": "true", "port": "0"},
          "DEFAULT": {"startup_reconciliation_wait_seconds": "0"}}


def _url(engine) -> str:
    found = re.search(r"health endpoint listening on (http://\S+)", engine.text())
    assert found, engine.text()[-2000:]
    return found.group(1)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus exposition (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(extra=HEALTH, **servers(request))
    d.sync()
    return d, request.param, d.sections["database"].get("connection")


def test_health_metrics_and_status(setup):
    d, setup_name, pg = setup
    engine = d.start()
    url = _url(engine)
    code, body = _get(url + "/healthcheck")
    answer = json.loads(body)
    assert code == 200 and answer["status"] == "OK", body
    assert set(answer["checks"]) == {"database", "coordination", "engine", "backend:dummy"}
    assert all(c["ok"] for c in answer["checks"].values())

    d.json("share", "create", "1", "--proto", "NFS", "--wait")
    _, text = _get(url + "/metrics")
    assert _sample(text, "sharemgr_request_duration_seconds_count", action="create",
                   outcome="done", resource_type="share_instance") == 1
    assert _sample(text, "sharemgr_driver_call_duration_seconds_count", backend="dummy",
                   method="create_share", outcome="ok") == 1
    assert _sample(text, "sharemgr_driver_call_duration_seconds_count", backend="dummy",
                   method="get_share_stats", outcome="ok") >= 1

    # A request for a host no engine serves stays pending: the gauge and
    # the status screen show it.
    db, _ = database(d)
    try:
        with db.session() as session:
            api.request_add_tx(session, vocab.SHARE_INSTANCE, "nowhere", "create",
                               "hostB@dummy")
    finally:
        db.dispose()
    _, text = _get(url + "/metrics")
    assert _sample(text, "sharemgr_requests", host="hostB@dummy", status="pending") == 1

    engine.wait_for_log("reconciliation pass 1 (startup)")
    status = d.json("status")
    assert status["engines"]["alive"] == 1 and status["engines"]["running"] == 1
    assert status["engines"]["engines"][0]["alive"] is True
    assert [b["host"] for b in status["backends"]] == [f"{d.host}@dummy"]
    assert status["queue"] == {"hostB@dummy": {"pending": 1, "running": 0}}
    assert status["stuck"] == {}
    assert status["last_pass"]["id"] == 1 and status["last_pass"]["trigger"] == "startup"
    assert status["last_pass"]["status"] == "finished"
    table = d.sharectl("status").stdout
    assert "1 alive of 1 running" in table and "hostB@dummy: pending 1, running 0" in table
    if setup_name == "embedded":
        assert engine.terminate() == 0
        return

    # The database goes away (dropped, its connections ended): the probe
    # says so with 503 while the rest still passes.
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE {sa.engine.make_url(pg).database} WITH (FORCE)")
    admin.dispose()
    code, body = _get(url + "/healthcheck")
    answer = json.loads(body)
    assert code == 503 and answer["status"] == "FAILED", body
    assert answer["checks"]["database"]["ok"] is False, body
    assert answer["checks"]["coordination"]["ok"] is True, (body, engine.text()[-3000:])


def test_off_by_default_and_a_port_in_use(deployment):
    d = deployment()
    d.sync()
    engine = d.start()
    listening = [c for c in psutil.Process(engine.proc.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening == [] and "health endpoint" not in engine.text()
    assert engine.terminate() == 0

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = d.write_config(d.root / "busy.conf",
                                health={"enabled": "true", "port": str(port)})
        out = d.run_manager(config=config)
    assert out.returncode == 1
    assert one_error_line(out).endswith(
        f"share-manager cannot start: [health] cannot listen on 127.0.0.1:{port}: "
        "Address already in use")
