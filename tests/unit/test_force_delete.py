"""Forced deletes (issue 14): the planner's checks, the operation's outcome
when the driver fails, the reconciler finishing a forced delete a crash cut
short, and how driver failures are logged. Real database, coordinator,
Operations and Reconciler; the driver is the reconciliation rigs' fake."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models, quiet, resources
from sharemgr.manager import backup_ops, delete_plans, plans
from sharemgr.manager.plans import Op

from tests.unit.reconcile_harness import (
    HOSTBE,
    add,
    engine_id,
    expect,
    fetch,
    make,
    make_backup,
    make_share,
    make_snapshot,
)

OPS_LOGGER = "sharemgr.manager.operations"


def _delete_request(db, rtype: str, ident: str, args: dict, engine: str) -> int:
    """A delete request claimed by ``engine`` (not a member: it died)."""
    req = models.Request(resource_type=rtype, resource_id=ident, action=vocab.ACTION_DELETE,
                         host=HOSTBE, status=vocab.REQUEST_RUNNING, engine_id=engine,
                         args=args, claimed_at=models.utcnow())
    add(db, req)
    return req.id


# The planner ---------------------------------------------------------------------------


def test_forced_delete_starts_from_any_status_and_carries_the_flag(engine):
    db = engine.db
    snap = make_snapshot(db, vocab.CREATING)
    with pytest.raises(plans.Refused, match="its status is 'creating'"):
        delete_plans.delete(db, vocab.SNAPSHOT, snap.snapshot_id)
    plan = delete_plans.delete(db, vocab.SNAPSHOT, snap.snapshot_id, force=True)
    assert plan.op.args == {"force": True}
    assert list(plan.changes) == [(models.ShareSnapshotInstance, snap.id,
                             {"status": vocab.CREATING}, {"status": vocab.DELETING})]
    # Without force nothing changes: no args.
    done = make_snapshot(db, vocab.AVAILABLE)
    assert delete_plans.delete(db, vocab.SNAPSHOT, done.snapshot_id).op.args == {}


def test_forced_share_delete_is_still_refused_while_it_has_snapshots(engine):
    """As in Manila: force lifts the status check, not the children's."""
    snap = make_snapshot(engine.db, vocab.ERROR_DELETING)
    inst = api.get(engine.db, models.ShareInstance, snap.share_instance_id)
    with pytest.raises(plans.Refused, match="has snapshots"):
        delete_plans.delete(engine.db, vocab.SHARE, inst.share_id, force=True)


def test_a_share_with_backups_is_refused_forced_or_not(any_engine):
    """A backup is restored into its share alone (as in Manila): the share
    goes once its backups have gone, whatever their status; one made while
    the delete was planned refuses it in the writing transaction."""
    db = any_engine.db
    inst = make_share(db, vocab.BACKUP_CREATING)
    backup = models.ShareBackup(id=models.new_id(), share_id=inst.share_id, host=HOSTBE,
                                status=vocab.CREATING, size=5)
    add(db, backup)
    for force in (False, True):
        with pytest.raises(plans.Refused, match="has 1 backup"):
            delete_plans.delete(db, vocab.SHARE, inst.share_id, force=force)
    api.conditional_update(db, models.ShareBackup, backup.id, {}, {"status": vocab.ERROR})
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    with pytest.raises(plans.Refused, match="has 1 backup"):
        delete_plans.delete(db, vocab.SHARE, inst.share_id, force=True)
    api.conditional_update(db, models.ShareBackup, backup.id, {},
                           {"status": vocab.DELETED, "deleted_at": models.utcnow()})
    plan = delete_plans.delete(db, vocab.SHARE, inst.share_id)
    late = models.ShareBackup(id=models.new_id(), share_id=inst.share_id, host=HOSTBE,
                              status=vocab.AVAILABLE, size=5)
    add(db, late)  # made between the plan and its write
    with pytest.raises(quiet.Busy, match="has backups"):
        api.transition_with_request(db, plan.changes, plan.op.request(),
                                    conditions=plan.conditions)
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE


