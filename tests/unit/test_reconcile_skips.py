"""Startup reconciliation (doc/specs.rst, spec 002): what a pass must leave alone, and how it
stays out of the way of other engines — busy task states, excluded statuses,
backups with their own workflow, other hosts, open requests, dead engines,
DHSS, lock contention, rows that change under it, and failures that must
stay local to one resource.
"""

from __future__ import annotations

import contextlib
import threading
import types

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.db import reconcile as db_rec
from sharemgr.manager.operations import lock_name
from tooz import coordination

from tests.unit.reconcile_harness import (
    BACKEND,
    BACKEND_SIZE,
    EXCLUDED,
    EXPECTED,
    HOST,
    HOSTBE,
    STAGE_ORDER,
    Engine,
    FakeDriver,
    add_request,
    coord_url,
    engine_id,
    fetch,
    host_of_row,
    make,
    make_backup,
    make_replica,
    make_server,
    make_share,
    request_row,
)

# One status per type that the pass settles without help (a mark, a query
# answered healthy, or a delete), and what it becomes.
SETTLE = {
    vocab.SHARE_SERVER: (vocab.CREATING, vocab.ERROR),
    vocab.SHARE_INSTANCE: (vocab.CREATING, vocab.AVAILABLE),
    vocab.REPLICA: (vocab.CREATING, vocab.AVAILABLE),
    vocab.SNAPSHOT_INSTANCE: (vocab.CREATING, vocab.AVAILABLE),
    vocab.SHARE_GROUP: (vocab.CREATING, vocab.AVAILABLE),
    vocab.GROUP_SNAPSHOT: (vocab.CREATING, vocab.AVAILABLE),
    vocab.BACKUP: (vocab.DELETING, vocab.DELETED),
}


def _stuck(eng, rtype, host=HOSTBE):
    status, _ = SETTLE[rtype]
    return make(eng.db, rtype, status, host=host)


def _untouched(eng, rtype, row):
    after = fetch(eng.db, rtype, row.id)
    assert (after.status, after.deleted_at) == (row.status, None)
    assert all(ident != row.id for _, ident in eng.driver.calls)


def _settled(eng, rtype, row):
    assert fetch(eng.db, rtype, row.id).status == SETTLE[rtype][1]


# Busy task_state, excluded statuses ------------------------------------------------


@pytest.mark.parametrize("task_state", sorted(vocab.BUSY_TASK_STATES))
@pytest.mark.parametrize("rtype", [vocab.SHARE_INSTANCE, vocab.REPLICA])
def test_busy_task_state_is_left_alone(engine, rtype, task_state):
    maker = make_share if rtype == vocab.SHARE_INSTANCE else make_replica
    busy = maker(engine.db, vocab.CREATING, task_state=task_state)
    result = engine.run()
    _untouched(engine, rtype, busy)
    assert engine.driver.calls == []
    assert result["skipped"] == {f"busy task_state {task_state}": 1}
    assert result["outcomes"] == {}


@pytest.mark.parametrize("task_state", ["migration_success", "migration_error",
                                        "data_copying_error", None])
def test_a_finished_task_state_does_not_protect_the_instance(engine, task_state):
    inst = make_share(engine.db, vocab.CREATING, task_state=task_state)
    result = engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE
    assert result["skipped"] == {}


EXCLUDED_CASES = sorted((t, s) for t, statuses in EXCLUDED.items() for s in statuses)


@pytest.mark.parametrize("rtype,status", EXCLUDED_CASES)
def test_excluded_statuses_are_left_alone(engine, rtype, status):
    row = make(engine.db, rtype, status)
    result = engine.run()
    _untouched(engine, rtype, row)
    assert engine.driver.calls == []
    assert result["outcomes"] == {}
    assert sum(result["skipped"].values()) == 1
    (reason,) = result["skipped"]
    if status in (vocab.SERVER_MIGRATING, vocab.SERVER_MIGRATING_TO):
        assert "migration" in reason
    if status == vocab.ENSURING:
        assert "ensure" in reason


# Backups and the shares they hold ----------------------------------------------------


