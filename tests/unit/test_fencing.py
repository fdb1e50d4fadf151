"""Fencing (doc/reconciliation.rst, "Fencing"): every take and status change
bumps a resource's token; an outcome is written only under the token it was
taken with; a driver that honours tokens refuses an older one; on every
database."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.db import leases as db_leases
from sharemgr.db import reconcile as db_rec
from sharemgr.drivers.dummy_state import BackendState
from sharemgr.drivers.exceptions import FencedCall
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.membership import Membership
from sharemgr.manager.plans import Op

from tests.unit.reconcile_harness import (
    HOSTBE,
    add_request,
    expect,
    fetch,
    make_replica,
    make_share,
)


def _fence(db, ident: str) -> int:
    return api.get(db, models.ShareInstance, ident).fence


def test_take_and_status_changes_bump_the_token(db):
    inst = make_share(db, vocab.EXTENDING)
    assert _fence(db, inst.id) == 0
    with db.session() as session:
        assert db_leases.take_tx(session, models.ShareInstance, inst.id, (vocab.EXTENDING,))
        assert not db_leases.take_tx(session, models.ShareInstance, inst.id, (vocab.CREATING,))
    assert _fence(db, inst.id) == 1
    # An outcome read under token 0 no longer applies; one under 1 does, and bumps it.
    old = (models.ShareInstance, inst.id, {"status": vocab.EXTENDING, "fence": 0},
           {"status": vocab.AVAILABLE})
    assert not api.conditional_update(db, *old)
    assert api.conditional_update(db, models.ShareInstance, inst.id,
                                  {"status": vocab.EXTENDING, "fence": 1},
                                  {"status": vocab.AVAILABLE})
    assert _fence(db, inst.id) == 2
    # A change that leaves the status alone leaves the token too.
    assert api.conditional_update(db, models.ShareInstance, inst.id, {}, {"progress": "1%"})
    assert _fence(db, inst.id) == 2


def test_batched_outcomes_bump_and_check_the_token(db):
    """The reconciliation's batched writes (one UPDATE for many rows, and on
    PostgreSQL one UPDATE … FROM VALUES) check and bump each row's token."""
    rows = [make_share(db, vocab.CREATING) for _ in range(3)]
    taken = db_leases.take_rows(db, models.ShareInstance, {r.id: vocab.CREATING for r in rows})
    assert {i: r.fence for i, r in taken.items()} == {r.id: 1 for r in rows}
    groups = [[(models.ShareInstance, r.id, {"status": vocab.CREATING, "fence": 1},
                {"status": vocab.ERROR})] for r in rows]
    groups[1][0][2]["fence"] = 0  # read under an older token: must lose
    assert db_rec.transitions(db, groups) == [True, False, True]
    assert [(fetch(db, vocab.SHARE_INSTANCE, r.id).status, _fence(db, r.id)) for r in rows] \
        == [(vocab.ERROR, 2), (vocab.CREATING, 1), (vocab.ERROR, 2)]
    if not db.update_returning:
        return  # MariaDB: no UPDATE … RETURNING, the one-by-one path above
    with db.session() as session:
        won = api.conditional_update_many_tx(session, models.ShareInstance, [rows[1].id],
                                             {"status": vocab.CREATING},
                                             {"status": vocab.ERROR})
    assert won == {rows[1].id} and _fence(db, rows[1].id) == 2


def _extending(engine, size: int = 5) -> tuple[models.ShareInstance, int]:
    inst = make_share(engine.db, vocab.EXTENDING, size=size)
    req = add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE,
                      status=vocab.REQUEST_RUNNING, engine_id=engine.engine_id,
                      action=vocab.ACTION_EXTEND)
    return inst, req


def test_an_outcome_under_a_moved_token_is_not_written(any_engine):
    """A reconciliation takes the share while the extend's driver call runs:
    the call's outcome is not written (the resource is re-observed), and
    the request ends abandoned, never done."""
    engine = any_engine
    inst, _ = _extending(engine)
    lost = []
    engine.operations.on_lost = lambda rtype, ident: lost.append(ident)
    tokens = []

    def extend(share, new_size, server=None):
        tokens.append(share["fence_token"])
        db_leases.take_rows(engine.db, models.ShareInstance, {inst.id: vocab.EXTENDING})

    engine.driver.extend_share = extend
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})), Result.LOST)
    assert tokens == [1] and lost == [inst.id]
    row = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
    assert row.status == vocab.EXTENDING and row.fence == 2
    assert api.get(engine.db, models.Share, inst.share_id).size == 5


def test_a_fenced_call_writes_no_error(any_engine):
    """A backend that refuses the call as fenced changed nothing: no error
    status is written over the new owner's work."""
    engine = any_engine
    inst, _ = _extending(engine)

    def extend(share, new_size, server=None):
        raise FencedCall("older token")

    engine.driver.extend_share = extend
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})), Result.LOST)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.EXTENDING


def test_no_driver_call_while_out_of_the_group(engine):
    inst, _ = _extending(engine)
    engine.operations.not_member = lambda: "its membership expired"
    engine.driver.extend_share = lambda *a: pytest.fail("driver called while out of the group")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})), Result.NOT_NOW)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.EXTENDING


