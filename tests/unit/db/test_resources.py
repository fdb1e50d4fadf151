"""db/resources.py: the one-statement reads a share delete's plan and a
stack's batch of creates make."""

from __future__ import annotations

import datetime

from sharemgr.common import vocab
from sharemgr.db import models, resources


def _at(seconds: int) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=seconds)


def _share(db, instances=(), snapshots=()):
    """A share with instances (replica_state, deleted?) and snapshots (deleted?)."""
    share = models.Share(size=1, share_proto="NFS", name="s")
    with db.session() as session:
        session.add(share)
        session.flush()
        ids = []
        for n, (state, gone) in enumerate(instances):
            inst = models.ShareInstance(share_id=share.id, host="h@dummy", status=vocab.AVAILABLE,
                                        replica_state=state, created_at=_at(10 - n),
                                        deleted_at=models.utcnow() if gone else None)
            session.add(inst)
            session.flush()
            ids.append(inst.id)
        for gone in snapshots:
            session.add(models.ShareSnapshot(share_id=share.id, size=1, name="x",
                                             deleted_at=models.utcnow() if gone else None))
    return share.id, ids


def test_live_instances_oldest_first_and_live_snapshots_counted(db):
    sid, ids = _share(db, [(None, False), ("in_sync", False), (None, True)],
                      [False, False, True])
    other, _ = _share(db, [(None, False)], [False])
    with db.session() as session:
        for gone in (False, True, False):
            session.add(models.ShareBackup(share_id=sid, host="h@b", status="available", size=1,
                                           deleted_at=models.utcnow() if gone else None))
    share, live, snapshots, backups, _held = resources.share_to_delete(db, sid)
    assert share.id == sid and backups == 2
    # Created 10 s, 9 s, 8 s after the epoch, in that order: the deleted one is left out.
    assert [i.id for i in live] == [ids[1], ids[0]]
    assert snapshots == 2
    assert resources.share_to_delete(db, other)[2] == 1


def test_a_share_without_instances_or_snapshots(db):
    sid, _ = _share(db)
    assert resources.share_to_delete(db, sid) == (
        resources.share_to_delete(db, sid).share, [], 0, 0, 0)


def test_a_deleted_or_unknown_share_is_none(db):
    sid, _ = _share(db, [(None, False)])
    with db.session() as session:
        session.get(models.Share, sid).deleted_at = models.utcnow()
    assert resources.share_to_delete(db, sid) == resources.NOT_LIVE
    assert resources.share_to_delete(db, "nope") == resources.NOT_LIVE


def test_instances_read_with_their_shares_in_one_statement(db):
    """A batch's re-read (``instances_with_shares``): each live instance
    asked for, with its share; a deleted one and an unknown id are absent."""
    a, (a1, a2, gone) = _share(db, [(None, False), ("in_sync", False), (None, True)])
    b, (b1,) = _share(db, [(None, False)])
    found = resources.instances_with_shares(db, [a1, b1, gone, "no-such-id", a2])
    assert {i: (inst.id, share.id) for i, (inst, share) in found.items()} == {
        a1: (a1, a), a2: (a2, a), b1: (b1, b)}
    assert resources.instances_with_shares(db, []) == {}


def test_the_live_group_snapshots_holding_a_share_are_counted(db):
    """A share's delete is refused while one holds it (manager/delete_plans.py)."""
    sid, ids = _share(db, [(None, False)])
    other, other_ids = _share(db, [(None, False)])
    with db.session() as session:
        group = models.ShareGroup(host="h@dummy", status=vocab.AVAILABLE)
        session.add(group)
        session.flush()
        for gone, shares in ((False, [(sid, ids[0])]), (True, [(sid, ids[0])]),
                             (False, [(sid, ids[0]), (other, other_ids[0])])):
            gsnap = models.ShareGroupSnapshot(share_group_id=group.id, status=vocab.AVAILABLE,
                                              deleted_at=models.utcnow() if gone else None)
            session.add(gsnap)
            session.flush()
            for share_id, inst_id in shares:
                session.add(models.ShareGroupSnapshotMember(
                    id=models.new_id(), share_group_snapshot_id=gsnap.id, share_id=share_id,
                    share_instance_id=inst_id, size=1, share_proto="NFS"))
    # Two live of the three (the deleted one left out), one of them the other's too.
    assert resources.share_to_delete(db, sid).group_snapshots == 2
    assert resources.share_to_delete(db, other).group_snapshots == 1
