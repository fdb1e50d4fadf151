"""Startup reconciliation (doc/specs.rst, spec 002): how a pass stays out of
the way of other engines and of itself — lock contention, rows that change
under it, failures that must stay local to one resource, requests, locks and
hosts on every database, two engines of one host at once (what a pass leaves
alone: test_reconciler_skips.py).
"""

from __future__ import annotations

import contextlib
import threading
import types

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.db import reconcile as db_rec
from sharemgr.manager.op_errors import NotNow
from sharemgr.manager.operations import lock_name
from tooz import coordination

from tests.unit.reconcile_harness import (
    BACKEND_SIZE,
    EXPECTED,
    HOSTBE,
    STAGE_ORDER,
    Engine,
    _settled,
    _stuck,
    _untouched,
    add_request,
    coord_url,
    engine_id,
    fetch,
    make,
    make_applying_rule,
    make_replica,
    make_share,
    request_row,
)

# Locks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_resource_locked_by_another_engine_is_skipped(engine, rtype):
    locked = _stuck(engine, rtype)
    free = _stuck(engine, rtype)
    peer = engine.peer()
    with peer.try_lock(lock_name(rtype, locked.id)) as got:
        assert got
        result = engine.run()
    _untouched(engine, rtype, locked)
    _settled(engine, rtype, free)
    assert result["skipped"] == {"locked by another engine": 1}
    assert sum(result["outcomes"][rtype].values()) == 1
    # Released: the next pass settles it.
    again = engine.run()
    _settled(engine, rtype, locked)
    assert again["skipped"] == {}


def test_a_dead_engines_lock_is_waited_for_a_moment(engine):
    """The lock of an engine the pass found dead can outlive its membership
    a moment (on Redis both time out, and the two expiries race): the pass
    tries again rather than leave the resource to a later pass."""
    row = _stuck(engine, vocab.SHARE_INSTANCE)
    add_request(engine.db, vocab.SHARE_INSTANCE, row.id, HOSTBE, vocab.REQUEST_RUNNING,
                engine_id())
    peer = engine.peer(join=False)  # the dead engine's lock, not yet expired
    lock = peer.lock(lock_name(vocab.SHARE_INSTANCE, row.id))
    assert lock.acquire(blocking=False)
    threading.Timer(1.0, lock.release).start()
    result = engine.run()
    _settled(engine, vocab.SHARE_INSTANCE, row)
    assert result["skipped"] == {}


def test_a_replica_shares_the_share_instance_lock(engine):
    """Operations lock a replica under its share-instance name; holding that
    lock must keep the pass away."""
    rep = make_replica(engine.db, vocab.CREATING)
    peer = engine.peer()
    with peer.try_lock(lock_name(vocab.SHARE_INSTANCE, rep.id)) as got:
        assert got
        result = engine.run()
    _untouched(engine, vocab.REPLICA, rep)
    assert result["skipped"] == {"locked by another engine": 1}


def test_service_coordinator_url_alive_engine_and_lock(sqlite_db, tmp_path):
    """The service's URL as it is (tooz's threaded executor): membership and
    locks behave the same."""
    eng = Engine(sqlite_db, coord_url(tmp_path, threaded=True))
    try:
        peer = eng.peer()
        busy = make_share(sqlite_db, vocab.CREATING)
        locked = make_share(sqlite_db, vocab.DELETING)
        free = make_share(sqlite_db, vocab.CREATING)
        add_request(sqlite_db, vocab.SHARE_INSTANCE, busy.id, HOSTBE, vocab.REQUEST_RUNNING,
                    peer.member_id)
        with peer.try_lock(lock_name(vocab.SHARE_INSTANCE, locked.id)) as got:
            assert got
            result = eng.run()
        assert [fetch(sqlite_db, vocab.SHARE_INSTANCE, r.id).status for r in (busy, locked, free)] \
            == [vocab.CREATING, vocab.DELETING, vocab.AVAILABLE]
        assert result["skipped"] == {"in progress": 1, "locked by another engine": 1}
    finally:
        eng.close()