def test_a_replica_holding_snapshots_is_refused_forced_or_not(any_engine):
    """Snapshots stay on the replica that was active when they were taken;
    after a promote that is a secondary, whose delete would leave them on a
    deleted instance (a revert would land there)."""
    db = any_engine.db
    old = make(db, vocab.REPLICA, vocab.AVAILABLE)  # a secondary now
    snap = models.ShareSnapshot(id=models.new_id(), share_id=old.share_id, size=5, name="s")
    snap_inst = models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=snap.id,
                                             share_instance_id=old.id, status=vocab.AVAILABLE)
    add(db, snap, snap_inst)
    for force in (False, True):
        with pytest.raises(plans.Refused, match=f"replica {old.id} holds snapshots"):
            delete_plans.delete(db, vocab.REPLICA, old.id, force=force)
    api.conditional_update(db, models.ShareSnapshotInstance, snap_inst.id, {},
                           {"status": vocab.DELETED, "deleted_at": models.utcnow()})
    assert delete_plans.delete(db, vocab.REPLICA, old.id).op is not None


def _create_request(db, inst, status: str, engine: str | None = None) -> models.Request:
    req = models.Request(resource_type=vocab.SHARE_INSTANCE, resource_id=inst.id,
                         action=vocab.ACTION_CREATE, host=HOSTBE, status=status, args={},
                         engine_id=engine,
                         claimed_at=models.utcnow() if engine else None)
    add(db, req)
    return req


def test_a_forced_delete_of_a_create_no_engine_took_deletes_at_once(any_engine):
    """No driver was called about a share whose create is still pending:
    its records go at once, the create's request failed with them (a delete
    request would wait for ever where no engine serves its host)."""
    from sharemgr.manager.intake import Intake

    db = any_engine.db
    inst = make_share(db, vocab.CREATING)
    req = _create_request(db, inst, vocab.REQUEST_PENDING)
    Intake(db, None).delete_share(inst.share_id, force=True)
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETED
    assert api.get(db, models.Share, inst.share_id) is None
    (create,) = [r for r in api.request_list(db) if r.resource_id == inst.id]
    assert (create.id, create.status) == (req.id, vocab.REQUEST_FAILED)
    assert "force-deleted before an engine took this request" in create.error
    assert any_engine.driver.calls == []
    # A plain delete is still refused from creating.
    other = make_share(db, vocab.CREATING)
    _create_request(db, other, vocab.REQUEST_PENDING)
    with pytest.raises(plans.Refused, match="its status is 'creating'"):
        delete_plans.delete(db, vocab.SHARE, other.share_id)


def test_a_forced_delete_of_a_create_an_engine_took_waits_for_it(any_engine):
    """Taken (running), or taken between the plan and its write: the delete
    is the operation it always was, or refused as changed meanwhile."""
    db = any_engine.db
    inst = make_share(db, vocab.CREATING)
    _create_request(db, inst, vocab.REQUEST_RUNNING, any_engine.engine_id)
    plan = delete_plans.delete(db, vocab.SHARE, inst.share_id, force=True)
    assert plan.op is not None and plan.op.args == {"force": True}
    late = make_share(db, vocab.CREATING)
    req = _create_request(db, late, vocab.REQUEST_PENDING)
    plan = delete_plans.delete(db, vocab.SHARE, late.share_id, force=True)
    assert plan.op is None
    assert api.conditional_update(db, models.Request, req.id, {"status": vocab.REQUEST_PENDING},
                                  {"status": vocab.REQUEST_RUNNING,
                                   "engine_id": any_engine.engine_id})
    assert not api.transition_with_request(db, plan.changes, None, conditions=plan.conditions)
    assert fetch(db, vocab.SHARE_INSTANCE, late.id).status == vocab.CREATING
    # A backup's create made its share backup_creating, which only its own
    # operation ends: queued, pending create or not.
    backup = make_backup(db, vocab.CREATING, share_status=vocab.BACKUP_CREATING)
    add(db, models.Request(resource_type=vocab.BACKUP, resource_id=backup.id,
                           action=vocab.ACTION_CREATE, host=HOSTBE,
                           status=vocab.REQUEST_PENDING, args={}))
    assert delete_plans.delete(db, vocab.BACKUP, backup.id, force=True).op is not None


# The operation -------------------------------------------------------------------------