def test_a_lock_the_backend_fails_to_grant_gives_the_request_back(engine):
    """tooz's etcd lock raised OperationTimedOut while the etcd leader was
    being replaced: the request failed for good and its share stayed
    ``creating`` with no request to move it (tests/functional/test_etcd.py,
    seen in CI). Nothing reached the driver: the request is given back."""
    from tooz import coordination as tooz_coordination

    inst, _ = _extending(engine)

    class Unreachable:
        def acquire(self, blocking=True):
            raise tooz_coordination.OperationTimedOut("read timed out")

    engine.operations.coordinator.lock = lambda name: Unreachable()
    engine.driver.extend_share = lambda *a: pytest.fail("driver called without its lock")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})), Result.NOT_NOW, "OperationTimedOut")
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.EXTENDING


def test_a_given_back_request_is_pending_again(engine):
    _, req = _extending(engine)
    assert api.request_release(engine.db, req, engine.engine_id, "out of the group")
    row = api.get(engine.db, models.Request, req)
    assert (row.status, row.engine_id, row.lease_expires_at) == (vocab.REQUEST_PENDING, None,
                                                                 None)
    assert not api.request_release(engine.db, req, engine.engine_id, "twice")


def test_reconciliation_takes_what_it_settles(engine):
    """The pass's status read carries the token it took the row with."""
    inst = make_share(engine.db, vocab.CREATING)
    seen = []
    real = engine.driver.get_share_status

    def status(share, server=None):
        seen.append(share["fence_token"])
        return real(share, server)

    engine.driver.get_share_status = status
    engine.run()
    assert seen == [1]
    row = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
    assert row.status == vocab.AVAILABLE and row.fence == 2


def test_dummy_state_keeps_the_highest_token(tmp_path):
    state = BackendState(str(tmp_path), backend="dummy")
    with state.transaction() as tx:
        assert tx.accept_token("x", 3) is None
        assert tx.accept_token("x", 3) is None  # the same owner again
        assert tx.accept_token("x", 2) == 3
        assert tx.accept_token("x", 5) is None
        assert tx.accept_token("x", 4) == 5


class _Coordinator:
    def __init__(self, member: str) -> None:
        self.members = {member}
        self.fail: Exception | None = None
        self.rejoined = 0

    def engines(self) -> set[str]:
        if self.fail:
            raise self.fail
        return set(self.members)

    def rejoin_engines(self) -> None:
        self.rejoined += 1


def test_membership_heals():
    coord = _Coordinator("me")
    membership = Membership(coord, "me", stale_after=60)
    membership.check()
    assert membership.not_member() is None
    coord.members = set()  # expired while paused; the rejoin does not take yet
    membership.check()
    assert "expired" in membership.not_member() and coord.rejoined == 1
    assert not membership.state()[0]
    coord.rejoin_engines = lambda: coord.members.add("me")
    membership.check()
    assert membership.not_member() is None and membership.rejoins == 1
    coord.fail = ConnectionError("no route")
    membership.check()
    assert "unreachable" in membership.not_member()


def test_a_file_membership_that_expired_while_paused_comes_back(tmp_path):
    """tooz's file driver keeps an expired member's file, and its
    run_watchers forgets that the group was joined, so the heartbeat stops
    refreshing the file and a plain join finds it there: the engine stayed
    out for good (seen after a SIGSTOP under load)."""
    import os

    from sharemgr.common.vocab import ENGINE_GROUP

    coord = Coordinator(f"file://{tmp_path}/coordination?timeout=2", "me")
    coord.start(heartbeat=False)
    try:
        coord.join_engines()
        coord.watch_leave(lambda event: None)
        coord.run_watchers()
        membership = Membership(coord, "me", stale_after=60)
        membership.check()
        assert membership.not_member() is None
        group = tmp_path / "coordination" / "groups"
        [member] = group.glob("*/*.raw")
        os.utime(member, (0, 0))  # the heartbeats a pause missed
        coord.run_watchers()  # the engine's own watcher runs first on resume
        membership.check()
        assert membership.not_member() is None, membership.not_member()
        coord.heartbeat()  # and the heartbeat keeps the new membership fresh
        assert coord.engines() == {"me"}
        assert ENGINE_GROUP in coord._coord._joined_groups
    finally:
        coord.stop()


def test_membership_is_only_as_good_as_its_last_answer(monkeypatch):
    import time as time_mod

    coord = _Coordinator("me")
    membership = Membership(coord, "me", stale_after=5)
    membership.check()
    now = time_mod.monotonic()
    monkeypatch.setattr("sharemgr.manager.membership.time.monotonic", lambda: now + 6)
    assert "has not answered" in membership.not_member()


