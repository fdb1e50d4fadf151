"""Startup reconciliation (doc/specs.rst, spec 002): what a pass must leave
alone — busy task states, excluded statuses, backups with their own workflow,
other hosts, DHSS, open requests — and the requests of dead engines it takes
over (locks, rows that change under it, failures and several engines at once:
test_reconciler_locks_and_failures.py).
"""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models

from tests.unit.reconcile_harness import (
    BACKEND,
    EXCLUDED,
    HOST,
    HOSTBE,
    STAGE_ORDER,
    Engine,
    FakeDriver,
    _settled,
    _stuck,
    _untouched,
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
