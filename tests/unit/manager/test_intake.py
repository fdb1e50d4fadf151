"""What the intake's writes hand back: the row of the resource each wrote,
as ``sharectl`` shows it, for every kind of write a share goes through
(a type check on that row once ran after the write and failed every share
delete whose work was already queued)."""

from __future__ import annotations

import pytest
from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.manager import config, plans
from sharemgr.manager.intake import Intake


@pytest.fixture
def intake(db, tmp_path):
    path = tmp_path / "sharemgr.conf"
    path.write_text("[DEFAULT]\nhost = hostA\nenabled_share_backends = dummy\n")
    return Intake(db, config.load([], config_file=str(path), conf=cfg.ConfigOpts()))


def _available(db, model, **where):
    (row,) = api.query(db, model, where)
    api.conditional_update(db, model, row.id, {}, {"status": vocab.AVAILABLE})
    return row


def _requests(db):
    return sorted((r.resource_type, r.action) for r in api.request_list(db))


def test_each_write_returns_its_resource_and_queues_its_request(intake, db):
    share = intake.create_share(1, "NFS", name="s1")
    assert (share.id, share.name) == (share.id, "s1")
    inst = _available(db, models.ShareInstance, share_id=share.id)

    rule = intake.allow_access(share.id, "ip", "10.0.0.1")
    assert rule.share_id == share.id and rule.access_to == "10.0.0.1"
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {
        "status": vocab.AVAILABLE, "access_rules_status": vocab.ACCESS_ACTIVE})
    api.conditional_update(db, models.ShareAccessRule, rule.id, {},
                           {"state": vocab.ACCESS_ACTIVE})

    resized = intake.resize_share(share.id, 2, extend=True)
    assert resized.id == share.id
    _available(db, models.ShareInstance, share_id=share.id)

    snap = intake.create_snapshot(share.id, "n1")
    assert snap.share_id == share.id
    _available(db, models.ShareSnapshotInstance, snapshot_id=snap.id)
    deleted_snap = intake.delete_snapshot(snap.id)
    assert deleted_snap.id == snap.id

    other = intake.create_share(1, "NFS")
    other_inst = _available(db, models.ShareInstance, share_id=other.id)
    gone = intake.delete_share(other.id)
    assert gone.id == other.id
    assert api.get(db, models.ShareInstance, other_inst.id).status == vocab.DELETING
    assert ("share_instance", "delete") in _requests(db)


@pytest.mark.parametrize("made", ["replica", "snapshot"])
def test_a_share_delete_planned_before_a_replica_or_snapshot_was_made_is_refused(
        intake, db, made):
    """A share delete and a replica create (or a snapshot) accepted at once:
    the delete's plan read no replica, the replica's plan an available
    share; both were written, the replica's first, and the share was left
    live with no live instance (a fault run, seed 5252). The delete's
    checks run again after the share's anchor, in its transaction: refused,
    nothing written."""
    from sharemgr.db.records import Record
    from sharemgr.manager import delete_plans
    from sharemgr.manager.intake import InvalidRequest

    share = intake.create_share(1, "NFS")
    inst = _available(db, models.ShareInstance, share_id=share.id)
    plan = delete_plans.delete(db, vocab.SHARE, share.id)
    if made == "replica":
        intake.create_replica(share.id)
    else:
        intake.create_snapshot(share.id)
    with pytest.raises(InvalidRequest, match=f"has {made}s"):
        intake._write(plan, f"share {share.id}", Record)
    assert api.get(db, models.ShareInstance, inst.id).status == vocab.AVAILABLE
    assert ("share_instance", "delete") not in _requests(db)


@pytest.mark.parametrize("extend, new_size, concurrent", [(False, 2, 2), (True, 5, 8)])
def test_a_resize_that_ended_meanwhile_is_refused_with_a_message(
        intake, db, monkeypatch, extend, new_size, concurrent):
    """A fault run's ``share shrink`` exited 1 with an empty line: its size
    was read twice, another shrink to the same size ended in between, and
    the second read planned no operation (an ``assert`` with no message).
    Read once now, and written only if the share is still that size: an
    extend that ends meanwhile cannot turn this one into a shrink."""
    share = intake.create_share(3, "NFS")
    _available(db, models.ShareInstance, share_id=share.id)
    read = plans.share

    def then_another_resize_ends(db_, share_id):
        found = read(db_, share_id)
        api.conditional_update(db, models.Share, share_id, {}, {"size": concurrent})
        return found

    monkeypatch.setattr(plans, "share", then_another_resize_ends)
    before = _requests(db)
    with pytest.raises(plans.Refused, match="changed meanwhile"):
        intake.resize_share(share.id, new_size, extend=extend)
    assert _requests(db) == before
    (inst,) = api.query(db, models.ShareInstance, {"share_id": share.id})
    assert inst.status == vocab.AVAILABLE