def test_membership_is_not_stale_before_its_checks_begin(monkeypatch):
    """A start that takes long before the checks run (a backend's set-up)
    is no silent coordination backend; from ``begin`` on it counts."""
    import time as time_mod

    membership = Membership(_Coordinator("me"), "me", stale_after=5)
    now = time_mod.monotonic()
    monkeypatch.setattr("sharemgr.manager.membership.time.monotonic", lambda: now + 60)
    assert membership.not_member() is None
    membership.begin()
    monkeypatch.setattr("sharemgr.manager.membership.time.monotonic", lambda: now + 66)
    assert "has not answered" in membership.not_member()


def test_no_driver_call_once_the_lock_is_no_longer_ours(engine):
    """A pause longer than ``lock_timeout`` between the take and the call:
    the engine's lock may be another's by now; the call is not made."""
    inst, _ = _extending(engine)
    asked = []

    def still_holds(name):
        asked.append(name)
        return False

    engine.operations.coordinator.still_holds = still_holds
    engine.driver.extend_share = lambda *a: pytest.fail("driver called without its lock")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})), Result.NOT_NOW, "its lock expired")
    assert asked and inst.id.encode() in asked[0]


def test_an_expired_redis_lock_is_not_still_held(redis_url, tmp_path):
    """Coordinator.still_holds asks Redis: a lock whose expiry passed (no
    heartbeat: the engine was frozen) and that another engine then took is
    no longer ours; a held one is, and so is a file lock (it cannot expire)."""
    import time
    import uuid


    url = f"{redis_url}&lock_timeout=1&membership_timeout=1"
    frozen, peer = Coordinator(url, f"a-{uuid.uuid4()}"), Coordinator(url, f"b-{uuid.uuid4()}")
    frozen.start(heartbeat=False)
    peer.start(heartbeat=False)
    name = f"sharemgr-test-{uuid.uuid4()}".encode()
    try:
        with frozen.hold(name):
            assert frozen.still_holds(name)
            time.sleep(1.5)  # past lock_timeout, never extended
            with peer.try_lock(name) as got:
                assert got
                assert peer.still_holds(name)
                assert not frozen.still_holds(name)
        assert frozen.still_holds(name)  # released: nothing to ask about
    finally:
        frozen.stop()
        peer.stop()
    files = Coordinator(f"file://{tmp_path}/coordination", "c")
    files.start(heartbeat=False)
    try:
        with files.hold(name):
            assert files.still_holds(name)  # tooz cannot tell: held until released
    finally:
        files.stop()


def test_a_drift_finding_is_not_written_over_a_newer_change(any_engine):
    """A drift check reads an available share of 5 GiB; another engine
    extends it to 8 (database and backend) before the check's question
    reaches the backend, which answers 8. The check's 'size' finding is
    stale: it is not written, being conditional on the token the check
    read, not only on 'available'."""
    from sharemgr.reconcile import drift

    engine = any_engine
    inst = make_share(engine.db, vocab.AVAILABLE, size=5)
    real = engine.driver._status

    def extended_meanwhile(method, obj, healthy):
        real(method, obj, healthy)
        for before, after in ((vocab.AVAILABLE, vocab.EXTENDING),
                              (vocab.EXTENDING, vocab.AVAILABLE)):
            assert api.conditional_update(engine.db, models.ShareInstance, inst.id,
                                          {"status": before}, {"status": after})
        assert api.conditional_update(engine.db, models.Share, inst.share_id, {"size": 5},
                                      {"size": 8})
        return {"status": vocab.AVAILABLE, "size": 8}

    engine.driver._status = extended_meanwhile
    summary = drift.DriftChecker(engine.reconciler,
                                 drift.policy_table({"size": "error"})).run()
    row = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
    assert (row.status, row.drift) == (vocab.AVAILABLE, None), summary


def test_each_resize_reaches_a_secondary_replica_under_a_newer_token(any_engine):
    """A resize calls the driver for the share's secondary replicas too. Each
    such call carries a token newer than the last one's, so a call left
    running by a taken-over resize is refused by the backend once the next
    resize's call to the same replica arrived (the many-host run's
    ``overlap``: two resizes' calls to one replica, equal tokens, both
    accepted)."""
    engine = any_engine
    rep = make_replica(engine.db, vocab.AVAILABLE)
    active = api.query(engine.db, models.ShareInstance, {"share_id": rep.share_id,
                                                         "replica_state": vocab.REPLICA_ACTIVE})[0]
    tokens: dict[str, list[int]] = {active.id: [], rep.id: []}

    def resize(share, new_size, server=None):
        tokens[share["id"]].append(share["fence_token"])

    engine.driver.extend_share = resize
    for new_size in (7, 9):
        assert api.conditional_update(engine.db, models.ShareInstance, active.id,
                                      {"status": vocab.AVAILABLE}, {"status": vocab.EXTENDING})
        expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, active.id, vocab.ACTION_EXTEND,
                                            args={"new_size": new_size})), Result.DONE)
    assert len(tokens[rep.id]) == 2 and tokens[rep.id][0] < tokens[rep.id][1], tokens
    # The replica is available still, under its newest token.
    row = fetch(engine.db, vocab.SHARE_INSTANCE, rep.id)
    assert (row.status, row.fence) == (vocab.AVAILABLE, tokens[rep.id][1])