def test_forced_delete_removes_the_record_when_the_driver_fails(engine, caplog):
    db = engine.db
    snap = make_snapshot(db, vocab.DELETING)
    engine.driver.delete_fails.add(snap.id)
    caplog.set_level(logging.WARNING, OPS_LOGGER)
    expect(engine.operations.perform(Op(vocab.SNAPSHOT_INSTANCE, snap.id, vocab.ACTION_DELETE,
                                        HOSTBE, {"force": True})), Result.DONE)
    row = fetch(db, vocab.SNAPSHOT_INSTANCE, snap.id)
    assert (row.status, row.deleted_at is not None) == (vocab.DELETED, True)
    assert api.get(db, models.ShareSnapshot, snap.snapshot_id) is None  # its snapshot too
    assert engine.driver.calls == [("delete_snapshot", snap.id)]  # tried once
    forced = [r for r in caplog.records if r.getMessage().startswith("forced delete")]
    assert len(forced) == 1 and forced[0].levelno == logging.WARNING
    assert "delete_snapshot failed" in forced[0].getMessage()
    assert f"snapshot instance {snap.id} may remain on backend {HOSTBE}" in \
        forced[0].getMessage()


def test_plain_delete_still_ends_in_error_deleting(engine):
    snap = make_snapshot(engine.db, vocab.DELETING)
    engine.driver.delete_fails.add(snap.id)
    expect(engine.operations.perform(Op(vocab.SNAPSHOT_INSTANCE, snap.id, vocab.ACTION_DELETE)),
           Result.FAILED)
    assert fetch(engine.db, vocab.SNAPSHOT_INSTANCE, snap.id).status == vocab.ERROR_DELETING


def test_forced_delete_finishes_what_a_failed_plain_delete_left(engine):
    """A plain delete queued first failed (error_deleting); the forced
    request behind it still deletes the record."""
    inst = make_share(engine.db, vocab.ERROR_DELETING)
    engine.driver.delete_fails.add(inst.id)
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        HOSTBE, {"force": True})), Result.DONE)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETED
    assert api.get(engine.db, models.Share, inst.share_id) is None


# Reconciliation after a crash ----------------------------------------------------------


@pytest.mark.parametrize("rtype", [vocab.SNAPSHOT_INSTANCE, vocab.SHARE_INSTANCE,
                                   vocab.REPLICA, vocab.BACKUP])
def test_reconciler_finishes_a_forced_delete_as_forced(engine, rtype):
    """A crash left a forced delete in deleting, its engine dead: the pass
    retries it forced (the request row holds the args), so a failing driver
    still ends in deleted; a plain one next to it ends in its error status."""
    db = engine.db
    forced = make(db, rtype, vocab.DELETING)
    plain = make(db, rtype, vocab.DELETING)
    engine.driver.delete_fails.add("*")
    dead = engine_id()
    _delete_request(db, rtype, forced.id, {"force": True}, dead)
    _delete_request(db, rtype, plain.id, {}, dead)
    result = engine.run()
    assert result["abandoned_requests"] == 2
    assert fetch(db, rtype, forced.id).status == vocab.DELETED
    assert fetch(db, rtype, plain.id).status != vocab.DELETED  # error_deleting or error
    assert fetch(db, rtype, plain.id).status in (vocab.ERROR_DELETING, vocab.ERROR)
    assert result["outcomes"][rtype][vocab.DELETED] == 1


# How driver failures are logged --------------------------------------------------------


def test_driver_failures_are_logged_with_the_method(engine, caplog):
    """A ShareBackendException: one WARNING naming the driver method, no
    traceback. Anything else is a driver bug: ERROR with the method and the
    traceback."""
    db = engine.db
    known = make_share(db, vocab.DELETING)
    buggy = make_share(db, vocab.DELETING)
    engine.driver.delete_fails.add(known.id)

    def delete_share(share, share_server=None):
        if share["id"] == buggy.id:
            raise KeyError("oops")
        engine.driver._delete("delete_share", share["id"])

    engine.driver.delete_share = delete_share
    caplog.set_level(logging.WARNING, OPS_LOGGER)
    for inst in (known, buggy):
        expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id,
                                            vocab.ACTION_DELETE)), Result.FAILED)
    records = {r.getMessage().split(" failed")[0]: r for r in caplog.records
               if r.name == OPS_LOGGER}
    warn = records[f"delete of share instance {known.id}"]
    assert warn.levelno == logging.WARNING and warn.exc_info is None
    assert "delete_share: ShareBackendException: backend refused" in warn.getMessage()
    err = records[f"delete of share instance {buggy.id}"]
    assert err.levelno == logging.ERROR
    assert "unexpected KeyError from driver method delete_share" in err.getMessage()
    assert err.exc_info is not None and err.exc_info[0] is KeyError


