"""When passes run (reconcile/runner.py): deferred startup, stop during the
wait, manual requests (dry run), and a pass for what a dead peer of this host
left behind."""

from __future__ import annotations

import threading
import types
import uuid

import pytest
from sharemgr.common import vocab
from sharemgr.db import reconcile as db_rec
from sharemgr.reconcile.runner import engine_host

from tests.unit.reconcile_harness import HOST, fetch, make_share

# ``engine`` and ``runner``: tests/conftest.py (on an SQLite copy: tests/unit/conftest.py).


def _drain(passes):
    """Wait for what was submitted before (one worker, first in first out)."""
    passes.executor.submit(lambda: None).result(timeout=60)


@pytest.mark.parametrize("member,host", [
    (f"hostA.{uuid.UUID(int=1)}", "hostA"),
    (f"node-1.example.com.{uuid.UUID(int=2)}", "node-1.example.com"),
    (str(uuid.UUID(int=3)), ""),
    ("hostA", ""),
    (f"hostA-{uuid.UUID(int=4)}", ""),
])
def test_engine_host(member, host):
    assert engine_host(member) == host


def test_startup_pass_runs_after_the_wait(engine, runner):
    inst = make_share(engine.db, vocab.CREATING)
    result = runner.defer_startup(0).result(timeout=60)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE
    (record,) = db_rec.passes(engine.db, host=HOST, limit=10)
    assert (record.id, record.trigger, record.dry_run) == (result["id"], "startup", False)


def test_stopping_during_the_wait_runs_no_pass(engine, runner):
    inst = make_share(engine.db, vocab.CREATING)
    runner.stopping.set()
    assert runner.defer_startup(3600).result(timeout=60) is None
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.CREATING
    assert db_rec.passes(engine.db, host=HOST, limit=10) == []


@pytest.mark.parametrize("dry_run", [True, False])
def test_manual_request_runs_a_pass(engine, runner, dry_run):
    inst = make_share(engine.db, vocab.CREATING)
    runner.handle_request(types.SimpleNamespace(id=42, args={"dry_run": dry_run}))
    (record,) = db_rec.passes(engine.db, host=HOST, limit=10)
    assert (record.trigger, record.dry_run) == ("manual:42", dry_run)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == (
        vocab.CREATING if dry_run else vocab.AVAILABLE)
    if dry_run:
        assert [p["id"] for p in record.summary["plan"]] == [inst.id]


def test_a_peer_of_this_host_leaving_starts_a_pass(engine, runner):
    inst = make_share(engine.db, vocab.CREATING)
    runner.watch_peers(engine.coordinator, HOST, engine.engine_id, 0)
    same_host = engine.peer()
    other_host = engine.peer(host="hostB")
    engine.coordinator.run_watchers()  # learn the members

    other_host.leave_engines()
    engine.coordinator.run_watchers()
    _drain(runner)
    assert db_rec.passes(engine.db, host=HOST, limit=10) == []
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.CREATING

    same_host.leave_engines()
    engine.coordinator.run_watchers()
    _drain(runner)
    (record,) = db_rec.passes(engine.db, host=HOST, limit=10)
    assert record.trigger == f"peer:{same_host.member_id}"
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE


def test_a_startup_pass_an_outage_interrupts_runs_again(engine, runner, monkeypatch):
    import sqlalchemy as sa

    inst = make_share(engine.db, vocab.CREATING)
    real, calls = runner.reconciler.run, []

    def flaky(trigger, dry_run=False):
        calls.append(trigger)
        if len(calls) == 1:
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed"))
        return real(trigger, dry_run)

    monkeypatch.setattr(runner.reconciler, "run", flaky)
    result = runner.defer_startup(0).result(timeout=60)
    assert calls == ["startup", "startup"] and result["id"]
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE


def test_a_startup_pass_an_outage_interrupts_on_one_resource_runs_again(engine, runner,
                                                                       monkeypatch):
    """The database fails while one batch takes its rows: the pass settles
    the rest, ends failed, and its retry settles that batch too."""
    import sqlalchemy as sa
    from sharemgr.db import leases as db_leases

    insts = [make_share(engine.db, vocab.CREATING) for _ in range(3)]
    real, calls = db_leases.take_rows, []

    def flaky(db, model, rows):
        calls.append(sorted(rows))
        if len(calls) == 1:
            raise sa.exc.OperationalError("UPDATE", {}, Exception("too many clients already"))
        return real(db, model, rows)

    monkeypatch.setattr(db_leases, "take_rows", flaky)
    result = runner.defer_startup(0).result(timeout=60)
    assert [fetch(engine.db, vocab.SHARE_INSTANCE, i.id).status for i in insts] == \
        [vocab.AVAILABLE] * 3
    first, second = sorted(db_rec.passes(engine.db, host=HOST, limit=10), key=lambda p: p.id)
    assert first.summary["failed"] and "OperationalError" in first.summary["error"]
    assert second.id == result["id"] and not second.summary.get("failed")
    assert sum(p.summary["outcomes"][vocab.SHARE_INSTANCE][vocab.AVAILABLE]
               for p in (first, second) if p.summary["outcomes"]) == 3


def test_a_manual_pass_in_an_outage_fails_at_once(engine, runner, monkeypatch):
    import sqlalchemy as sa
    from sharemgr.common.outcome import Result

    from tests.unit.reconcile_harness import expect

    def down(trigger, dry_run=False):
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed"))

    monkeypatch.setattr(runner.reconciler, "run", down)
    expect(runner.handle_request(types.SimpleNamespace(id=7, args={})), Result.FAILED,
           "OperationalError")
    # The failure's log line is written by the worker after the waiter
    # wakes: let it come before the test's log capture closes.
    _drain(runner)


def test_a_peer_leaving_before_the_startup_pass_is_left_to_it(engine, runner):
    """This engine's previous life (killed) leaves the group while the
    startup pass waits: one pass, the startup one, settles what it left."""
    inst = make_share(engine.db, vocab.CREATING)
    runner.watch_peers(engine.coordinator, HOST, engine.engine_id, 0)
    previous_life = engine.peer()
    engine.coordinator.run_watchers()
    release = threading.Event()
    runner.then(release.wait, "hold the worker")  # the startup pass waits behind it
    startup = runner.defer_startup(0)
    previous_life.leave_engines()
    engine.coordinator.run_watchers()
    release.set()
    startup.result(timeout=60)
    _drain(runner)
    (record,) = db_rec.passes(engine.db, host=HOST, limit=10)
    assert record.trigger == "startup"
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE


def test_reconcile_show_skips_dry_runs(engine, runner):
    runner.handle_request(types.SimpleNamespace(id=1, args={"dry_run": False}))
    runner.handle_request(types.SimpleNamespace(id=2, args={"dry_run": True}))
    assert db_rec.passes(engine.db, HOST, dry_run=False)[0].trigger == "manual:1"
    assert db_rec.passes(engine.db, HOST, dry_run=True)[0].trigger == "manual:2"
    assert db_rec.passes(engine.db, HOST)[0].trigger == "manual:2"
