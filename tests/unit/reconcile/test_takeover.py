"""Whose an open request is when a pass meets it (reconcile/takeover.py):
stuck requests taken over at once, without the lock their call's thread
may hold; a departed engine's only under the resource's lock, else left to
its lease; and only by the step of the pass that settles the resource."""

from __future__ import annotations

import contextlib
import datetime
import types
from collections.abc import Iterator

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.manager.operations import lock_name
from sharemgr.reconcile import scan, takeover
from sharemgr.reconcile.summary import Summary

from tests.unit.reconcile_harness import (
    HOSTBE,
    _settled,
    _stuck,
    _untouched,
    add_request,
    engine_id,
    make_applying_rule,
    make_backup,
    make_share,
    request_row,
)


def test_a_departed_engines_request_is_taken_over_only_under_its_lock(engine, monkeypatch):
    """An engine that left the group may only be paused, holding the lock
    of the call it was in (a file lock stays held until it resumes): the
    pass that cannot take that lock leaves the request running, so the
    lease settles it once it expires (seen in CI: the request abandoned, the
    resource skipped as locked, and nothing came back to it)."""
    monkeypatch.setattr(takeover, "DEAD_LOCK_WAIT", 0.3)
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    frozen = engine_id()
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      frozen)
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    with _held_by_departed(engine, vocab.SHARE_INSTANCE, row.id):
        result = engine.run()
        _untouched(engine, vocab.SHARE_INSTANCE, row)
        assert result["skipped"] == {"locked by an engine that left the group": 1}
        assert result["abandoned_requests"] == 0
        assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
        # Its lease runs out, the lock still held: the stuck rule takes it over.
        _lease(engine.db, req, -datetime.timedelta(seconds=1))
        again = engine.run("periodic")
        _settled(engine, vocab.SHARE_INSTANCE, row)
        assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED
        assert again["stuck_requests"] == 1


def test_a_departed_engines_request_on_a_free_lock_is_abandoned_under_it(engine):
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id())
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    result = engine.run()
    _settled(engine, vocab.SHARE_INSTANCE, row)
    assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED
    assert (result["abandoned_requests"], result["skipped"]) == (1, {})


def test_a_lease_that_runs_out_during_the_pass_is_left_to_the_next(engine, monkeypatch):
    """The departed engine's lease runs out while the pass waits for its
    lock. A later step's read sees it stuck: abandoned there, its resource
    (settled by an earlier step) would be left `creating` with nobody to
    settle it (seen in a functional run). It stays running; the next pass
    settles it."""
    monkeypatch.setattr(takeover, "DEAD_LOCK_WAIT", 0.5)
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id())
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    real = takeover.time

    def sleep(seconds: float) -> None:
        # It runs out while the pass waits for the lock, however slow the
        # machine (a lease of 0.2 s ran out before a loaded pass began).
        _lease(engine.db, req, -datetime.timedelta(seconds=1))
        real.sleep(seconds)

    monkeypatch.setattr(takeover, "time", types.SimpleNamespace(monotonic=real.monotonic,
                                                                sleep=sleep))
    with _held_by_departed(engine, vocab.SHARE_INSTANCE, row.id):
        engine.run()
        _untouched(engine, vocab.SHARE_INSTANCE, row)
        assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
        engine.run("periodic")
        _settled(engine, vocab.SHARE_INSTANCE, row)


def test_a_stuck_access_update_whose_call_holds_the_lock_is_sent_again(engine):
    """A stuck call's thread may hold the instance's lock for ever: its
    abandoned request stands in for the lock, for access rules as for a
    resource's status."""
    inst = make_share(engine.db, vocab.AVAILABLE)
    rule = make_applying_rule(engine.db, inst)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id(), action=vocab.ACTION_UPDATE_ACCESS)
    _lease(engine.db, req, -datetime.timedelta(seconds=1))
    sent = []
    engine.driver.update_access = lambda share, rules, add, delete, server=None: \
        sent.append([r["id"] for r in add]) or {}
    peer = engine.peer()  # the stuck call's engine, alive, its lock held
    with peer.try_lock(lock_name(vocab.SHARE_INSTANCE, inst.id)) as got:
        assert got
        result = engine.run()
    assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED
    assert api.get(engine.db, models.ShareAccessRule, rule.id).state == vocab.ACCESS_ACTIVE
    # Taken: the stuck call, returning late, carries an old token.
    assert api.get(engine.db, models.ShareInstance, inst.id).fence > inst.fence
    assert (sent, result["stuck_requests"]) == ([[rule.id]], 1)


@contextlib.contextmanager
def _held_by_departed(engine, rtype: str, ident: str) -> Iterator[None]:
    """The resource's lock held by an engine out of the group (paused)."""
    lock = engine.peer(join=False).lock(lock_name(rtype, ident))
    assert lock.acquire(blocking=False)
    try:
        yield
    finally:
        lock.release()


