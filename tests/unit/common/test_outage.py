"""Outages of the database or the coordination backend: what counts as one,
the back-off, and the two log lines per outage (common/outage.py)."""

from __future__ import annotations

import logging
import os
import socket
import time

import pytest
import redis.exceptions
import sqlalchemy as sa
from sharemgr.common.outage import Backoff, OutageLog
from sharemgr.daemon import systemd
from sharemgr.db.engine import DatabaseUnavailable
from sharemgr.manager import config
from sharemgr.manager.outage import is_outage
from tooz import coordination


def _operational() -> sa.exc.OperationalError:
    return sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection\n"
                                                            "This probably means ..."))


@pytest.mark.parametrize("exc,outage", [
    (_operational(), True),
    (sa.exc.InterfaceError("SELECT 1", {}, Exception("connection already closed")), True),
    (DatabaseUnavailable("cannot connect"), True),
    (coordination.ToozConnectionError("redis gone"), True),
    (coordination.ToozError("Redis driver has not been started"), True),
    # tooz's Redis driver lets these through from run_watchers.
    (redis.exceptions.ConnectionError("Error 111 connecting"), True),
    (redis.exceptions.TimeoutError("Timeout reading from socket"), True),
    (sa.exc.IntegrityError("INSERT", {}, Exception("duplicate key")), False),
    (sa.exc.DataError("INSERT", {}, Exception("value too long")), False),
    (KeyError("bug"), False),
])
def test_what_counts_as_an_outage(exc, outage):
    assert is_outage(exc) is outage


def _lines(caplog, level):
    return [r.getMessage() for r in caplog.records
            if r.name == "sharemgr.common.outage" and r.levelno == level]


