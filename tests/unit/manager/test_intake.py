"""What the intake's writes hand back: the row of the resource each wrote,
as ``sharectl`` shows it, for every kind of write a share goes through
(a type check on that row once ran after the write and failed every share
delete whose work was already queued)."""

from __future__ import annotations

import pytest
from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.manager import config
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