def test_forced_group_delete_takes_its_group_snapshots_records_along(engine):
    """As Manila's force-delete of a share group: its group snapshots' records
    go too (plain: refused while it has them)."""
    db = engine.db
    gsnap = make(db, vocab.GROUP_SNAPSHOT, vocab.ERROR)
    group_id = gsnap.share_group_id
    with pytest.raises(plans.Refused, match="has snapshots"):
        delete_plans.delete(db, vocab.SHARE_GROUP, group_id)
    plan = delete_plans.delete(db, vocab.SHARE_GROUP, group_id, force=True)
    assert api.transition_with_request(db, plan.changes, plan.op.request())
    engine.driver.delete_fails.add(group_id)
    expect(engine.operations.perform(plan.op), Result.DONE)
    assert fetch(db, vocab.SHARE_GROUP, group_id).status == vocab.DELETED
    assert fetch(db, vocab.GROUP_SNAPSHOT, gsnap.id).status == vocab.DELETED
    assert engine.driver.calls == [("delete_share_group", group_id)]


def test_a_backup_continue_bug_is_logged_with_its_traceback(engine, caplog):
    backup = make_backup(engine.db, vocab.CREATING, progress="0",
                         share_status=vocab.BACKUP_CREATING)

    def create_backup_continue(share, backup):
        raise KeyError("progress")

    engine.driver.create_backup_continue = create_backup_continue
    caplog.set_level(logging.WARNING, OPS_LOGGER)
    backup_ops.continue_backups(engine.operations, [HOSTBE])
    [record] = [r for r in caplog.records if r.name == OPS_LOGGER]
    assert record.levelno == logging.ERROR and record.exc_info[0] is KeyError
    assert record.getMessage().startswith(
        f"backup {backup.id} failed: unexpected KeyError from driver method "
        "create_backup_continue")
    assert fetch(engine.db, vocab.BACKUP, backup.id).status == vocab.ERROR


# A share's delete: one read to plan, none before the lock (issue 29) -------------------


def test_share_delete_plan_refuses_replicas_and_takes_the_primary(engine):
    from tests.unit.reconcile_harness import make_replica

    db = engine.db
    inst = make_share(db, vocab.AVAILABLE)
    plan = delete_plans.delete(db, vocab.SHARE, inst.share_id)
    # The primary deleting, then the share's anchor: the refusals below are
    # checked again after it, in the writing transaction (db/quiet.py).
    assert list(plan.changes) == [(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
                                   {"status": vocab.DELETING}), quiet.anchor(inst.share_id)]
    assert [getattr(c, "model", None) for c in plan.conditions] == [
        models.ShareInstance, models.ShareSnapshotInstance, models.ShareBackup, None]
    assert plan.conditions[-1] == quiet.Unheld(inst.share_id, plan.conditions[-1].refusal)
    rep = make_replica(db, vocab.AVAILABLE)
    with pytest.raises(plans.Refused, match="has replicas"):
        delete_plans.delete(db, vocab.SHARE, rep.share_id)
    with pytest.raises(plans.Refused, match="no share with id 'nope'"):
        delete_plans.delete(db, vocab.SHARE, "nope")


def test_share_delete_on_another_backend_under_the_lock_is_stale(engine):
    """The request names the backend and nothing is read before the lock:
    an instance found elsewhere under it is Stale, no call, nothing written."""

    inst = make_share(engine.db, vocab.DELETING)
    api.conditional_update(engine.db, models.ShareInstance, inst.id, {},
                           {"host": HOSTBE.replace("@", "2@")})
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        HOSTBE)), Result.STALE, "is on")
    assert engine.driver.calls == []
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETING


def test_share_delete_read_on_one_backend_and_moved_before_the_lock_is_stale(
        engine, monkeypatch):
    """A request that names no backend: the instance's, read before the
    lock, is the one the call is for; moved to another while the lock was
    awaited, it is Stale, not deleted by the first backend's driver."""
    inst = make_share(engine.db, vocab.DELETING)
    real = engine.operations.locked

    @contextlib.contextmanager
    def moved_meanwhile(*args: object, **kwargs: object) -> Iterator[None]:
        api.conditional_update(engine.db, models.ShareInstance, inst.id, {},
                               {"host": HOSTBE.replace("@", "2@")})
        with real(*args, **kwargs):
            yield

    monkeypatch.setattr(engine.operations, "locked", moved_meanwhile)
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE)),
           Result.STALE, "is on")
    assert engine.driver.calls == []
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETING


