"""A share goes with its last instance, decided in the transaction that
deletes the instance (``resources.share_gone_with_last_instance``):
SQLite, PostgreSQL, MariaDB."""

from __future__ import annotations

import threading

from sharemgr.common import vocab
from sharemgr.db import api, models, resources


def _share(db, instances: int = 2) -> tuple[str, list[str]]:
    share = models.Share(id=models.new_id(), size=1, share_proto="NFS")
    rows = [models.ShareInstance(id=models.new_id(), share_id=share.id, host="h@dummy",
                                 status=vocab.DELETING, export_locations=[])
            for _ in range(instances)]
    with db.session() as session:
        api.insert_rows_tx(session, [share, *rows])
    return share.id, [r.id for r in rows]


def _gone(share_id: str, inst_id: str) -> list:
    return [(models.ShareInstance, inst_id, {"status": vocab.DELETING},
             {"status": vocab.DELETED, "deleted_at": models.utcnow()}),
            *resources.share_gone_with_last_instance(share_id)]


def test_the_share_stays_while_an_instance_is_left(db):
    share_id, (first, second) = _share(db)
    assert api.transition_with_request(db, _gone(share_id, first), None)
    assert api.get(db, models.Share, share_id) is not None
    assert api.transition_with_request(db, _gone(share_id, second), None)
    assert api.get(db, models.Share, share_id) is None
    # Once deleted, its deletion time stays what it was.
    gone = api.get(db, models.Share, share_id, include_deleted=True).deleted_at
    assert api.transition_with_request(db, resources.share_gone_with_last_instance(share_id),
                                       None)
    assert api.get(db, models.Share, share_id, include_deleted=True).deleted_at == gone


def test_two_deletes_of_the_last_two_instances_leave_no_share(db):
    """Each delete, read before its write, would see the other's instance
    live and keep the share; decided after the share's row is written, the
    second waits for the first and sees its delete."""
    share_id, (first, second) = _share(db)
    outcome: list[object] = []
    started = threading.Event()

    def other() -> None:
        started.set()
        try:
            outcome.append(api.transition_with_request(db, _gone(share_id, second), None))
        except Exception as exc:  # the test reads it
            outcome.append(exc)

    with db.session() as session:
        for change in _gone(share_id, first):
            assert api.conditional_update_tx(session, *change)
        thread = threading.Thread(target=other)
        thread.start()
        started.wait(5)
        thread.join(0.5)  # it waits for this transaction's locks
    thread.join(30)
    assert not thread.is_alive()
    assert outcome == [True]
    assert api.get(db, models.Share, share_id) is None
