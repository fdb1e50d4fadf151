"""``[DEFAULT] workers``: several engine processes under one share-manager
parent (daemon/workers.py), on PostgreSQL + Redis as a user runs them: each
child a whole engine with its own health endpoint; a child killed mid-call
is replaced and what it left is settled; SIGHUP and SIGTERM reach every
child; and a schema the children cannot run on stops the parent before any
is forked."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import urllib.request

import pytest
from sharemgr.common import vocab

from tests.functional.harness import SETUPS, database, intake, servers, wait_until
from tests.functional.local_harness import free_ports

UP = "share-manager up: host"  # a child's; the parent's line differs


def _engines(parent) -> dict[str, int]:
    """Engine id → pid, from the children's start lines (the log's third
    field is the process id)."""
    return {m.group(2): int(m.group(1)) for m in re.finditer(
        r"^\S+ \S+ (\d+) INFO \S+ \[-\] share-manager starting: engine (\S+),",
        parent.text(), re.M)}


def _health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=10) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def _status(db, share_id):
    from sharemgr.db import resources

    return resources.primary_instance(db, share_id).status


@pytest.fixture(params=SETUPS)
def setup(request) -> tuple[str, dict]:
    """The setup's name and its ``Deployment`` keywords."""
    return request.param, servers(request)


def test_engine_processes_are_engines_replaced_and_signalled(deployment, setup, tmp_path):
    name, urls = setup
    gates = tmp_path / "gates"
    gates.mkdir()
    port = free_ports(2)  # one per engine process
    d = deployment(**urls, extra={
        "DEFAULT": {"workers": "2", "peer_reconciliation_grace_seconds": "1",
                    "startup_reconciliation_wait_seconds": "0"},
        "health": {"enabled": "true", "port": str(port)},
        "dummy": {"dummy_gate_dir": str(gates), "dummy_gate_poll_interval": "0.05"}})
    d.sync()
    db, _ = database(d)
    parent = d.start(wait=False)
    wait_until(lambda: parent.text().count(UP) == 2, timeout=60, what="two engines up")
    if name == "embedded":
        assert "2 engine processes on SQLite: one of them writes at a time" in parent.text()
    first = _engines(parent)
    assert len(first) == 2 and os.getpid() not in first.values()
    assert {s["engine_id"] for s in d.json("service", "list") if s["alive"]} == set(first)
    # Each child answers on its own port, as itself.
    assert {_health(port)["engine_id"], _health(port + 1)["engine_id"]} == set(first)

    # Shares made by the children.
    api = intake(d)
    made = [api.create_share(1, "NFS", name=f"w{i}").id for i in range(6)]
    wait_until(lambda: all(_status(db, s) == vocab.AVAILABLE for s in made), timeout=60,
               what="six shares")

    # A child killed inside a driver call: another is started in its place,
    # and the share it left is settled (not left 'creating').
    (gates / "create_share.held-").touch()

    def creates():
        return [c for c in d.backend("calls") if c["method"] == "create_share"]

    before = len(creates())
    held = api.create_share(1, "NFS", name="held-1").id
    call = wait_until(lambda: creates()[before:], what="a child at the create's gate")[0]
    victim = call["engine_id"]
    os.kill(first[victim], signal.SIGKILL)
    wait_until(lambda: parent.text().count(UP) == 3, timeout=60, what="a new engine up")
    assert parent.proc.poll() is None
    assert re.search(r"engine process [01] killed by signal 9; starting another",
                     parent.text())
    (gates / "create_share.held-").unlink()
    wait_until(lambda: _status(db, held) not in vocab.TRANSIENT_STATUSES, timeout=60,
               what="the held share settled")
    second = _engines(parent)
    alive = {s["engine_id"] for s in d.json("service", "list") if s["alive"]}
    assert victim not in alive and len(alive) == 2 and alive <= set(second)

    # SIGUSR2 to a child logs its threads' stacks (cotyledon owns its other
    # signals) and leaves it running.
    child = next(pid for engine, pid in second.items() if engine in alive)
    os.kill(child, signal.SIGUSR2)
    wait_until(lambda: re.search(rf"^\S+ \S+ {child} WARNING \S+ \[-\] the stacks of \d+ "
                                 r"threads \(SIGUSR2\)", parent.text(), re.M),
               what="the child's stacks")
    assert os.path.exists(f"/proc/{child}") and parent.text().count(UP) == 3

    # SIGHUP to the parent reaches both children; SIGTERM stops them all.
    reloads = parent.text().count("got SIGHUP")
    parent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: parent.text().count("got SIGHUP") == reloads + 2, what="two reloads")
    parent.proc.send_signal(signal.SIGTERM)
    assert parent.proc.wait(90) == 0
    stopped = set(re.findall(r"share-manager stopped: engine (\S+)", parent.text()))
    assert stopped == alive
    for pid in second.values():
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    db.dispose()


def test_a_schema_the_children_cannot_run_on_stops_the_parent(deployment, pg_url):
    """No child is forked to fail in a loop: the parent checks the schema."""
    d = deployment(db_url=pg_url, extra={"DEFAULT": {"workers": "2"}})
    out = d.run_manager(timeout=60)
    assert out.returncode == 1
    errors = [line for line in (out.stdout + out.stderr).splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "share-manager cannot start: database" in errors[0], errors
    assert "engine processes" not in out.stdout + out.stderr


def test_a_health_port_in_use_stops_the_parent(deployment):
    """Child N listens on [health] port + N: the second's port taken (by
    another program) stops the parent with one line, before any child is
    forked. Before, that child failed its start and was started again, over
    and over, while the first served."""
    port = free_ports(2)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        d = deployment(extra={"DEFAULT": {"workers": "2"},
                              "health": {"enabled": "true", "port": str(port)}})
        d.sync()
        out = d.run_manager(timeout=60)
    assert out.returncode == 1
    text = out.stdout + out.stderr
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert f"share-manager cannot start: [health] cannot listen on 127.0.0.1:{port + 1}: " \
        "Address already in use (engine process 1 of 2 listens on [health] port + 1)" \
        in errors[0]
    assert "engine processes" not in text and "Traceback" not in text


def test_systemd_hears_ready_once_every_child_is_up(deployment, tmp_path):
    """Type=notify with NotifyAccess=main: the parent says READY=1 once both
    children are up (cotyledon alone says it as it forks), feeds the
    watchdog, and says STOPPING=1 on SIGTERM."""
    d = deployment(extra={"DEFAULT": {"workers": "2"}})
    d.sync()
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(60)
    try:
        parent = d.start(wait=False, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
        states = []
        while not any("READY=1" in m for m in states):
            states.append(sock.recv(4096).decode())
            if "READY=1" in states[-1]:
                assert parent.text().count(UP) == 2, parent.text()[-3000:]
        while "WATCHDOG=1" not in sock.recv(4096).decode():
            pass
        parent.proc.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in sock.recv(4096).decode():
            pass
        assert parent.proc.wait(60) == 0
    finally:
        sock.close()
    assert parent.text().count("share-manager stopped: engine") == 2