def test_share_delete_reads_the_instance_once_before_its_outcome(engine):
    """Under the lock, the instance and its share in one statement; before
    it, none; after it, none (the outcome decides whether the share goes)."""
    from sqlalchemy import event

    inst = make_share(engine.db, vocab.DELETING)
    selects: list[str] = []

    def count(conn, cursor, statement, *_args):
        if statement.lstrip().upper().startswith("SELECT") and "share_instances" in statement:
            selects.append(statement)

    event.listen(engine.db.engine, "before_cursor_execute", count)
    try:
        expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                            HOSTBE)), Result.DONE)
    finally:
        event.remove(engine.db.engine, "before_cursor_execute", count)
    assert engine.driver.calls == [("delete_share", inst.id)]
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETED
    assert api.get(engine.db, models.Share, inst.share_id) is None
    # The re-read under the lock (with the share) only: the pre-lock read and
    # the share's own read are gone, and whether other instances are left is
    # decided in the outcome's UPDATE (``share_gone_with_last_instance``).
    assert len(selects) == 1, selects
    assert "shares" in selects[0].split("FROM", 1)[1]


def _grouped_share(db):
    from tests.unit.reconcile_harness import make_group

    group = make_group(db, vocab.AVAILABLE)
    inst = make_share(db, vocab.AVAILABLE)
    api.conditional_update(db, models.Share, inst.share_id, {}, {"share_group_id": group.id})
    return group, inst


def _write(db, plan):
    return api.transition_with_request(db, plan.changes, plan.op.request(), plan.add,
                                       conditions=plan.conditions)


def test_a_share_a_group_snapshot_holds_is_not_deleted_forced_or_not(any_engine):
    """As Manila (a share's group snapshot members): the group snapshot
    would be left holding a share the backend no longer has."""
    db = any_engine.db
    group, inst = _grouped_share(db)
    gplan = plans.create_group_snapshot(db, group.id)
    assert _write(db, gplan)
    members = [(m.share_id, m.share_instance_id)
               for m in resources.group_snapshot_members(db, gplan.row.id)]
    assert members == [(inst.share_id, inst.id)]
    for force in (False, True):
        with pytest.raises(plans.Refused, match="is in 1 group snapshot"):
            delete_plans.delete(db, vocab.SHARE, inst.share_id, force=force)
    api.conditional_update(db, models.ShareGroupSnapshot, gplan.row.id, {},
                           {"status": vocab.DELETED, "deleted_at": models.utcnow()})
    assert delete_plans.delete(db, vocab.SHARE, inst.share_id).op is not None


def test_a_group_snapshot_written_after_a_share_deletes_read_refuses_it(any_engine):
    """Each plan read before the other wrote: whichever writes second loses
    (the share's anchor orders them; db/quiet.py)."""
    db = any_engine.db
    group, inst = _grouped_share(db)
    plan = delete_plans.delete(db, vocab.SHARE, inst.share_id)
    gplan = plans.create_group_snapshot(db, group.id)
    assert _write(db, gplan)  # between the delete's read and its write
    with pytest.raises(quiet.Busy, match="is in group snapshots \\(creating\\)"):
        _write(db, plan)
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE

    # The other way round: the delete written first, the group snapshot's
    # write finds the share no longer available and writes nothing.
    other_group, other = _grouped_share(db)
    gplan = plans.create_group_snapshot(db, other_group.id)
    assert _write(db, delete_plans.delete(db, vocab.SHARE, other.share_id))
    assert not _write(db, gplan)
    assert api.get(db, models.ShareGroupSnapshot, gplan.row.id) is None


def test_a_group_snapshot_needs_every_share_of_its_group_available(any_engine):
    db = any_engine.db
    group, inst = _grouped_share(db)
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.EXTENDING})
    with pytest.raises(plans.Refused, match=f"share {inst.share_id} of share group"):
        plans.create_group_snapshot(db, group.id)