@pytest.mark.parametrize("status,column,settled", [
    (vocab.CREATING, "progress", vocab.ERROR),
    (vocab.RESTORING, "restore_progress", vocab.AVAILABLE),
])
@pytest.mark.parametrize("started", [True, False], ids=["started", "not-started"])
def test_backup_in_creating_or_restoring(engine, status, column, settled, started):
    """Started (progress set): the *_continue task owns it. Never started: a
    create fails, a restore returns the intact backup to available."""
    other = "restore_progress" if column == "progress" else "progress"
    # The other operation's progress column must not count.
    backup = make_backup(engine.db, status, **{column: "40" if started else None, other: "40"})
    result = engine.run()
    after = fetch(engine.db, vocab.BACKUP, backup.id)
    assert engine.driver.calls == []
    if started:
        assert after.status == status
        assert getattr(after, column) == "40"
        assert len(result["skipped"]) == 1 and "continue" in next(iter(result["skipped"]))
    else:
        assert after.status == settled
        assert result["outcomes"] == {vocab.BACKUP: {settled: 1}}


@pytest.mark.parametrize("share_status,backup_status,column", [
    (vocab.BACKUP_CREATING, vocab.CREATING, "progress"),
    (vocab.BACKUP_RESTORING, vocab.RESTORING, "restore_progress"),
])
@pytest.mark.parametrize("started", [True, False], ids=["backup-started", "not-started"])
def test_share_instance_held_by_a_backup(engine, share_status, backup_status, column, started):
    db = engine.db
    backup = make_backup(db, backup_status, share_status=share_status,
                         **{column: "10" if started else None})
    inst = api.query(db, models.ShareInstance, {"share_id": backup.share_id})[0]
    # A backup of another share in progress changes nothing for this one.
    make_backup(db, backup_status, **{column: "10"})
    result = engine.run()
    after = fetch(db, vocab.SHARE_INSTANCE, inst.id)
    if started:
        assert after.status == share_status
        assert result["skipped"]["backup in progress (continue task)"] == 1
        assert vocab.SHARE_INSTANCE not in result["outcomes"]
    else:
        assert after.status == vocab.ERROR
        assert result["outcomes"][vocab.SHARE_INSTANCE] == {vocab.ERROR: 1}


@pytest.mark.parametrize("request_state", ["pending", "alive"])
@pytest.mark.parametrize("share_status,backup_status,action", [
    (vocab.BACKUP_CREATING, vocab.CREATING, "create"),
    (vocab.BACKUP_RESTORING, vocab.RESTORING, "restore"),
])
def test_share_instance_whose_backup_request_is_open_is_left_alone(
        engine, share_status, backup_status, action, request_state):
    """The backup's request is keyed by the backup, not the share instance;
    the instance belongs to that request as much as the backup does. Marking
    it error would make the backup's own outcome (and its continue task)
    fail to write for ever."""
    db = engine.db
    backup = make_backup(db, backup_status, share_status=share_status)
    inst = api.query(db, models.ShareInstance, {"share_id": backup.share_id})[0]
    if request_state == "pending":
        req = add_request(db, vocab.BACKUP, backup.id, HOSTBE, action=action)
    else:
        peer = engine.peer()
        req = add_request(
            db,
            vocab.BACKUP,
            backup.id,
            HOSTBE,
            vocab.REQUEST_RUNNING,
            peer.member_id,
            action=action,
        )
    result = engine.run()
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == share_status
    assert fetch(db, vocab.BACKUP, backup.id).status == backup_status
    assert request_row(db, req).status == (vocab.REQUEST_PENDING if request_state == "pending"
                                           else vocab.REQUEST_RUNNING)
    assert result["outcomes"] == {}
    assert sum(result["skipped"].values()) == 2


def test_share_instance_whose_backup_request_died_is_settled(engine):
    db = engine.db
    backup = make_backup(db, vocab.CREATING, share_status=vocab.BACKUP_CREATING)
    inst = api.query(db, models.ShareInstance, {"share_id": backup.share_id})[0]
    req = add_request(db, vocab.BACKUP, backup.id, HOSTBE, vocab.REQUEST_RUNNING, engine_id())
    result = engine.run()
    assert request_row(db, req).status == vocab.REQUEST_ABANDONED
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR
    assert fetch(db, vocab.BACKUP, backup.id).status == vocab.ERROR
    assert result["abandoned_requests"] == 1


