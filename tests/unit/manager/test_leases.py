"""Operation leases (manager/leases.py, db/reconcile.py): the per-method
deadline, the one query of a periodic tick, and the takeover that only one
engine wins; on every database."""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.manager.leases import NONE, Leases

HOST = "hostA@dummy"
ENGINE = "hostA.00000000-0000-0000-0000-000000000001"


def test_lease_seconds_per_method():
    leases = Leases(3600, {"create_share": 2, "delete_share": 0})
    assert leases.seconds("create_share") == 2
    assert leases.seconds("extend_share") == 3600
    assert leases.seconds(None) == 3600
    assert leases.seconds("delete_share") is None  # 0: no lease
    assert NONE.seconds("create_share") is None


def _running(db, resource_id: str, host: str = HOST) -> int:
    row = models.Request(resource_type=vocab.SHARE_INSTANCE, resource_id=resource_id,
                         action="create", host=host, status=vocab.REQUEST_RUNNING,
                         engine_id=ENGINE, args={})
    with db.session() as session:
        session.add(row)
    return row.id


def _expire(db, request_id: int) -> None:
    with db.session() as session:
        session.execute(sa.update(models.Request).where(models.Request.id == request_id)
                        .values(lease_expires_at=models.utcnow()
                                - datetime.timedelta(seconds=1)))


def test_expired_leases_and_one_takeover(db):
    fresh, stale, other_host, no_lease = (_running(db, "r1"), _running(db, "r2"),
                                          _running(db, "r3", "hostB@dummy"),
                                          _running(db, "r4"))
    assert db_rec.lease_start(db, "r1", ENGINE, 3600)
    assert db_rec.lease_start(db, "r2", ENGINE, 3600)
    assert db_rec.lease_start(db, "r3", ENGINE, 3600)
    assert not db_rec.lease_start(db, "r9", ENGINE, 3600)  # no request of this engine
    assert db_rec.expired_leases(db, [HOST]) == []
    _expire(db, stale)
    _expire(db, other_host)
    assert [r.id for r in db_rec.expired_leases(db, [HOST])] == [stale]
    # Only an expired lease may be taken over, and only once.
    assert not db_rec.abandon_request(db, fresh, ENGINE, "x", expired=True)
    assert not db_rec.abandon_request(db, no_lease, ENGINE, "x", expired=True)
    assert db_rec.abandon_request(db, stale, ENGINE, "lease expired", expired=True)
    assert not db_rec.abandon_request(db, stale, ENGINE, "lease expired", expired=True)
    assert db_rec.expired_leases(db, [HOST]) == []


def _lease_of(db, request_id: int) -> datetime.datetime:
    with db.session() as session:
        return session.get(models.Request, request_id).lease_expires_at


def test_running_calls_are_renewed_to_their_deadline_a_lost_one_is_not(db, monkeypatch):
    from sharemgr.manager.leases import Keeper

    # The leases' clock is the test's: a loaded machine's slow steps must not
    # carry r3 past its deadline before the renewal the test looks at.
    clock = [models.utcnow()]
    monkeypatch.setattr(models, "utcnow", lambda: clock[0])
    keeper = Keeper(db, ENGINE)
    live, lost, near = _running(db, "r1"), _running(db, "r2"), _running(db, "r3")
    started = clock[0]
    with keeper.lease("r1", 3600, 2), keeper.lease("r3", 3, 2):
        with keeper.lease("r2", 3600, 2):
            first = _lease_of(db, live)
            # A heartbeat ahead, not the hour of the deadline.
            assert first == started + datetime.timedelta(seconds=2)
        # r2's call is over but its request is still running: a lost thread.
        assert keeper.running("r1") and not keeper.running("r2")
        clock[0] += datetime.timedelta(seconds=2.2)
        keeper.renew()
        assert [r.id for r in db_rec.expired_leases(db, [HOST])] == [lost]
        assert _lease_of(db, live) == clock[0] + datetime.timedelta(seconds=2)
        # r3's deadline (3 s) is nearer than a heartbeat: its lease is its
        # deadline now, and it is not renewed again.
        assert _lease_of(db, near) == started + datetime.timedelta(seconds=3)
        assert not keeper.running("r3")
        clock[0] += datetime.timedelta(seconds=1)
        assert [r.id for r in db_rec.expired_leases(db, [HOST])] == [lost, near]
    assert not keeper.running("r1")
    # No deadline (0 seconds configured): no lease at all.
    fresh = _running(db, "r4")
    with keeper.lease("r4", None, 2):
        assert _lease_of(db, fresh) is None
