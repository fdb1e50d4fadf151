"""A replica's promotion and resync (manager/replica_ops.py), and the
reconciliation of a promotion a crash cut short: a real database,
coordinator, Operations and Reconciler; the driver is the reconciliation
rigs' fake, given ``promote_replica`` and ``update_replica_state``."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models, quiet, resources
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import delete_plans, plans, replica_ops
from sharemgr.manager.plans import Refused

from tests.unit.reconcile_harness import HOSTBE, expect, fetch, make_replica, make_share


def _write(db, plan):
    assert api.transition_with_request(db, plan.changes, plan.op.request(), rows=plan.add)
    return plan.op


def _active_of(db, rep) -> models.ShareInstance:
    active = resources.primary_instance(db, rep.share_id)
    assert active is not None
    return active


def _promoter(engine, answer=None, fails: bool = False) -> list:
    got: list = []

    def promote_replica(replica_list, replica, access_rules, share_server=None):
        got.append((sorted(r["id"] for r in replica_list), replica["id"]))
        if fails:
            raise ShareBackendException("cannot promote")
        return answer(replica_list, replica) if callable(answer) else answer

    engine.driver.promote_replica = promote_replica
    return got


def test_a_promoted_replica_is_active_and_the_old_active_takes_the_driver_s_state(engine):
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    old = _active_of(db, rep)
    op = _write(db, replica_ops.plan_promote(db, rep.id))
    assert fetch(db, vocab.REPLICA, rep.id).status == vocab.REPLICATION_CHANGE
    got = _promoter(engine, lambda lst, r: [
        {"id": r["id"], "replica_state": "active"},
        *({"id": o["id"], "replica_state": "in_sync"} for o in lst if o["id"] != r["id"])])

    expect(engine.operations.perform(op), Result.DONE)

    assert got == [(sorted([rep.id, old.id]), rep.id)]
    after = fetch(db, vocab.REPLICA, rep.id)
    assert (after.status, after.replica_state) == (vocab.AVAILABLE, vocab.REPLICA_ACTIVE)
    assert fetch(db, vocab.REPLICA, old.id).replica_state == vocab.REPLICA_IN_SYNC
    assert _active_of(db, rep).id == rep.id  # the share's active instance now


def test_an_old_active_the_driver_does_not_name_is_out_of_sync(engine):
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    old = _active_of(db, rep)
    op = _write(db, replica_ops.plan_promote(db, rep.id))
    _promoter(engine, None)
    expect(engine.operations.perform(op), Result.DONE)
    assert fetch(db, vocab.REPLICA, old.id).replica_state == vocab.REPLICA_OUT_OF_SYNC
    assert fetch(db, vocab.REPLICA, rep.id).replica_state == vocab.REPLICA_ACTIVE


@pytest.mark.parametrize("fails,answer", [(True, None), (False, "not a list")])
def test_a_failed_promotion_leaves_the_replica_available_in_state_error(engine, fails, answer):
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    old = _active_of(db, rep)
    op = _write(db, replica_ops.plan_promote(db, rep.id))
    _promoter(engine, answer, fails=fails)
    expect(engine.operations.perform(op), Result.FAILED)
    after = fetch(db, vocab.REPLICA, rep.id)
    assert (after.status, after.replica_state) == (vocab.AVAILABLE, vocab.REPLICA_ERROR)
    assert fetch(db, vocab.REPLICA, old.id).replica_state == vocab.REPLICA_ACTIVE


def test_promote_and_resync_refuse_the_active_instance_and_a_busy_replica(engine):
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    old = _active_of(db, rep)
    for plan in (replica_ops.plan_promote, replica_ops.plan_resync):
        with pytest.raises(Refused, match="is the active instance of its share"):
            plan(db, old.id)
    busy = make_replica(db, vocab.CREATING)
    with pytest.raises(Refused, match="its status is 'creating'"):
        replica_ops.plan_promote(db, busy.id)
    plain = make_share(db)
    with pytest.raises(Refused, match="not a secondary replica"):
        replica_ops.plan_promote(db, plain.id)


def test_resync_writes_the_state_the_driver_answers_and_error_when_it_fails(engine):
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)  # out_of_sync
    answers = iter([vocab.REPLICA_IN_SYNC, ShareBackendException("gone quiet"), "bogus"])

    def update_replica_state(replica_list, replica, access_rules, share_server=None):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    engine.driver.update_replica_state = update_replica_state
    expect(engine.operations.perform(_write(db, replica_ops.plan_resync(db, rep.id))), Result.DONE)
    assert fetch(db, vocab.REPLICA, rep.id).replica_state == vocab.REPLICA_IN_SYNC
    for _ in range(2):
        expect(engine.operations.perform(_write(db, replica_ops.plan_resync(db, rep.id))),
               Result.FAILED)
        after = fetch(db, vocab.REPLICA, rep.id)
        assert (after.status, after.replica_state) == (vocab.AVAILABLE, vocab.REPLICA_ERROR)


def test_the_periodic_update_asks_each_available_secondary_on_the_engine_s_hosts(engine):
    db = engine.db
    mine = make_replica(db, vocab.AVAILABLE)
    busy = make_replica(db, vocab.DELETING)
    elsewhere = make_replica(db, vocab.AVAILABLE, host="otherhost@be#p")
    asked: list[str] = []

    def update_replica_state(replica_list, replica, access_rules, share_server=None):
        asked.append(replica["id"])
        return vocab.REPLICA_IN_SYNC

    engine.driver.update_replica_state = update_replica_state
    assert replica_ops.update_replica_states(engine.operations, [HOSTBE]) == 1
    assert asked == [mine.id]
    assert fetch(db, vocab.REPLICA, mine.id).replica_state == vocab.REPLICA_IN_SYNC
    assert fetch(db, vocab.REPLICA, busy.id).replica_state == vocab.REPLICA_OUT_OF_SYNC
    assert fetch(db, vocab.REPLICA, elsewhere.id).replica_state == vocab.REPLICA_OUT_OF_SYNC


@pytest.mark.parametrize("backend_state", [vocab.REPLICA_ACTIVE, vocab.REPLICA_IN_SYNC])
def test_a_promotion_cut_by_a_crash_ends_error_whatever_the_backend_says(engine, backend_state):
    """The startup-reconciliation spec: replication_change cannot be resumed
    without the call's context; the replica ends error, the backend is not
    asked, and the old active keeps its state."""
    db = engine.db
    rep = make_replica(db, vocab.REPLICATION_CHANGE)
    old = _active_of(db, rep)
    engine.driver.replica_state = backend_state
    result = engine.run()
    assert fetch(db, vocab.REPLICA, rep.id).status == vocab.ERROR
    assert fetch(db, vocab.REPLICA, old.id).replica_state == vocab.REPLICA_ACTIVE
    assert result["outcomes"] == {vocab.REPLICA: {vocab.ERROR: 1}}


@pytest.mark.parametrize("new_size,method", [(7, "extend_share"), (3, "shrink_share")])
def test_a_resize_reaches_every_replica_of_the_share(engine, new_size, method):
    from sharemgr.manager import plans

    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    active = _active_of(db, rep)
    resized: list[tuple[str, int]] = []
    setattr(engine.driver, method,
            lambda share, size, server=None: resized.append((share["id"], size)))
    op = _write(db, plans.resize_share(db, rep.share_id, new_size))
    expect(engine.operations.perform(op), Result.DONE)
    assert resized == [(active.id, new_size), (rep.id, new_size)]
    assert api.get(db, models.Share, rep.share_id).size == new_size


def _written(db, plan) -> bool:
    return api.transition_with_request(db, plan.changes, plan.op.request(), rows=plan.add,
                                       conditions=plan.conditions)


def test_a_replica_s_delete_and_its_share_s_resize_never_both_start(engine):
    """Both planned while the share was quiet (each plan's early check
    passes), the first written wins and the second is refused in its own
    transaction: a chaos run saw the resize call the driver on the replica
    its delete was deleting (db/quiet.py)."""
    db = engine.db
    rep = make_replica(db, vocab.AVAILABLE)
    shrink = plans.resize_share(db, rep.share_id, 3)
    delete = delete_plans.delete(db, vocab.REPLICA, rep.id)
    assert _written(db, delete)
    with pytest.raises(quiet.Busy, match="it has a replica that is deleting"):
        _written(db, shrink)
    assert _active_of(db, rep).status == vocab.AVAILABLE  # nothing of the shrink written
    with pytest.raises(Refused, match="it has a replica that is deleting"):
        plans.resize_share(db, rep.share_id, 3)

    other = make_replica(db, vocab.AVAILABLE)
    delete = delete_plans.delete(db, vocab.REPLICA, other.id)
    assert _written(db, plans.resize_share(db, other.share_id, 3))
    with pytest.raises(quiet.Busy, match="its share is shrinking"):
        _written(db, delete)
    assert fetch(db, vocab.REPLICA, other.id).status == vocab.AVAILABLE
    with pytest.raises(Refused, match="its share is shrinking"):
        delete_plans.delete(db, vocab.REPLICA, other.id)


def test_a_snapshot_or_replica_planned_before_a_resize_was_written_is_refused(engine):
    """They need the share's instance available: written after the resize,
    their condition on it loses ("changed meanwhile")."""
    db = engine.db
    inst = make_share(db, vocab.AVAILABLE)
    snap = plans.create_snapshot(db, inst.share_id)
    assert _written(db, plans.resize_share(db, inst.share_id, 3))
    assert not _written(db, snap)
    assert not api.query(db, models.ShareSnapshotInstance, {"share_instance_id": inst.id})


@pytest.mark.parametrize("planner", ["snapshot", "replica", "backup"])
def test_one_planned_before_a_resize_began_and_ended_is_refused(engine, planner):
    """A resize that begins and ends between the plan's read and its write
    leaves the instance available again: the share's size, which the
    snapshot and the backup record and the replica claims, is what the
    write checks."""
    db = engine.db
    inst = make_share(db, vocab.AVAILABLE)
    plan = {"snapshot": plans.create_snapshot, "backup": plans.create_backup,
            "replica": lambda db, share_id: plans.create_replica(db, share_id, None, False),
            }[planner](db, inst.share_id)
    size = api.get(db, models.Share, inst.share_id).size
    api.conditional_update(db, models.Share, inst.share_id, {}, {"size": size + 1})
    assert not _written(db, plan)
    assert [i.id for i in api.query(db, models.ShareInstance, {"share_id": inst.share_id})] \
        == [inst.id]
    assert not api.query(db, models.ShareSnapshotInstance, {"share_instance_id": inst.id})
    assert not api.query(db, models.ShareBackup, {"share_id": inst.share_id})
