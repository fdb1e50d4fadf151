"""Operation leases (manager/leases.py, db/leases.py): the per-method
deadline, the one query of a periodic tick, and the takeover that only one
engine wins; on every database."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import clock, models, tables
from sharemgr.db import leases as db_leases
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
    assert db_leases.lease_set(db, ["r1"], ENGINE, 3600, 3600) == 1
    assert db_leases.lease_set(db, ["r2"], ENGINE, 3600, 3600) == 1
    assert db_leases.lease_set(db, ["r3"], ENGINE, 3600, 3600) == 1
    assert db_leases.lease_set(db, ["r9"], ENGINE, 3600, 3600) == 0  # no request of this engine
    assert db_leases.expired_leases(db, [HOST]) == []
    _expire(db, stale)
    _expire(db, other_host)
    assert [r.id for r in db_leases.expired_leases(db, [HOST])] == [stale]
    # Only an expired lease may be taken over, and only once.
    assert not db_rec.abandon_request(db, fresh, ENGINE, "x", expired=True)
    assert not db_rec.abandon_request(db, no_lease, ENGINE, "x", expired=True)
    assert db_rec.abandon_request(db, stale, ENGINE, "lease expired", expired=True)
    assert not db_rec.abandon_request(db, stale, ENGINE, "lease expired", expired=True)
    assert db_leases.expired_leases(db, [HOST]) == []


def _lease_of(db, request_id: int) -> tuple[datetime.datetime, datetime.datetime | None]:
    """The request's lease and its call's deadline."""
    with db.session() as session:
        row = session.get(models.Request, request_id)
        return row.lease_expires_at, row.lease_deadline


def _between(value, low, high) -> None:
    assert low <= value <= high, (low, value, high)


def test_an_engine_whose_clock_runs_ahead_takes_over_no_live_lease(db, monkeypatch):
    """Leases are judged by the database's clock: an engine whose own clock
    runs two minutes ahead sees a lease with a minute left as it is, and
    cannot abandon its request (it took calls over early when each engine
    judged by its own clock)."""
    live = _running(db, "r1")
    assert db_leases.lease_set(db, ["r1"], ENGINE, 60, 60) == 1
    ahead = models.utcnow() + datetime.timedelta(minutes=2)
    monkeypatch.setattr(models, "utcnow", lambda: ahead)
    monkeypatch.setattr(tables, "utcnow", lambda: ahead)
    assert db_leases.expired_leases(db, [HOST]) == []
    assert not db_rec.abandon_request(db, live, ENGINE, "lease expired", expired=True)
    requests, now = db_rec.open_requests(db, [HOST])
    # What the reconciler judges leases by: the database's time, not the engine's.
    assert [r.id for r in requests] == [live] and now < requests[0].lease_expires_at


def test_leases_are_set_and_renewed_by_the_databases_clock_never_past_the_deadline(db):
    live, near = _running(db, "r1"), _running(db, "r3")
    before = clock.read(db)
    assert db_leases.lease_set(db, ["r1"], ENGINE, 60, 3600) == 1
    assert db_leases.lease_set(db, ["r3"], ENGINE, 60, 90) == 1
    after = clock.read(db)
    second = datetime.timedelta(seconds=1)
    lease, deadline = _lease_of(db, live)
    _between(lease, before + 60 * second, after + 60 * second)
    _between(deadline, before + 3600 * second, after + 3600 * second)
    before = clock.read(db)
    assert db_leases.lease_set(db, ["r1", "r3"], ENGINE, 120) == 2  # a renewal
    after = clock.read(db)
    assert _lease_of(db, live)[1] == deadline  # a renewal keeps the deadline
    _between(_lease_of(db, live)[0], before + 120 * second, after + 120 * second)
    lease, deadline = _lease_of(db, near)
    assert lease == deadline  # 120 s ahead would pass its 90 s deadline


def test_running_calls_are_renewed_to_their_deadline_a_lost_one_is_not(db, monkeypatch):
    from sharemgr.manager import leases

    # The engine counts its calls' deadlines on its monotonic clock (the
    # test's here); the database counts the leases it writes on its own.
    mono = [1000.0]
    monkeypatch.setattr(leases.time, "monotonic", lambda: mono[0])
    renewals: list[tuple[list[str], float]] = []
    real = db_leases.lease_set

    def lease_set(db_, ids, engine, until, deadline=None):
        if deadline is None:
            renewals.append((sorted(ids), until))
        return real(db_, ids, engine, until, deadline)

    monkeypatch.setattr(db_leases, "lease_set", lease_set)
    keeper = leases.Keeper(db, ENGINE)
    live, lost, near = _running(db, "r1"), _running(db, "r2"), _running(db, "r3")
    with keeper.lease("r1", 3600, 2), keeper.lease("r3", 3, 2):
        with keeper.lease("r2", 3600, 2):
            lease, deadline = _lease_of(db, live)
            # A heartbeat ahead, not the hour of the deadline.
            assert deadline - lease > datetime.timedelta(seconds=3000)
        # r2's call is over but its request is still running: a lost thread.
        assert keeper.running("r1") and not keeper.running("r2")
        lost_lease = _lease_of(db, lost)
        mono[0] += 1.5
        keeper.renew()
        # r3's deadline (3 s) is less than a heartbeat away: its lease goes
        # to the deadline (the database stops it there) and no further.
        assert renewals == [(["r1", "r3"], 2)]
        assert _lease_of(db, near)[0] <= _lease_of(db, near)[1]
        assert not keeper.running("r3") and keeper.running("r1")
        keeper.renew()
        assert renewals[-1] == (["r1"], 2)
        assert not any("r2" in ids for ids, _ in renewals)
        assert _lease_of(db, lost) == lost_lease
        mono[0] += 3600
        assert not keeper.running("r1")  # past its deadline, by the engine's count
    assert not keeper.running("r1")
    # No deadline (0 seconds configured): no lease at all.
    fresh = _running(db, "r4")
    with keeper.lease("r4", None, 2):
        assert _lease_of(db, fresh) == (None, None)


@pytest.mark.parametrize("status, seconds", [(vocab.CREATING, 100),
                                             (vocab.CREATING_FROM_SNAPSHOT, 900)])
def test_a_calls_lease_is_the_method_its_rows_status_names(any_engine, status, seconds):
    """A create's lease is chosen before its re-read for each status it
    expects, and the read writes the one of the status it finds: an
    instance in ``creating_from_snapshot`` gets the lease of
    ``create_share_from_snapshot`` (the spec's ``method_when``), not
    ``create_share``'s (seen from inside the driver call)."""
    from sharemgr.manager.plans import Op

    from tests.unit.reconcile_harness import HOSTBE, add_request, from_snapshot, make_share

    engine = any_engine
    engine.operations.leases = Leases(3600, {"create_share": 100,
                                             "create_share_from_snapshot": 900})
    inst = make_share(engine.db, status)
    if status == vocab.CREATING_FROM_SNAPSHOT:
        from_snapshot(engine.db, inst)
    request = add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE,
                          status=vocab.REQUEST_RUNNING, engine_id=engine.engine_id)
    seen = []

    def call(*_args: object) -> None:
        seen.append(_lease_of(engine.db, request))

    engine.driver.create_share = engine.driver.create_share_from_snapshot = call
    before = clock.read(engine.db)
    outcome = engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE,
                                           host=HOSTBE))
    after = clock.read(engine.db)
    assert outcome.ok, outcome
    ((lease, deadline),) = seen
    second = datetime.timedelta(seconds=1)
    _between(deadline, before + seconds * second, after + seconds * second)
    assert lease == deadline  # no heartbeat: the lease is the deadline