CHANGES = {
    "reset-to-available": {"status": vocab.AVAILABLE},
    "another-transient-status": {"status": vocab.DELETING},
    "soft-deleted": {"status": vocab.DELETED, "deleted_at": models.utcnow()},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("rtype", [vocab.SHARE_INSTANCE, vocab.SNAPSHOT_INSTANCE,
                                   vocab.SHARE_SERVER])
def test_row_changed_between_scan_and_lock_is_skipped(engine, rtype, change):
    row = make(engine.db, rtype, vocab.CREATING)
    values = CHANGES[change]
    real_try_lock = engine.coordinator.try_lock

    @contextlib.contextmanager
    def change_then_lock(name):
        if name == lock_name(rtype, row.id):
            # Someone (an admin's reset-state, another engine) got there first.
            assert api.conditional_update(engine.db, type(row), row.id,
                                          {"status": vocab.CREATING}, values)
        with real_try_lock(name) as got:
            yield got

    engine.coordinator.try_lock = change_then_lock
    result = engine.run()
    after = fetch(engine.db, rtype, row.id)
    assert after.status == values["status"]
    assert engine.driver.calls == []
    assert result["skipped"] == {"changed meanwhile": 1}
    assert result["outcomes"] == {}


# Failures stay local ----------------------------------------------------------------------


def test_a_status_method_that_raises_fails_only_its_resource(engine):
    rows = [make_share(engine.db, vocab.CREATING) for _ in range(4)]
    engine.driver.answers[rows[1].id] = "raises"
    result = engine.run()
    statuses = [fetch(engine.db, vocab.SHARE_INSTANCE, r.id).status for r in rows]
    assert statuses == [vocab.AVAILABLE, vocab.ERROR, vocab.AVAILABLE, vocab.AVAILABLE]
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 3, vocab.ERROR: 1}}
    assert result["failures"] == 0


def test_a_delete_that_raises_something_unexpected_fails_only_its_resource(engine):
    rows = [make_share(engine.db, vocab.DELETING) for _ in range(3)]
    target = rows[0].id
    real_delete = engine.driver.delete_share

    def delete_share(share, share_server=None):
        if share["id"] == target:
            raise KeyError("driver bug")
        real_delete(share, share_server)

    engine.driver.delete_share = delete_share
    result = engine.run()
    statuses = [fetch(engine.db, vocab.SHARE_INSTANCE, r.id).status for r in rows]
    assert statuses == [vocab.ERROR_DELETING, vocab.DELETED, vocab.DELETED]
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.DELETED: 2, vocab.ERROR_DELETING: 1}}


def _broken_lock(engine, ident, exc):
    real_try_lock = engine.coordinator.try_lock

    def try_lock(name):
        if name == lock_name(vocab.SHARE_INSTANCE, ident):
            raise exc
        return real_try_lock(name)

    engine.coordinator.try_lock = try_lock


def test_an_unexpected_error_on_one_resource_does_not_stop_the_pass(engine):
    """Taking one resource's lock fails with a bug (not an outage): that
    resource is a failure of the pass, every other one (of every stage) is
    settled and the pass is recorded."""
    db = engine.db
    broken = make_share(db, vocab.CREATING)
    others = {rtype: _stuck(engine, rtype) for rtype in STAGE_ORDER}
    _broken_lock(engine, broken.id, RuntimeError("a bug in the lock"))
    result = engine.run()
    _untouched(engine, vocab.SHARE_INSTANCE, broken)
    for rtype, row in others.items():
        _settled(engine, rtype, row)
    assert result["failures"] == 1
    record = db_rec.passes(db, pass_id=result["id"])[0]
    assert record.finished_at is not None
    assert record.summary["failures"] == 1


@pytest.mark.parametrize("outage", [
    coordination.ToozError("lock backend unavailable"),
    sa.exc.OperationalError("UPDATE", {}, Exception("too many clients already")),
])
def test_an_outage_on_one_resource_interrupts_the_pass(engine, outage):
    """The coordination backend or the database is away while one
    resource's lock is taken: every other resource is still settled, and the
    pass ends failed with the outage (an automatic pass is then run again
    once they are back: test_runner.py). Counted as that resource's failure,
    it stayed in its transient status until the next restart."""
    db = engine.db
    broken = make_share(db, vocab.CREATING)
    others = {rtype: _stuck(engine, rtype) for rtype in STAGE_ORDER}
    _broken_lock(engine, broken.id, outage)
    with pytest.raises(type(outage)):
        engine.run()
    _untouched(engine, vocab.SHARE_INSTANCE, broken)
    for rtype, row in others.items():
        _settled(engine, rtype, row)
    (record,) = db_rec.passes(db, limit=10)
    assert record.summary["failed"] and type(outage).__name__ in record.summary["error"]
    assert record.summary["failures"] == 1  # the pass itself, not the resource


