"""An operation whose step meets the database away (a failover's closed
connection): before its first driver call nothing reached the backend, and
the request is given back (``NotNow``) with the row untouched; from the
driver itself, the failure is the call's, as any other (``Operations.run``;
the long many-host run, doc/chaos.rst)."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.db import reconcile as db_rec
from sharemgr.drivers import timing
from sharemgr.manager import driver_args, share_ops
from sharemgr.manager.plans import Op
from sqlalchemy import exc as sa_exc

from tests.unit.reconcile_harness import (
    BACKEND,
    HOSTBE,
    add_request,
    expect,
    fetch,
    make_replica,
    make_share,
)

AWAY = sa_exc.OperationalError("SELECT 1", {}, Exception(
    "server closed the connection unexpectedly"))


@pytest.fixture
def timed(engine):
    """The engine with its driver wrapped as the loader wraps every driver."""
    timing.time_calls(engine.driver, BACKEND)
    return engine


def _running(engine, inst: models.ShareInstance, action: str) -> int:
    return add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE,
                       status=vocab.REQUEST_RUNNING, engine_id=engine.engine_id, action=action)


def _once(monkeypatch, target: object, name: str) -> list[str]:
    real, cut = getattr(target, name), list[str]()

    def once(*args: object, **kwargs: object) -> object:
        if not cut:
            cut.append(name)
            raise AWAY
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, once)
    return cut


def test_a_resize_whose_replicas_read_meets_an_outage_changes_nothing(timed, monkeypatch):
    """The replicas of an extended share are read and taken before the
    first driver call: the read meeting a failover leaves the share
    extending, its request to be run again, and no backend resized. (It was
    read after the active replica's call: the share ended extending_error
    with its backend grown.)"""
    engine = timed
    rep = make_replica(engine.db, vocab.AVAILABLE)
    (active,) = [i for i in api.query(engine.db, models.ShareInstance, {"share_id": rep.share_id})
                 if i.id != rep.id]
    api.conditional_update(engine.db, models.ShareInstance, active.id, {},
                           {"status": vocab.EXTENDING})
    _running(engine, active, vocab.ACTION_EXTEND)
    cut = _once(monkeypatch, share_ops.db_api, "query")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, active.id, vocab.ACTION_EXTEND,
                                        args={"new_size": 9})),
           Result.NOT_NOW, "before its driver call: OperationalError")
    assert cut
    assert fetch(engine.db, vocab.SHARE_INSTANCE, active.id).status == vocab.EXTENDING
    assert "extend_share" not in engine.driver.methods()


def test_a_delete_whose_read_meets_an_outage_is_given_back(timed, monkeypatch):
    engine = timed
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)
    cut = _once(monkeypatch, driver_args, "server_dict")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE)), Result.NOT_NOW)
    assert cut and engine.driver.methods() == []
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETING


def test_an_outage_inside_the_driver_is_the_call_s_failure(engine):
    """The driver's own database (a backend that keeps one) went away
    during the call: the backend may have changed, and the share ends in
    its error status as for any failed call."""
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)

    def delete_share(share: dict, share_server: dict | None = None) -> None:
        raise AWAY

    engine.driver.delete_share = delete_share
    timing.time_calls(engine.driver, BACKEND)
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE)), Result.FAILED)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR_DELETING


def test_a_delete_whose_re_read_under_its_lock_meets_an_outage_is_given_back(timed, monkeypatch):
    """The re-read that takes the row under its lock (``read_and_lease``)
    met a failover's closed connection: no driver call began, so the
    request is given back, not failed as a bug (the long fault run, seed
    5291: a snapshot's delete request failed so)."""
    from sharemgr.manager import operations

    engine = timed
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)
    cut = _once(monkeypatch, operations.db_leases, "read_and_lease")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE)),
           Result.NOT_NOW, "before its driver call: OperationalError")
    assert cut and engine.driver.methods() == []
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETING


def test_an_outcome_that_meets_an_outage_waits_and_is_written(timed, monkeypatch, caplog):
    """The database away when a call's outcome is written (after the call):
    the outcome is tried again until it is written, not lost with its
    request failed (the first try runs outside tenacity; the tries after it
    are tenacity's)."""
    from sharemgr.manager import operations

    engine = timed
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)
    cut = _once(monkeypatch, operations.db_api, "transition_with_request")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE)), Result.DONE)
    assert cut and engine.driver.methods() == ["delete_share"]
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).deleted_at is not None
    assert "its outcome waits for it" in caplog.text


def test_an_outcome_write_failing_for_another_reason_is_raised(timed, monkeypatch):
    """Only the database being away is waited for: any other error of the
    outcome's write propagates at once (a bug), not retried."""
    from sharemgr.manager import operations

    engine = timed
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)
    tries = []

    def broken(*args: object, **kwargs: object) -> bool:
        tries.append(1)
        raise ValueError("not an outage")

    monkeypatch.setattr(operations.db_api, "transition_with_request", broken)
    with pytest.raises(ValueError):
        engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                     host=HOSTBE))
    assert tries == [1]


def test_an_engine_out_of_the_group_takes_no_row(timed):
    """Out of the engines group (paused, cut off: its work may be another's
    now), an operation takes nothing: taking the row would bump its token
    and fence out the call of the engine that took the work over (the
    fault run, seed 7412). NOT_NOW, the row as it was."""
    engine = timed
    inst = make_share(engine.db, vocab.DELETING)
    _running(engine, inst, vocab.ACTION_DELETE)
    fence = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).fence
    engine.operations.not_member = lambda: "its membership expired"
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE)), Result.NOT_NOW, "membership expired")
    after = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
    assert (after.status, after.fence) == (vocab.DELETING, fence)
    assert engine.driver.methods() == []


def test_an_engine_whose_request_was_taken_over_takes_no_row(any_engine):
    """Back from a pause or a cut, an engine whose request a pass abandoned
    (its lease expired: the pass took the row without the lock a stuck call
    may hold, and called the driver itself) takes nothing: its take would
    bump the row's token and fence out that pass's call, and the work would
    be done again (the fault run, seed 7412: one delete called three times).
    LOST, the row as the pass left it, no driver call; on every database
    (the request's row is read locked, so an abandon waits for a take)."""
    engine = any_engine
    timing.time_calls(engine.driver, BACKEND)
    inst = make_share(engine.db, vocab.DELETING)
    rid = _running(engine, inst, vocab.ACTION_DELETE)
    assert db_rec.abandon_request(engine.db, rid, engine.engine_id, "stuck; reconciled by B")
    fence = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).fence
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE, request_id=rid)),
           Result.LOST, f"request {rid} is no longer")
    after = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
    assert (after.status, after.fence) == (vocab.DELETING, fence)
    assert engine.driver.methods() == []
    assert api.get(engine.db, models.Request, rid).status == vocab.REQUEST_ABANDONED
    # Its own running request: the same call takes the row and calls the driver.
    mine = _running(engine, inst, vocab.ACTION_DELETE)
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE,
                                        host=HOSTBE, request_id=mine)), Result.DONE)
    assert engine.driver.methods() == ["delete_share"]