def _lease(db, request_id: int, left: datetime.timedelta) -> None:
    with db.session() as session:
        session.execute(sa.update(models.Request).where(models.Request.id == request_id)
                        .values(lease_expires_at=models.utcnow() + left))


def test_the_end_of_a_pass_abandons_only_requests_on_settled_resources(engine):
    """``abandon_rest``: stuck and departed requests on resources no step
    read. On a resource gone transient after its step's scan they stay
    running (abandoned, nobody would settle it: seen by review); on a
    settled one they are abandoned."""
    rows = {name: make_share(engine.db, status) for name, status in (
        ("departed-transient", vocab.CREATING), ("departed-settled", vocab.AVAILABLE),
        ("stuck-transient", vocab.CREATING), ("stuck-settled", vocab.AVAILABLE))}
    reqs = {}
    for name, row in rows.items():
        reqs[name] = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE,
                                 vocab.REQUEST_RUNNING, engine_id())
        left = datetime.timedelta(minutes=5 if name.startswith("departed") else -5)
        _lease(engine.db, reqs[name], left)
    summary = Summary()
    takeover.abandon_rest(engine.reconciler, summary, dry_run=False)
    status = {name: request_row(engine.db, req).status for name, req in reqs.items()}
    assert status == {"departed-transient": vocab.REQUEST_RUNNING,
                      "departed-settled": vocab.REQUEST_ABANDONED,
                      "stuck-transient": vocab.REQUEST_RUNNING,
                      "stuck-settled": vocab.REQUEST_ABANDONED}
    assert summary.abandoned == 1 and summary.stuck == {rows["stuck-settled"].id}


def test_a_departed_request_a_step_did_not_lock_stays_running(engine, monkeypatch):
    """A resource read by its step but skipped before its lock (here its
    check failed) keeps its departed engine's request: abandoned, with the
    engine paused on its lock, it would have nobody to settle it."""
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id())
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    real = scan.left_alone
    calls = []

    def fails_once(db, cand):
        calls.append(cand.id)
        if len(calls) == 1:
            raise RuntimeError("a check that failed")
        return real(db, cand)

    monkeypatch.setattr(scan, "left_alone", fails_once)
    result = engine.run()
    assert result["failures"] == 1 and result["abandoned_requests"] == 0
    assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
    engine.run()  # its lock is free: the next pass takes it over
    _settled(engine, vocab.SHARE_INSTANCE, row)
    assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED


def test_a_departed_request_without_a_lease_left_to_one_is_given_one(engine, monkeypatch):
    """Left running because its engine holds the lock, a request with no
    lease (leases off, or cut between its claim and its call) would never
    bring a pass back: it is given one."""
    monkeypatch.setattr(takeover, "DEAD_LOCK_WAIT", 0.1)
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id())
    with _held_by_departed(engine, vocab.SHARE_INSTANCE, row.id):
        engine.run()
        assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
        assert request_row(engine.db, req).lease_expires_at is not None


def test_a_share_whose_departed_engine_holds_its_backup_s_lock_waits(engine, monkeypatch):
    """A share in backup_creating belongs to its backup's request: of an
    engine that left the group but holds the backup's lock (paused inside
    the backup's call), the share is not settled under it either (seen by
    review: the share went error, the backup then completed). Once the
    lock is free, the request is abandoned under it and both are settled."""
    monkeypatch.setattr(takeover, "DEAD_LOCK_WAIT", 0.1)
    backup = make_backup(engine.db, vocab.CREATING, share_status=vocab.BACKUP_CREATING)
    inst = api.query(engine.db, models.ShareInstance, {"share_id": backup.share_id})[0]
    req = add_request(engine.db, vocab.BACKUP, backup.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id())
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    with _held_by_departed(engine, vocab.BACKUP, backup.id):
        result = engine.run()
    assert api.get(engine.db, models.ShareInstance, inst.id).status == vocab.BACKUP_CREATING
    assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
    assert result["skipped"] == {takeover.LOCKED_BY_DEPARTED: 2}
    result = engine.run()
    assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED
    assert api.get(engine.db, models.ShareInstance, inst.id).status == vocab.ERROR
    assert api.get(engine.db, models.ShareBackup, backup.id).status == vocab.ERROR


def test_a_departed_request_on_a_resource_left_alone_is_abandoned(engine):
    """A resource the pass leaves to a workflow of its own (a migration's
    periodic task, which takes the lock itself once no request is open
    about it) has its departed engine's request abandoned, as before: kept
    running, the migration waited for its lease (seen in CI)."""
    row = make_share(engine.db, vocab.MIGRATING, task_state=vocab.MIGRATION_IN_PROGRESS)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id(), action=vocab.ACTION_MIGRATION_START)
    _lease(engine.db, req, datetime.timedelta(minutes=5))
    result = engine.run()
    assert request_row(engine.db, req).status == vocab.REQUEST_ABANDONED
    assert api.get(engine.db, models.ShareInstance, row.id).status == vocab.MIGRATING
    assert result["abandoned_requests"] == 1