@pytest.mark.parametrize("extend, new_size, message", [
    (False, 3, "cannot shrink share .* to 3: it is only 3"),
    (True, 2, "cannot extend share .* to 2: it is already 3")])
def test_a_resize_the_wrong_way_is_refused(intake, db, extend, new_size, message):
    share = intake.create_share(3, "NFS")
    _available(db, models.ShareInstance, share_id=share.id)
    with pytest.raises(plans.Refused, match=message):
        intake.resize_share(share.id, new_size, extend=extend)


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "bell\x07"])
def test_a_name_with_a_control_character_is_refused(intake, db, name):
    """A newline in a share's name made two lines of one share in ``-f
    value`` output (a script reading ids by line read a name instead)."""
    from sharemgr.manager.intake import InvalidRequest

    with pytest.raises(InvalidRequest, match="holds a control character"):
        intake.create_share(1, "NFS", name=name)
    assert api.request_list(db) == []
    assert intake.create_share(1, "NFS", name="naïve name").name == "naïve name"


def test_a_backup_is_restored_into_its_share_alone_as_big_on_its_backend(intake, db):
    """Refused before anything is written: into a share smaller than the
    backup, or one migrated to another backend since (the restore would run
    on the backup's and fail there, leaving the share in error); a resize
    that began and ended between the plan and its write refuses it too."""
    share = intake.create_share(2, "NFS")
    inst = _available(db, models.ShareInstance, share_id=share.id)
    backup = intake.create_backup(share.id, "b")
    api.conditional_update(db, models.ShareBackup, backup.id, {}, {"status": vocab.AVAILABLE})
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    api.conditional_update(db, models.Share, share.id, {}, {"size": 1})  # shrunk since
    with pytest.raises(plans.Refused, match=r"\(2 GiB\) into share \S+ of 1 GiB: extend"):
        intake.restore_backup(backup.id)
    api.conditional_update(db, models.Share, share.id, {}, {"size": 2})
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"host": "hostB@dummy#p"})
    with pytest.raises(plans.Refused, match=r"made on hostA@dummy and share \S+ is on "
                                            "hostB@dummy now"):
        intake.restore_backup(backup.id)
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"host": inst.host})
    plan = plans.restore_backup(db, backup.id)
    api.conditional_update(db, models.Share, share.id, {}, {"size": 3})  # resized meanwhile
    assert not api.transition_with_request(db, plan.changes, plan.op.request())
    api.conditional_update(db, models.Share, share.id, {}, {"size": 2})
    assert intake.restore_backup(backup.id).id == backup.id
    assert (vocab.BACKUP, vocab.ACTION_RESTORE) in _requests(db)


def test_a_share_of_a_group_goes_where_the_group_is(db, tmp_path):
    """Without --backend or --host a group's share is placed on the group's
    backend (it was placed on the first enabled one and refused)."""
    path = tmp_path / "two.conf"
    path.write_text("[DEFAULT]\nhost = hostA\nenabled_share_backends = dummy,other\n"
                    "[other]\nshare_driver = dummy\n")
    intake = Intake(db, config.load([], config_file=str(path), conf=cfg.ConfigOpts()))
    group = intake.create_share_group("g", backend="other")
    _available(db, models.ShareGroup, id=group.id)
    share = intake.create_share(1, "NFS", share_group_id=group.id)
    (inst,) = api.query(db, models.ShareInstance, {"share_id": share.id})
    assert inst.host.startswith("hostA@other")
    with pytest.raises(plans.Refused, match=f"share group {group.id} is on hostA@other"):
        intake.create_share(1, "NFS", share_group_id=group.id, backend="dummy")
