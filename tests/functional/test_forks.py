"""An engine the harness forks (tests/functional/forks.py) is held as a
``Popen`` of the exec'ed script would be: the same pid as the engine's own
log lines, the same exit codes and signal deaths, the same ``wait``
timeout; so a test cannot tell the two apart, and SHAREMGR_TEST_DAEMON=exec
runs every test on the installed script."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from tests.functional import forks

pytestmark = pytest.mark.functional


@pytest.fixture(params=["fork", "exec"])
def how(request, monkeypatch):
    if request.param == "exec":
        monkeypatch.setenv("SHAREMGR_TEST_DAEMON", "exec")
    return request.param


def _logged_pid(engine) -> int:
    (pid,) = set(re.findall(r"^\S+ \S+ (\d+) INFO \S+ \[-\] share-manager up", engine.text(),
                            re.M))
    return int(pid)


def test_an_engine_ends_as_its_process_would(deployment, how):
    d = deployment()
    d.sync()
    first, second = d.start(), d.start()
    assert isinstance(first.proc, forks.Forked) == (how == "fork")
    assert _logged_pid(first) == first.proc.pid and _logged_pid(second) == second.proc.pid
    assert first.proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        first.proc.wait(0.2)

    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(60) == 0
    assert "share-manager stopped" in first.text()
    second.proc.kill()
    assert second.proc.wait(60) == -signal.SIGKILL
    assert second.proc.poll() == -signal.SIGKILL
    second.proc.send_signal(signal.SIGTERM)  # ended: nothing is sent, as with a Popen


def test_a_start_up_failure_exits_with_the_daemon_s_code(deployment, how):
    d = deployment(extra={"DEFAULT": {"heartbeat_interval": "not-a-number"}})
    engine = d.start(wait=False)
    assert engine.proc.wait(60) == 2
    assert "configuration error" in engine.text()


def test_an_engine_outlives_its_fork_server(deployment, monkeypatch):
    """The worker's fork server killed under a running engine: the engine
    still tells its end, the next start gets a new server, and the dead
    server's socket refuses at once (no child of it keeps it listening)."""
    monkeypatch.delenv("SHAREMGR_TEST_DAEMON", raising=False)
    d = deployment()
    d.sync()
    engine = d.start()
    old = forks._FORKS.address()
    server = forks._FORKS._proc
    assert server is not None
    server.kill()
    server.wait(10)
    with pytest.raises(ConnectionRefusedError):
        forks.connect(old, "sharectl", ["--version"], [0, 1, 2])
    second = d.start()
    assert isinstance(second.proc, forks.Forked) and forks._FORKS.address() != old
    engine.proc.send_signal(signal.SIGTERM)
    assert engine.proc.wait(60) == 0
    assert d.json("share", "create", "1", "--proto", "NFS", "--wait")["status"] == "available"