@pytest.mark.parametrize(("url", "limit"), [
    ("file:///var/lib/sharemgr/coordination?timeout=2", 1024),  # open files
    ("redis://r:6379?membership_timeout=2&lock_timeout=2", 50),
    ("redis://r:6379?membership_timeout=10&lock_timeout=10", 250),
    ("etcd3+http://e:2379?membership_timeout=10&lock_timeout=10&timeout=5", 125),
    ("redis://r:6379?membership_timeout=600&lock_timeout=600", 1024),
    ("redis://r:6379", 750),  # tooz's own 30 s
])
def test_the_locks_a_pass_holds_fit_in_a_quarter_of_the_timeout(url, limit):
    from sharemgr.manager.coordination import Coordinator

    assert Coordinator(url, "e").locks_held_limit == limit


def test_a_delete_this_engine_may_not_call_now_interrupts_the_pass(engine):
    """Out of the engines group (its heartbeats starved, say) the retried
    delete is refused before the driver (NotNow): the pass ends
    interrupted, to be run again, instead of leaving the share in deleting
    as if another engine had taken it."""
    row = make_share(engine.db, vocab.DELETING)
    engine.operations.not_member = lambda: "its membership expired"
    with pytest.raises(NotNow):
        engine.run()
    _untouched(engine, vocab.SHARE_INSTANCE, row)
    (record,) = db_rec.passes(engine.db, limit=10)
    assert record.summary["failed"] and "NotNow" in record.summary["error"]
    engine.operations.not_member = lambda: None
    engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, row.id).status == vocab.DELETED


def test_access_rules_this_engine_may_not_send_now_are_left_for_the_pass_run_again(engine):
    """The same for a rule cut short on its way to the backend: refused
    before the driver (NotNow), it is not marked error as a rule its
    instance cannot take would be; the pass ends interrupted and its next
    run sends it."""
    inst = make_share(engine.db, vocab.AVAILABLE)
    rule = make_applying_rule(engine.db, inst)
    sent = []
    engine.driver.update_access = lambda share, rules, add, delete, server=None: \
        sent.append([r["id"] for r in add]) or {}
    engine.operations.not_member = lambda: "its membership expired"
    with pytest.raises(NotNow):
        engine.run()
    state = lambda: api.get(engine.db, models.ShareAccessRule, rule.id).state  # noqa: E731
    assert state() == vocab.ACCESS_APPLYING and sent == []
    engine.operations.not_member = lambda: None
    engine.run()
    assert state() == vocab.ACCESS_ACTIVE and sent == [[rule.id]]


def test_a_pass_holds_no_more_locks_than_its_coordinator_renews(sqlite_db, redis_url):
    """On Redis every held lock is renewed in each heartbeat, one round trip
    each: a pass of 300 resources with eight workers once held all 300, its
    heartbeat outran the membership timeout, and it lost its locks and its
    membership in the middle of its own pass."""
    # The daemon's URL with the tests' membership timeout (manager/config.py).
    eng = Engine(sqlite_db, f"{redis_url}&membership_timeout=2&lock_timeout=2", workers=8)
    try:
        rows = [make_share(sqlite_db, vocab.CREATING) for _ in range(300)]
        held, most, guard = set(), [0], threading.Lock()
        real_try_lock = eng.coordinator.try_lock

        @contextlib.contextmanager
        def counting(name):
            with real_try_lock(name) as got:
                if got:
                    with guard:
                        held.add(name)
                        most[0] = max(most[0], len(held))
                try:
                    yield got
                finally:
                    with guard:
                        held.discard(name)

        eng.coordinator.try_lock = counting
        result = eng.run()
        assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 300}}
        assert eng.coordinator.locks_held_limit == 50
        assert 0 < most[0] <= 50
        assert [fetch(sqlite_db, vocab.SHARE_INSTANCE, r.id).status for r in rows] == \
            [vocab.AVAILABLE] * 300
    finally:
        eng.close()


def test_every_rule_is_reachable_by_the_scan(engine):
    """Each (type, status) of the table is found by the scan of its stage:
    nothing in it is dead data."""
    rows = {(t, s): make(engine.db, t, s).id for t, statuses in EXPECTED.items()
            for s in statuses}
    result = engine.run(dry_run=True)
    planned = {(p["type"], p["status"]): p["id"] for p in result["plan"]}
    assert planned == rows


# The same on every database ----------------------------------------------------------------


