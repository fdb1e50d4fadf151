"""sharectl's status of a share or snapshot while a delete commits.

A delete removes the last instance and the share (or the snapshot) in one
transaction. sharectl read the share and its instance in two transactions:
when the delete committed in between it saw a live share without an instance
and showed it as ``error`` — 'share delete --wait' then failed with "ended in
status error" although the delete had succeeded (seen under heavy load in
tests/functional/test_operations.py). Here the delete commits at the start of
every transaction of the read but the first; the read must answer the status
before the delete or ``deleted``, never ``error``."""

from __future__ import annotations

import contextlib

import pytest
from sharemgr.cli.nouns import NOUNS
from sharemgr.common import vocab
from sharemgr.db import api, models
from sqlalchemy import event


def _gone() -> dict:
    return {"status": vocab.DELETED, "deleted_at": models.utcnow()}


@contextlib.contextmanager
def _commit_between_transactions(db, changes):
    """Apply ``changes`` (as the delete does: one transaction) when the read
    takes a connection for its second transaction (before it begins: on SQLite
    the reader's BEGIN IMMEDIATE would make the delete wait), or after a read
    that took one."""
    begun = []

    def checkout(*_args):
        begun.append(1)
        if len(begun) == 2:
            assert api.transition_with_request(db, changes, None)

    event.listen(db.engine, "checkout", checkout)
    try:
        yield
    finally:
        event.remove(db.engine, "checkout", checkout)
    if len(begun) < 2:
        assert api.transition_with_request(db, changes, None)


def _share(db):
    share = models.Share(size=1, share_proto="NFS", name="s")
    with db.session() as session:
        session.add(share)
        session.flush()
        inst = models.ShareInstance(share_id=share.id, host="h@dummy",
                                    status=vocab.DELETING)
        session.add(inst)
    return share, inst


def _snapshot(db):
    share, inst = _share(db)
    snap = models.ShareSnapshot(share_id=share.id, size=1, name="s1")
    with db.session() as session:
        session.add(snap)
        session.flush()
        snap_inst = models.ShareSnapshotInstance(snapshot_id=snap.id, share_instance_id=inst.id,
                                                 status=vocab.DELETING)
        session.add(snap_inst)
    return snap, snap_inst


@pytest.mark.parametrize("noun", ["share", "snapshot"])
def test_status_while_the_delete_commits(db, noun):
    if noun == "share":
        parent, inst = _share(db)
        changes = [(models.ShareInstance, inst.id, {"status": vocab.DELETING}, _gone()),
                   (models.Share, parent.id, {"deleted_at": None},
                    {"deleted_at": models.utcnow()})]
    else:
        parent, inst = _snapshot(db)
        changes = [(models.ShareSnapshotInstance, inst.id, {"status": vocab.DELETING}, _gone()),
                   (models.ShareSnapshot, parent.id, {"deleted_at": None},
                    {"deleted_at": models.utcnow()})]
    with _commit_between_transactions(db, changes):
        status = NOUNS[noun].status(db, parent.id)
    assert status in (vocab.DELETING, vocab.DELETED)
    # Either way the delete is there for the next read.
    assert NOUNS[noun].status(db, parent.id) == vocab.DELETED


def test_listing_pairs_each_share_with_its_primary_instance(db):
    """The one-statement listing keeps what the two reads gave: the oldest
    live non-secondary instance, no row for a deleted share."""
    from sharemgr.db import status_reads

    share, inst = _share(db)
    gone, gone_inst = _share(db)
    with db.session() as session:
        session.add(models.ShareInstance(share_id=share.id, host="h@dummy",
                                         status=vocab.AVAILABLE, replica_state="in_sync"))
    assert api.transition_with_request(db, [
        (models.ShareInstance, gone_inst.id, {"status": vocab.DELETING}, _gone()),
        (models.Share, gone.id, {"deleted_at": None}, {"deleted_at": models.utcnow()})], None)
    listed = [(s.id, i.id if i else None) for s, i in status_reads.shares_with_status(db)]
    assert listed == [(share.id, inst.id)]
    assert status_reads.share_with_status(db, gone.id) is None


def test_a_share_read_without_the_orm(db):
    """What ``sharectl share list`` reads comes from plain tables: the
    records carry every column of the share and of its instance, JSON and
    times decoded, and a share without a live instance pairs with None."""
    from sharemgr.db import status_reads

    share, inst = _share(db)
    assert api.transition_with_request(db, [
        (models.ShareInstance, inst.id, {"status": inst.status},
         {"export_locations": [{"path": "/x", "preferred": True}]})], None)
    got_share, got_inst = status_reads.share_with_status(db, share.id)
    assert (got_share.id, got_share.size, got_share.share_proto) == (share.id, 1, "NFS")
    assert got_inst.export_locations == [{"path": "/x", "preferred": True}]
    assert got_share.created_at == api.get(db, models.Share, share.id).created_at
    assert api.transition_with_request(db, [
        (models.ShareInstance, inst.id, {"status": inst.status}, _gone())], None)
    assert status_reads.share_with_status(db, share.id)[1] is None
    assert [s.id for s, i in status_reads.shares_with_status(db)] == [share.id]


def test_shares_by_id_in_bulk_answer_as_the_one_by_one_read(db):
    """The preview's bulk read (a statement per chunk) pairs each share with
    the instance ``share_with_status`` gives, and leaves out a deleted one."""
    from sharemgr.db import status_reads
    from sharemgr.manager import kinds

    shares = [_share(db) for _ in range(3)]
    gone, gone_inst = shares[2]
    assert api.transition_with_request(db, [
        (models.ShareInstance, gone_inst.id, {"status": vocab.DELETING}, _gone()),
        (models.Share, gone.id, {"deleted_at": None}, {"deleted_at": models.utcnow()})], None)
    got = status_reads.shares_with_status_by_id(db, [s.id for s, _ in shares] + ["nope"])
    assert set(got) == {shares[0][0].id, shares[1][0].id}
    for share, inst in shares[:2]:
        one = status_reads.share_with_status(db, share.id)
        assert (got[share.id][0].id, got[share.id][1].id) == (one[0].id, one[1].id) \
            == (share.id, inst.id)
        # It holds the columns an observation reads: the same observation.
        seen = kinds.observe_rows(vocab.SHARE, {models.Share: got[share.id][0],
                                                models.ShareInstance: got[share.id][1]})
        assert seen == kinds.observe(db, vocab.SHARE, share.id)
