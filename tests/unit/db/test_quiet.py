"""One operation at a time per share (db/quiet.py): a plan's conditions are
checked after its changes, in its transaction, so a plan made before
another plan of the same share was written still sees it (SQLite,
PostgreSQL, MariaDB)."""

from __future__ import annotations

import threading

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models, quiet


def _share(db) -> tuple[str, str, str]:
    share = models.Share(id=models.new_id(), size=1, share_proto="NFS")
    active = models.ShareInstance(id=models.new_id(), share_id=share.id, host="h@dummy",
                                  status=vocab.AVAILABLE, replica_state=vocab.REPLICA_ACTIVE,
                                  export_locations=[])
    rep = models.ShareInstance(id=models.new_id(), share_id=share.id, host="h@dummy",
                               status=vocab.AVAILABLE, replica_state=vocab.REPLICA_IN_SYNC,
                               export_locations=[])
    with db.session() as session:
        api.insert_rows_tx(session, [share, active, rep])
    return share.id, active.id, rep.id


def _resize(share_id: str, active_id: str) -> tuple[list, list]:
    changes = [(models.ShareInstance, active_id, {"status": vocab.AVAILABLE},
                {"status": vocab.EXTENDING}), quiet.anchor(share_id)]
    conditions = [quiet.Quiet(models.ShareInstance, {"share_id": share_id},
                              vocab.TRANSIENT_STATUSES, "busy: a replica is {statuses}",
                              but=(active_id,))]
    return changes, conditions


def test_a_condition_fails_the_whole_write(db):
    share_id, active_id, rep_id = _share(db)
    api.conditional_update(db, models.ShareInstance, rep_id, {}, {"status": vocab.DELETING})
    changes, conditions = _resize(share_id, active_id)
    with pytest.raises(quiet.Busy, match="busy: a replica is deleting"):
        api.transition_with_request(db, changes, None, conditions=conditions)
    assert api.get(db, models.ShareInstance, active_id).status == vocab.AVAILABLE
    # The row named in ``but`` does not count; without the replica busy it goes.
    api.conditional_update(db, models.ShareInstance, rep_id, {}, {"status": vocab.AVAILABLE})
    assert api.transition_with_request(db, changes, None, conditions=conditions)
    assert api.get(db, models.ShareInstance, active_id).status == vocab.EXTENDING


def test_a_write_waiting_on_the_anchor_sees_what_the_other_committed(db):
    """Two plans of one share, both planned while it was quiet: the replica's
    delete holds the share's row; the resize, started meanwhile, waits for
    it and then refuses (a check before the changes would have let both
    through: they touch different instance rows)."""
    share_id, active_id, rep_id = _share(db)
    changes, conditions = _resize(share_id, active_id)
    outcome: list[object] = []
    started = threading.Event()

    def resize() -> None:
        started.set()
        try:
            outcome.append(api.transition_with_request(db, changes, None,
                                                       conditions=conditions))
        except Exception as exc:  # the test reads it
            outcome.append(exc)

    with db.session() as session:
        assert api.conditional_update_tx(session, models.ShareInstance, rep_id,
                                         {"status": vocab.AVAILABLE},
                                         {"status": vocab.DELETING})
        assert api.conditional_update_tx(session, *quiet.anchor(share_id))
        thread = threading.Thread(target=resize)
        thread.start()
        started.wait(5)
        thread.join(0.5)  # it waits for this transaction's locks
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], quiet.Busy), outcome
    assert api.get(db, models.ShareInstance, active_id).status == vocab.AVAILABLE


def test_check_reads_without_writing(db):
    share_id, active_id, rep_id = _share(db)
    _, conditions = _resize(share_id, active_id)
    quiet.check(db, conditions)  # quiet: no error
    api.conditional_update(db, models.ShareInstance, rep_id, {}, {"status": vocab.CREATING})
    with pytest.raises(quiet.Busy, match="creating"):
        quiet.check(db, conditions)