def test_back_off_doubles_up_to_its_cap():
    backoff = Backoff("request loop", 0.2, 1.0, log=OutageLog())
    waits = [backoff.failed(_operational()) for _ in range(5)]
    assert waits == [0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.recovered()
    assert backoff.failed(_operational()) == 0.2  # a new outage starts over


def test_one_warning_and_one_info_per_outage_whatever_the_tasks(caplog):
    caplog.set_level(logging.INFO)
    log = OutageLog()
    loop, heartbeat = Backoff("request loop", 0.1, 1, log), Backoff("heartbeat", 1, 5, log)
    for _ in range(3):
        loop.failed(_operational())
        heartbeat.failed(_operational())
    assert _lines(caplog, logging.WARNING) == [
        "database or coordination unavailable (request loop), retrying with back-off: "
        "OperationalError: server closed the connection"]
    heartbeat.recovered()
    loop.recovered()  # the outage is over already: no second line
    (info,) = _lines(caplog, logging.INFO)
    assert info.startswith("database and coordination reachable again (heartbeat) after ")
    # The next outage has its own WARNING.
    loop.failed(_operational())
    assert len(_lines(caplog, logging.WARNING)) == 2


def test_a_task_that_never_failed_does_not_end_the_outage(caplog):
    caplog.set_level(logging.INFO)
    log = OutageLog()
    Backoff("heartbeat", 1, 5, log).failed(_operational())
    Backoff("membership", 1, 5, log).recovered()
    assert log.ongoing and _lines(caplog, logging.INFO) == []


def test_systemd_notifier_sends_ready_watchdog_stopping(tmp_path, monkeypatch):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        monkeypatch.setenv("WATCHDOG_USEC", "3000000")
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
        notifier = systemd.Notifier()
        assert notifier.watchdog_interval == 1.5
        notifier.ready()
        notifier.watchdog()
        notifier.stopping()
        got = [sock.recv(1024).decode().splitlines()[0] for _ in range(3)]
    assert got == ["READY=1", "WATCHDOG=1", "STOPPING=1"]


def test_systemd_notifier_speaks_to_an_abstract_socket(monkeypatch):
    name = f"sharemgr-notify-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        systemd.Notifier().ready()
        assert sock.recv(1024).decode().splitlines()[0] == "READY=1"


def test_systemd_notifier_is_quiet_without_systemd(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    notifier = systemd.Notifier()
    assert notifier.watchdog_interval == 0.0
    notifier.ready()  # nothing to send to, no error
    monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent")
    monkeypatch.setenv("WATCHDOG_PID", "1")  # another process is watched
    assert systemd.Notifier().watchdog_interval == 0.0


def test_the_options_read_at_each_use_are_mutable():
    mutable = {opt.name for group, opts in config.list_opts() for opt in opts if opt.mutable}
    assert mutable == {"graceful_shutdown_timeout", "backend_setup_retry_interval",
                       "backend_setup_retry_max_interval"}


def test_a_periodic_task_skips_its_runs_in_an_outage_and_raises_only_bugs(caplog,
                                                                           monkeypatch):
    from sharemgr.common import outage as common_outage
    from sharemgr.daemon.background import Background

    caplog.set_level(logging.INFO)
    # The process's outage log (a periodic task's Backoff reports there),
    # as it was before afterwards.
    monkeypatch.setattr(common_outage.OUTAGES, "ongoing", False)
    calls, errors = [], [_operational(), _operational()]

    def heartbeat():
        calls.append(1)
        if errors:
            raise errors.pop(0)

    clock = [1000.0]  # time.monotonic, moved by the test
    monkeypatch.setattr(common_outage.time, "monotonic", lambda: clock[0])
    bg = Background()
    bg.every(60.0, "heartbeat", heartbeat, outage_max_interval=600)
    (task, _args, _kw) = bg._periodic[0]
    task()  # fails: the outage starts, no exception out of the task
    clock[0] += 59
    task()  # within the back-off (60 s): skipped, not called
    assert len(calls) == 1
    assert len(_lines(caplog, logging.WARNING)) == 1
    clock[0] += 2
    task()  # fails again: still one WARNING; the next wait is 120 s
    clock[0] += 119
    task()  # skipped
    clock[0] += 2
    task()  # passes: the INFO
    assert len(calls) == 3 and len(_lines(caplog, logging.WARNING)) == 1
    assert len(_lines(caplog, logging.INFO)) == 1

    def bug():
        raise KeyError("not an outage")

    bg.every(60.0, "buggy", bug)
    with pytest.raises(KeyError):  # futurist logs it with its traceback (tasks.py)
        bg._periodic[1][0]()


def test_self_healing_rounds_back_off_in_an_outage_without_a_traceback(caplog, monkeypatch):
    # A self-healing round runs on the pass runner's worker, not inside the
    # periodic task's back-off: the healer reports the outage itself.
    from types import SimpleNamespace

    from sharemgr.common import outage as common_outage
    from sharemgr.daemon import heal

    caplog.set_level(logging.INFO)
    monkeypatch.setattr(common_outage.OUTAGES, "ongoing", False)
    errors = [_operational()]

    def stack_heads(_db):
        if errors:
            raise errors.pop(0)
        return []

    monkeypatch.setattr(heal.stack_work, "stack_heads", stack_heads)
    clock = [1000.0]
    monkeypatch.setattr(common_outage.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(heal.time, "monotonic", lambda: clock[0])
    healer = heal.StackHealer(SimpleNamespace(checker=SimpleNamespace(rec=SimpleNamespace(
        db=None))))
    rounds = []

    def submit(fn, _what):
        rounds.append(1)
        fn()

    healer.tick(submit)  # the round meets the outage: one WARNING, nothing raised
    healer.tick(submit)  # within its back-off: no round
    assert len(rounds) == 1 and len(_lines(caplog, logging.WARNING)) == 1
    clock[0] += 2
    healer.tick(submit)  # back: the INFO
    assert len(rounds) == 2 and len(_lines(caplog, logging.INFO)) == 1
    assert not [r for r in caplog.records if r.exc_info]

    errors.append(KeyError("a bug"))
    with pytest.raises(KeyError):  # a bug still reaches tasks.py's traceback
        healer.tick(submit)
    healer.tick(submit)  # and the next tick runs a round again
    assert len(rounds) == 4


def test_an_offloaded_task_runs_on_its_own_thread_one_run_at_a_time(caplog, monkeypatch):
    # A driver call in a periodic task (backend stats) must not hold up the
    # heartbeat, the membership or the lease renewals; an outage in it is
    # still one WARNING without a traceback, and a hung run does not hold up
    # the stop.
    import threading

    from sharemgr.common import outage as common_outage
    from sharemgr.daemon import background
    from sharemgr.daemon.background import Background

    caplog.set_level(logging.INFO)
    monkeypatch.setattr(common_outage.OUTAGES, "ongoing", False)
    monkeypatch.setattr(background, "OFFLOAD_STOP_WAIT", 0.2)
    release, entered, calls = threading.Event(), threading.Event(), []
    errors = [_operational()]

    def stats():
        calls.append(threading.current_thread().name)
        if errors:
            raise errors.pop(0)
        entered.set()
        release.wait(10)

    bg = Background()
    bg.every(0.01, "backend_stats", stats, outage_max_interval=0.01, offload=True)
    task = bg._periodic[0][0]
    task()  # the outage: one WARNING, on the task's own thread
    _wait(lambda: len(_lines(caplog, logging.WARNING)) == 1)
    time.sleep(0.05)  # past the back-off
    task()  # blocks in the call on its own thread; the task returns at once
    assert entered.wait(5)
    task()  # a run is going on: skipped
    assert len(calls) == 2 and threading.current_thread().name not in calls
    started = time.monotonic()
    bg.stop()  # the hung run does not hold the stop beyond its wait
    assert time.monotonic() - started < 5
    release.set()
    # Its thread logs the recovery as it returns: waited for, or it wrote
    # after the test, to a capture already closed ("--- Logging error ---").
    _wait(lambda: any("reachable again" in r.getMessage() for r in caplog.records))
    assert not [r for r in caplog.records if r.exc_info]


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
