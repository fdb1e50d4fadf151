"""Limits, races and errors that must be logged (issue 11's hygiene): sizes
no database can hold, engines starting together, exceptions that must not
vanish in a future or a thread.

Through real processes: ``sharectl`` refuses a share size above
MAX_SHARE_SIZE_GB with exit code 2 before anything is written (and the
maximum itself works on every database); two engines started at once on a
fresh PostgreSQL database both run ensure-resources cleanly. In-process, on
every database: the backend_info write that engines race for, and a failed
reconciliation pass that is logged with its traceback and recorded as failed.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from pathlib import Path

import futurist
import pytest
from futurist import periodics
from sharemgr.common import tasks, vocab
from sharemgr.common.outcome import Result
from sharemgr.db import models, resources
from sharemgr.db import reconcile as db_rec
from sharemgr.manager import ensure
from sharemgr.reconcile import scan

from tests.functional.harness import database, wait_until
from tests.unit.reconcile_harness import HOST, expect, make_share

pytestmark = pytest.mark.functional

MAX = vocab.MAX_SHARE_SIZE_GB
HUGE = "99999999999999999999"


def _refused(out, *needles: str) -> str:
    """Exit code 2, one message line on stderr, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# Sizes through sharectl ----------------------------------------------------------


def test_sizes_above_the_maximum_are_refused_before_anything_is_written(deployment):
    """The issue's reproduction: 'share extend ID 99999999999999999999' exited
    0, called the driver and left extending_error; 'share create' with it
    printed a bare database error. The refusal comes before any write, so it
    is the same on every database."""
    d = deployment(extra={"DEFAULT": {"startup_reconciliation_enabled": "False"}})
    d.sync()
    for size in (HUGE, str(MAX + 1)):
        _refused(d.sharectl("share", "create", size, "--proto", "NFS", check=False),
                 f"size {size} GiB is larger than the maximum share size, {MAX} GiB")
    assert d.json("share", "list") == [] and d.json("request", "list") == []

    d.start()
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    for verb in ("extend", "shrink"):
        _refused(d.sharectl("share", verb, share, HUGE, check=False),
                 "new size", "maximum share size")
    shown = d.json("share", "show", share)
    assert (shown["status"], shown["size"]) == ("available", 1)
    assert [r["action"] for r in d.json("request", "list")] == ["create"]
    assert not {c["method"] for c in d.backend("calls")} & {"extend_share", "shrink_share"}


@pytest.mark.parametrize("dbname", ["sqlite", "postgresql", "mysql"])
def test_the_maximum_size_works_on_every_database(deployment, request, dbname):
    url = None if dbname == "sqlite" else request.getfixturevalue(
        {"postgresql": "pg_url", "mysql": "mysql_url"}[dbname])
    d = deployment(db_url=url, extra={"DEFAULT": {"startup_reconciliation_enabled": "False"}})
    d.sync()
    d.start()
    big = d.json("share", "create", str(MAX), "--proto", "NFS", "--wait")
    assert (big["status"], big["size"]) == ("available", MAX)
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    grown = d.json("share", "extend", share, str(MAX), "--wait")
    assert (grown["status"], grown["size"]) == ("available", MAX)


# Two engines starting together -------------------------------------------------------


def test_two_engines_start_together_on_a_fresh_database(deployment, tmp_path, pg_url,
                                                        redis_url):
    """Both engines read backend_info before either writes it (a gate holds
    both at get_backend_info, then lets them go at once): both write it,
    neither fails, both finish ensure-resources and come up."""
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "get_backend_info").touch()
    d = deployment(db_url=pg_url, coordination_url=redis_url,
                   backends={"dummy": {"dummy_gate_dir": str(gates),
                                       "dummy_gate_poll_interval": "0.005"}})
    d.sync()
    first, second = d.start(wait=False, name="a"), d.start(wait=False, name="b")
    state = Path(d.sections["dummy"]["dummy_state_path"])

    def at_gate() -> int:
        try:
            calls = d.backend("calls") if state.exists() else []
        except AssertionError:  # the state is being created
            calls = []
        return len({c["engine_id"] for c in calls if c["method"] == "get_backend_info"})

    wait_until(lambda: at_gate() == 2, what="both engines at the get_backend_info gate")
    (gates / "get_backend_info").unlink()
    for engine in (first, second):
        engine.wait_for_log("share-manager up")
        text = engine.text()
        assert "IntegrityError" not in text and "Traceback" not in text, text[-3000:]
        assert "ensure_driver_resources failed" not in text, text[-3000:]
        assert (f"{d.host}@dummy: ensured" in text
                or f"{d.host}@dummy: backend info unchanged" in text), text[-3000:]
    db, _ = database(d)
    try:
        assert resources.backend_info_hash(db, f"{d.host}@dummy")
    finally:
        db.dispose()
    # Both serve requests.
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")
    assert share["status"] == "available"


# In process: the backend_info race on every database ----------------------------------


def _race(n: int, work) -> list[BaseException]:
    """Run ``work(i)`` in n threads released together; their exceptions."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_backend_info_writers_race_without_error(db):
    """A read-then-insert lost this race in most rounds on PostgreSQL and
    MariaDB (IntegrityError); an upsert never does."""
    hashes = [f"{i:064x}" for i in range(8)]
    for round_ in range(3):
        host = f"hostA@dummy{round_}"
        assert _race(8, lambda i, h=host: resources.set_backend_info_hash(
            db, h, hashes[i])) == []
        assert resources.backend_info_hash(db, host) in hashes
    # And an existing row is updated in place.
    resources.set_backend_info_hash(db, host, "f" * 64)
    assert resources.backend_info_hash(db, host) == "f" * 64


class _EnsureDriver:
    """Holds every engine in get_backend_info until all are there."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.ensured: list[list[str]] = []

    def get_backend_info(self) -> dict:
        self.barrier.wait(60)
        return {"driver": "fake", "version": "1"}

    def ensure_shares(self, shares: list[dict]) -> dict:
        self.ensured.append([s["id"] for s in shares])
        return {}