@pytest.fixture
def mixed_pass(any_engine):
    """Pending, alive, dead, locked, another backend's and a settled one in
    one pass, on SQLite, PostgreSQL and MariaDB: the rows and the result."""
    eng = any_engine
    db = eng.db
    peer = eng.peer()
    rows = types.SimpleNamespace(db=db)
    rows.pending = make_share(db, vocab.CREATING, host=f"{HOSTBE}#p")
    add_request(db, vocab.SHARE_INSTANCE, rows.pending.id, f"{HOSTBE}#p")
    rows.alive = make_share(db, vocab.DELETING)
    rows.alive_req = add_request(db, vocab.SHARE_INSTANCE, rows.alive.id, HOSTBE,
                                 vocab.REQUEST_RUNNING, peer.member_id, action="delete")
    rows.dead = make_share(db, vocab.EXTENDING)
    rows.dead_req = add_request(db, vocab.SHARE_INSTANCE, rows.dead.id, HOSTBE,
                                vocab.REQUEST_RUNNING, engine_id(), action="extend")
    rows.locked = make(db, vocab.SNAPSHOT_INSTANCE, vocab.CREATING)
    rows.elsewhere = make_share(db, vocab.CREATING, host=f"{HOSTBE}2")
    rows.free = make(db, vocab.REPLICA, vocab.CREATING)
    with peer.try_lock(lock_name(vocab.SNAPSHOT_INSTANCE, rows.locked.id)) as got:
        assert got
        rows.result = eng.run()
    return rows


def test_requests_locks_and_hosts_on_every_database(mixed_pass):
    r, db = mixed_pass, mixed_pass.db
    status = {row.id: fetch(db, vocab.SHARE_INSTANCE, row.id).status
              for row in (r.pending, r.alive, r.dead, r.elsewhere, r.free)}
    assert status == {
        r.pending.id: vocab.CREATING,
        r.alive.id: vocab.DELETING,
        r.dead.id: vocab.AVAILABLE,
        r.elsewhere.id: vocab.CREATING,
        r.free.id: vocab.AVAILABLE,
    }
    assert fetch(db, vocab.SNAPSHOT_INSTANCE, r.locked.id).status == vocab.CREATING
    assert api.get(db, models.Share, r.dead.share_id).size == BACKEND_SIZE


def test_requests_of_alive_and_dead_engines_on_every_database(mixed_pass):
    r, db = mixed_pass, mixed_pass.db
    assert request_row(db, r.alive_req).status == vocab.REQUEST_RUNNING
    assert request_row(db, r.dead_req).status == vocab.REQUEST_ABANDONED


def test_the_mixed_pass_summary_on_every_database(mixed_pass):
    result = mixed_pass.result
    assert result["skipped"] == {"request pending": 1, "in progress": 1,
                                 "locked by another engine": 1}
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 1},
                                  vocab.REPLICA: {vocab.AVAILABLE: 1}}
    assert result["abandoned_requests"] == 1
    assert db_rec.passes(mixed_pass.db, pass_id=result["id"])[0].summary["skipped"] == \
        result["skipped"]


# Two engines of one host, one pass each, at the same time ------------------------------------


def test_two_engines_at_once_act_on_each_resource_exactly_once(sqlite_db, tmp_path):
    url = coord_url(tmp_path)
    engines = [Engine(sqlite_db, url, workers=4) for _ in range(2)]
    try:
        rows = []
        for rtype in STAGE_ORDER:
            rows += [(rtype, _stuck(engines[0], rtype)) for _ in range(4)]
        rows += [(vocab.SHARE_INSTANCE, make_share(sqlite_db, vocab.DELETING)) for _ in range(4)]
        start = threading.Barrier(2)
        results = [None, None]

        def run(i):
            start.wait()
            results[i] = engines[i].run()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        for rtype, row in rows:
            assert fetch(sqlite_db, rtype, row.id).status not in vocab.TRANSIENT_STATUSES
        calls = [c for e in engines for c in e.driver.calls]
        assert len(calls) == len(set(calls))  # nothing asked or deleted twice
        acted = [n for r in results for per_type in r["outcomes"].values()
                 for n in per_type.values()]
        assert sum(acted) == len(rows)
        for r in results:
            assert set(r["skipped"]) <= {"locked by another engine", "changed meanwhile"}
            assert r["failures"] == 0
    finally:
        for e in engines:
            e.close()


def test_this_engines_own_running_request_is_never_abandoned(engine):
    """An engine whose heartbeat lapsed under load (out of the group for a
    moment) still runs its requests: its own pass leaves them be."""
    db = engine.db
    inst = make_share(db, vocab.CREATING)
    req = add_request(db, vocab.SHARE_INSTANCE, inst.id, HOSTBE, vocab.REQUEST_RUNNING,
                      engine_id=engine.engine_id)
    engine.coordinator.leave_engines()
    assert engine.engine_id not in engine.coordinator.engines()
    summary = engine.run()
    assert request_row(db, req).status == vocab.REQUEST_RUNNING
    assert summary["abandoned_requests"] == 0
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.CREATING
