"""Reverting a share to its latest snapshot (manager/revert_ops.py): the
plan's checks and what the operation writes, on a real database, coordinator
and Operations; the driver is the reconciliation rigs' fake, given a
``revert_to_snapshot``."""

from __future__ import annotations

import datetime

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import revert_ops
from sharemgr.manager.plans import Refused

from tests.unit.reconcile_harness import add, expect, fetch, make_snapshot


def _write(db, plan):
    assert api.transition_with_request(db, plan.changes, plan.op.request(), rows=plan.add)
    return plan.op


def _reverter(engine, fails: bool = False) -> list:
    got: list = []

    def revert_to_snapshot(snapshot, share_rules, snapshot_rules, share_server=None):
        got.append((snapshot, share_rules, snapshot_rules))
        if fails:
            raise ShareBackendException("array says no")

    engine.driver.revert_to_snapshot = revert_to_snapshot
    return got


def test_a_revert_ends_with_the_share_and_the_snapshot_available(engine):
    db = engine.db
    snap_inst = make_snapshot(db, vocab.AVAILABLE)
    op = _write(db, revert_ops.plan_revert(db, snap_inst.snapshot_id))
    assert fetch(db, vocab.SHARE_INSTANCE, snap_inst.share_instance_id).status == vocab.REVERTING
    assert fetch(db, vocab.SNAPSHOT_INSTANCE, snap_inst.id).status == vocab.RESTORING
    got = _reverter(engine)

    expect(engine.operations.perform(op), Result.DONE)

    assert fetch(db, vocab.SHARE_INSTANCE, snap_inst.share_instance_id).status == vocab.AVAILABLE
    assert fetch(db, vocab.SNAPSHOT_INSTANCE, snap_inst.id).status == vocab.AVAILABLE
    [(snapshot, share_rules, snapshot_rules)] = got
    assert (snapshot["id"], snapshot["share_instance_id"]) == (snap_inst.id,
                                                               snap_inst.share_instance_id)
    assert share_rules == [] and snapshot_rules == []


def test_a_failed_revert_leaves_the_share_reverting_error_and_the_snapshot_available(engine):
    db = engine.db
    snap_inst = make_snapshot(db, vocab.AVAILABLE)
    op = _write(db, revert_ops.plan_revert(db, snap_inst.snapshot_id))
    _reverter(engine, fails=True)

    expect(engine.operations.perform(op), Result.FAILED, "array says no")

    assert fetch(db, vocab.SHARE_INSTANCE,
                 snap_inst.share_instance_id).status == vocab.REVERTING_ERROR
    assert fetch(db, vocab.SNAPSHOT_INSTANCE, snap_inst.id).status == vocab.AVAILABLE


def test_only_the_latest_snapshot_of_the_share_s_size_without_replicas(engine):
    db = engine.db
    old = make_snapshot(db, vocab.AVAILABLE)
    inst = fetch(db, vocab.SHARE_INSTANCE, old.share_instance_id)
    newer = models.ShareSnapshot(id=models.new_id(), share_id=inst.share_id, size=5,
                                 created_at=models.utcnow() + datetime.timedelta(seconds=5))
    add(db, newer, models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=newer.id,
                                                share_instance_id=inst.id,
                                                status=vocab.AVAILABLE))
    with pytest.raises(Refused, match=f"only the share's latest snapshot \\({newer.id}\\)"):
        revert_ops.plan_revert(db, old.snapshot_id)
    api.conditional_update(db, models.Share, inst.share_id, {}, {"size": 6})
    with pytest.raises(Refused, match="the share is 6 GiB, the snapshot 5 GiB"):
        revert_ops.plan_revert(db, newer.id)
    api.conditional_update(db, models.Share, inst.share_id, {}, {"size": 5})
    add(db, models.ShareInstance(id=models.new_id(), share_id=inst.share_id, host=inst.host,
                                 status=vocab.AVAILABLE, replica_state=vocab.REPLICA_IN_SYNC,
                                 export_locations=[]))
    with pytest.raises(Refused, match="has replicas"):
        revert_ops.plan_revert(db, newer.id)
    with pytest.raises(Refused, match="no snapshot with id 'nope'"):
        revert_ops.plan_revert(db, "nope")


def test_a_share_resized_after_the_plan_read_it_is_not_reverted(engine):
    """The plan checks the share's size against the snapshot's; a resize
    that began and ended before the plan was written left the instance
    available, so the write's condition on the size is what refuses it."""
    db = engine.db
    snap_inst = make_snapshot(db, vocab.AVAILABLE)
    plan = revert_ops.plan_revert(db, snap_inst.snapshot_id)
    api.conditional_update(db, models.Share, plan.row.id, {}, {"size": plan.row.size + 1})
    assert not api.transition_with_request(db, plan.changes, plan.op.request())
    assert fetch(db, vocab.SHARE_INSTANCE, snap_inst.share_instance_id).status == vocab.AVAILABLE
    assert fetch(db, vocab.SNAPSHOT_INSTANCE, snap_inst.id).status == vocab.AVAILABLE