def test_engines_ensuring_together_on_a_fresh_database(db):
    """Two engines of one host run ensure-resources at once where no
    backend_info row exists yet: neither raises, every share ends available."""
    host = "hostA@dummy"
    insts = [make_share(db, vocab.AVAILABLE, host=host) for _ in range(3)]
    driver = _EnsureDriver(threading.Barrier(2))
    counts: list[int] = []
    assert _race(2, lambda i: counts.append(ensure.ensure_backend(db, host, driver))) == []
    assert len(counts) == 2 and sum(counts) >= len(insts)
    assert {i for batch in driver.ensured for i in batch} == {i.id for i in insts}
    assert {s.status for s in resources.on_host(db, models.ShareInstance,
                                                host)} == {vocab.AVAILABLE}
    assert resources.backend_info_hash(db, host) == ensure.info_hash(
        {"driver": "fake", "version": "1"})


# In process: no exception vanishes -------------------------------------------------------


def test_submit_logged_logs_the_traceback_and_calls_the_hook(caplog):
    seen: list[BaseException] = []

    def broken() -> None:
        raise RuntimeError("boom")

    with futures.ThreadPoolExecutor(1) as pool, caplog.at_level(logging.ERROR):
        fut = tasks.submit_logged(pool, broken, what="the broken task", on_error=seen.append)
        with pytest.raises(RuntimeError):
            fut.result(30)
        wait_until(lambda: seen, what="the hook")
    (record,) = [r for r in caplog.records if "the broken task failed" in r.getMessage()]
    assert "RuntimeError: boom" in record.getMessage()
    assert record.exc_info and "in broken" in caplog.text  # the traceback
    assert isinstance(seen[0], RuntimeError)


def test_a_thread_that_dies_is_logged(caplog):
    def broken() -> None:
        raise ValueError("thread boom")

    with caplog.at_level(logging.ERROR):
        tasks.start_thread(broken, name="doomed").join(30)
    assert "thread doomed died: ValueError: thread boom" in caplog.text
    assert "in broken" in caplog.text


def test_a_failing_periodic_task_is_logged(caplog):
    @periodics.periodic(spacing=0.05, run_immediately=True)
    def flaky() -> None:
        raise KeyError("periodic boom")

    worker = periodics.PeriodicWorker([(flaky, (), {})],
                                      on_failure=tasks.log_periodic_failure,
                                      executor_factory=futurist.SynchronousExecutor)
    with caplog.at_level(logging.ERROR):
        thread = tasks.start_thread(worker.start, name="periodics")
        try:
            wait_until(lambda: "periodic boom" in caplog.text, what="the failure logged")
        finally:
            worker.stop()
            worker.wait()
            thread.join(30)
    assert "periodic task" in caplog.text and "flaky" in caplog.text
    assert "in flaky" in caplog.text  # the traceback


@pytest.fixture
def engine_db(db):
    """``engine`` and ``runner`` (tests/conftest.py) on every database."""
    return db


def test_a_failed_pass_is_logged_and_recorded_as_failed(engine, runner, monkeypatch, caplog):
    """A peer pass has nobody waiting for its future: its failure must still
    reach the log (with the traceback) and 'reconcile show'."""
    make_share(engine.db, vocab.CREATING)
    settled = scan.scan

    def broken(db, rtype, host):
        if rtype == vocab.SNAPSHOT_INSTANCE:
            raise RuntimeError("scan broke")
        return settled(db, rtype, host)

    monkeypatch.setattr(scan, "scan", broken)
    with caplog.at_level(logging.ERROR):
        fut = runner._submit(0, "peer:hostA.dead")
        with pytest.raises(RuntimeError):
            fut.result(60)
        wait_until(lambda: "reconciliation pass (peer:hostA.dead) failed" in caplog.text,
                   what="the failure in the log")
    assert "Traceback" in caplog.text and "in broken" in caplog.text
    (record,) = db_rec.passes(engine.db, HOST, limit=10)
    assert record.trigger == "peer:hostA.dead" and record.finished_at is not None
    summary = record.summary
    assert summary["failed"] is True and summary["error"] == "RuntimeError: scan broke"
    # What it did before the failure is kept, and the pass counts as a failure.
    assert summary["outcomes"] == {"share_instance": {"available": 1}}
    assert summary["failures"] == 1


def test_a_pass_that_cannot_start_is_recorded_and_fails_its_request(engine, runner,
                                                                    monkeypatch):
    def no_start(*args, **kwargs):
        raise RuntimeError("cannot write the pass row")

    monkeypatch.setattr(db_rec, "pass_start", no_start)

    class Req:
        id = 7
        args = {"dry_run": False}

    expect(runner.handle_request(Req()), Result.FAILED, "RuntimeError: cannot write the pass row")
    (record,) = db_rec.passes(engine.db, HOST, limit=10)
    assert (record.trigger, record.summary["failed"], record.summary["failures"]) == (
        "manual:7", True, 1)
    assert record.summary["error"] == "RuntimeError: cannot write the pass row"