# Hosts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_only_this_hosts_backends_and_their_pools(engine, rtype):
    mine = [_stuck(engine, rtype, h) for h in (HOSTBE, f"{HOSTBE}#pool1")]
    theirs = [_stuck(engine, rtype, h) for h in
              (f"{HOSTBE}2", f"{HOSTBE}2#pool1", "hostB@be", "xhostA@be", f"{HOST}@b",
               f"{HOST}@be.x", HOST)]
    result = engine.run()
    for row in mine:
        _settled(engine, rtype, row)
    for row in theirs:
        _untouched(engine, rtype, row)
    assert sum(result["outcomes"][rtype].values()) == 2
    assert result["skipped"] == {}


def test_like_wildcards_in_a_backend_name_match_nothing_else(sqlite_db, tmp_path):
    eng = Engine(sqlite_db, coord_url(tmp_path), drivers={"b_1": FakeDriver()})
    try:
        mine = make_share(sqlite_db, vocab.CREATING, host=f"{HOST}@b_1#p")
        other = make_share(sqlite_db, vocab.CREATING, host=f"{HOST}@bx1#p")
        eng.run()
        assert fetch(sqlite_db, vocab.SHARE_INSTANCE, mine.id).status == vocab.AVAILABLE
        assert fetch(sqlite_db, vocab.SHARE_INSTANCE, other.id).status == vocab.CREATING
    finally:
        eng.close()


def test_share_servers_only_on_dhss_backends(sqlite_db, tmp_path):
    drivers = {BACKEND: FakeDriver(dhss=False), "dh": FakeDriver(dhss=True)}
    eng = Engine(sqlite_db, coord_url(tmp_path), drivers=drivers)
    try:
        plain = [make_server(sqlite_db, s) for s in (vocab.CREATING, vocab.DELETING)]
        dhss = [make_server(sqlite_db, s, host=f"{HOST}@dh") for s in (vocab.CREATING,
                                                                       vocab.DELETING)]
        share = make_share(sqlite_db, vocab.CREATING)  # a non-DHSS backend still has shares
        result = eng.run()
        for row in plain:
            _untouched(eng, vocab.SHARE_SERVER, row)
        assert [fetch(sqlite_db, vocab.SHARE_SERVER, r.id).status for r in dhss] == [
            vocab.ERROR, vocab.DELETED]
        assert fetch(sqlite_db, vocab.SHARE_INSTANCE, share.id).status == vocab.AVAILABLE
        assert drivers[BACKEND].calls == [("get_share_status", share.id)]
        assert drivers["dh"].calls == [("teardown_server", dhss[1].id)]
        # Not scanned at all: nothing skipped.
        assert result["skipped"] == {}
        assert result["outcomes"][vocab.SHARE_SERVER] == {vocab.ERROR: 1, vocab.DELETED: 1}
    finally:
        eng.close()


# Open requests and engines ----------------------------------------------------------------


@pytest.mark.parametrize("host", [HOSTBE, f"{HOSTBE}#pool1"], ids=["backend", "pool"])
@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_pending_request_leaves_the_resource_alone(engine, rtype, host):
    """It has not started yet: the engine that claims it does the work."""
    row = _stuck(engine, rtype, host)
    req = add_request(engine.db, rtype, row.id, host_of_row(engine.db, rtype, row))
    settled = _stuck(engine, rtype, host)
    result = engine.run()
    _untouched(engine, rtype, row)
    _settled(engine, rtype, settled)
    assert request_row(engine.db, req).status == vocab.REQUEST_PENDING
    assert result["skipped"] == {"request pending": 1}


@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_running_request_of_an_alive_engine_leaves_the_resource_alone(engine, rtype):
    peer = engine.peer()
    row = _stuck(engine, rtype)
    req = add_request(engine.db, rtype, row.id, host_of_row(engine.db, rtype, row),
                      vocab.REQUEST_RUNNING, peer.member_id)
    result = engine.run()
    _untouched(engine, rtype, row)
    assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
    assert result["skipped"] == {"in progress": 1}
    assert result["abandoned_requests"] == 0


@pytest.mark.parametrize("host", [HOSTBE, f"{HOSTBE}#pool1"], ids=["backend", "pool"])
@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_running_request_of_a_dead_engine_is_abandoned_and_the_resource_settled(
        engine, rtype, host):
    dead = engine_id()
    row = _stuck(engine, rtype, host)
    req = add_request(engine.db, rtype, row.id, host_of_row(engine.db, rtype, row),
                      vocab.REQUEST_RUNNING, dead)
    result = engine.run()
    _settled(engine, rtype, row)
    after = request_row(engine.db, req)
    assert after.status == vocab.REQUEST_ABANDONED
    assert after.finished_at is not None
    assert dead in after.error and engine.engine_id in after.error
    assert result["abandoned_requests"] == 1
    assert result["skipped"] == {}


def test_a_reconcile_run_a_dead_engine_of_this_host_claimed_is_abandoned(engine):
    """'sharectl reconcile run' goes to the plain host: when the engine that
    claimed it dies, the next pass of the host abandons it (else it would
    stay running for ever), and leaves an alive engine's alone."""
    dead = engine_id()
    mine = add_request(engine.db, vocab.RECONCILE, models.new_id(), HOST, vocab.REQUEST_RUNNING,
                       dead, action=vocab.ACTION_RUN)
    alive = add_request(engine.db, vocab.RECONCILE, models.new_id(), HOST,
                        vocab.REQUEST_RUNNING, engine.engine_id, action=vocab.ACTION_RUN)
    result = engine.run()
    assert request_row(engine.db, mine).status == vocab.REQUEST_ABANDONED
    assert request_row(engine.db, alive).status == vocab.REQUEST_RUNNING
    assert result["abandoned_requests"] == 1


def test_requests_of_a_dead_engine_elsewhere_are_not_ours(engine):
    dead = engine_id()
    other_host = add_request(engine.db, vocab.SHARE_INSTANCE, models.new_id(), "hostB@be",
                             vocab.REQUEST_RUNNING, dead)
    other_backend = add_request(engine.db, vocab.SHARE_INSTANCE, models.new_id(), f"{HOSTBE}2",
                                vocab.REQUEST_RUNNING, dead)
    hostless = add_request(engine.db, "stack", models.new_id(), None, vocab.REQUEST_RUNNING, dead)
    result = engine.run()
    for req in (other_host, other_backend, hostless):
        assert request_row(engine.db, req).status == vocab.REQUEST_RUNNING
    assert result["abandoned_requests"] == 0


def test_an_engine_that_joins_and_claims_during_the_pass_is_not_taken_for_dead(engine):
    """Interleaving: a new engine of this host joins the group and claims a
    pending request while the pass reads membership and requests. Its claim
    must not be abandoned whichever read comes first."""
    db = engine.db
    inst = make_share(db, vocab.CREATING)
    req = add_request(db, vocab.SHARE_INSTANCE, inst.id, HOSTBE)
    newcomer = engine.peer(join=False)
    real_engines = engine.coordinator.engines

    joined = []

    def engines_then_newcomer_claims():
        members = real_engines()
        if not joined:  # the pass reads membership once per stage: join at the first
            joined.append(newcomer.join_engines())
            claimed = api.request_claim(db, [HOSTBE], newcomer.member_id, limit=10)
            assert [r.id for r in claimed] == [req]
        return members

    engine.coordinator.engines = engines_then_newcomer_claims
    result = engine.run()
    after = request_row(db, req)
    assert (after.status, after.engine_id) == (vocab.REQUEST_RUNNING, newcomer.member_id)
    assert result["abandoned_requests"] == 0
    _untouched(engine, vocab.SHARE_INSTANCE, inst)


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


def test_an_unexpected_error_on_one_resource_does_not_stop_the_pass(engine):
    """The coordination backend fails on one resource's lock: that resource
    is a failure of the pass, every other one (of every stage) is settled and
    the pass is recorded."""
    db = engine.db
    broken = make_share(db, vocab.CREATING)
    others = {rtype: _stuck(engine, rtype) for rtype in STAGE_ORDER}
    real_try_lock = engine.coordinator.try_lock

    def try_lock(name):
        if name == lock_name(vocab.SHARE_INSTANCE, broken.id):
            raise coordination.ToozError("lock backend unavailable")
        return real_try_lock(name)

    engine.coordinator.try_lock = try_lock
    result = engine.run()
    _untouched(engine, vocab.SHARE_INSTANCE, broken)
    for rtype, row in others.items():
        _settled(engine, rtype, row)
    assert result["failures"] == 1
    record = db_rec.passes(db, pass_id=result["id"])[0]
    assert record.finished_at is not None
    assert record.summary["failures"] == 1


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
