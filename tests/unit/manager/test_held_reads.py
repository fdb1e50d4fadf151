"""A batch's rows re-read under their locks in one statement
(``manager/held_reads.py``): each op then runs under the lock the batch
holds for it, with the row the batch read, and reads nothing of its own;
what the batch cannot serve takes its lock and reads its row itself."""

from __future__ import annotations

import contextlib

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.manager import held_reads, operations
from sharemgr.manager.op_errors import NotNow
from sharemgr.manager.plans import Op
from sqlalchemy import exc as sa_exc

from tests.unit.reconcile_harness import HOSTBE, add_request, expect, fetch, make_share

AWAY = sa_exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))


def _deleting(engine) -> models.ShareInstance:
    """A share instance begun deleting by this engine (its request running)."""
    inst = make_share(engine.db, vocab.DELETING)
    add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE, status=vocab.REQUEST_RUNNING,
                engine_id=engine.engine_id, action=vocab.ACTION_DELETE)
    return inst


def _op(inst: models.ShareInstance, taken: int | None = 0) -> Op:
    # A stack's begin inserts its row taken: the call takes it no more.
    return Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_DELETE, host=HOSTBE, taken=taken)


def _free(engine, inst: models.ShareInstance) -> bool:
    """Whether another engine could take the instance's lock now."""
    peer = engine.peer()
    with peer.try_lock(operations.lock_name(vocab.SHARE_INSTANCE, inst.id)) as got:
        return got


def _no_read_of_its_own(monkeypatch) -> None:
    def read_and_lease(*args: object, **kwargs: object) -> None:
        raise AssertionError("the op read its row again")

    monkeypatch.setattr(operations.db_leases, "read_and_lease", read_and_lease)


def test_a_batch_is_read_under_its_locks_and_run_with_no_read_of_its_own(engine, monkeypatch):
    a, b = _deleting(engine), _deleting(engine)
    held = held_reads.reread_held(engine.operations, [_op(a), None, _op(b)])
    assert held[1][0] is None
    for (op, _stack), inst in ((held[0], a), (held[2], b)):
        assert op is not None and op.reread is not None
        assert (op.reread.row.id, op.reread.row.status) == (inst.id, vocab.DELETING)
        assert op.reread.parent.id == inst.share_id  # the share, read with it
        assert not _free(engine, inst)
    _no_read_of_its_own(monkeypatch)
    for (op, stack), inst in ((held[0], a), (held[2], b)):
        expect(engine.operations.perform(op), Result.DONE)
        # Let go once its outcome was written, as a lock of its own would be
        # (not when the caller's node ends: a clone poll may need it).
        assert _free(engine, inst)
        stack.close()
        assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).deleted_at is not None
    assert engine.driver.methods() == ["delete_share", "delete_share"]


def test_a_row_changed_before_the_batch_read_it_is_not_called(engine):
    """An admin's reset-state between the begin and the read (it takes no
    lock): the batch reads the row as it is, and its op bails before the
    driver call, as its own re-read would have made it."""
    a, b = _deleting(engine), _deleting(engine)
    api.conditional_update(engine.db, models.ShareInstance, b.id, {},
                           {"status": vocab.ERROR_DELETING})
    held = held_reads.reread_held(engine.operations, [_op(a), _op(b)])
    with contextlib.ExitStack() as every:
        for _, stack in held:
            every.push(stack)
        outcomes = [engine.operations.perform(op) for op, _stack in held if op is not None]
    assert [o.result for o in outcomes] == [Result.DONE, Result.STALE]
    assert engine.driver.methods() == ["delete_share"]


def test_what_the_batch_cannot_serve_takes_its_lock_and_reads_itself(engine, monkeypatch):
    """Not inserted taken (it must be taken under the lock), refused a lock
    by the coordination backend, gone: each comes back as it was, no lock
    held for it; the others are served."""
    untaken, refused, gone, a, b = (_deleting(engine) for _ in range(5))
    api.conditional_update(engine.db, models.ShareInstance, gone.id, {},
                           {"deleted_at": models.utcnow()})
    locked = engine.operations.locked

    def locked_unless_refused(rtype: str, ident: str, lock: bytes | None = None):
        if ident == refused.id:
            raise NotNow("the coordination backend is away")
        return locked(rtype, ident, lock)

    monkeypatch.setattr(engine.operations, "locked", locked_unless_refused)
    ops = [_op(untaken, taken=None), _op(refused), _op(gone), _op(a), _op(b)]
    held = held_reads.reread_held(engine.operations, ops)
    assert [op for op, _stack in held[:3]] == ops[:3]  # unchanged: no reread
    assert [_free(engine, i) for i in (untaken, refused, gone, a, b)] == [
        True, True, True, False, False]
    for _, stack in held:
        stack.close()
    assert _free(engine, a) and _free(engine, b)


def test_a_batch_whose_read_fails_holds_nothing_and_each_reads_alone(engine, monkeypatch):
    """The database away at the batch's read: no lock stays held and every
    op comes back as it was; each then meets the outage in its own run, as
    alone (NOT_NOW: nothing called)."""
    a, b = _deleting(engine), _deleting(engine)

    def away(*args: object, **kwargs: object) -> None:
        raise AWAY

    monkeypatch.setattr(held_reads.resources, "instances_with_shares", away)
    ops = [_op(a), _op(b)]
    held = held_reads.reread_held(engine.operations, ops)
    assert [op for op, _stack in held] == ops
    assert _free(engine, a) and _free(engine, b)


@pytest.mark.parametrize("lone", [True, False])
def test_one_op_alone_is_not_read_for(engine, lone):
    """A batch of one reads nothing ahead (it would read as fast alone)."""
    a = _deleting(engine)
    ops = [_op(a)] if lone else [_op(a), None]
    held = held_reads.reread_held(engine.operations, ops)
    assert [op for op, _stack in held] == ops and _free(engine, a)


def test_two_ops_about_one_resource_take_their_lock_each_in_turn(engine):
    """The thread would otherwise take one lock twice and wait for itself."""
    a, b = _deleting(engine), _deleting(engine)
    ops = [_op(a), _op(a), _op(b)]
    held = held_reads.reread_held(engine.operations, ops)
    assert [op for op, _stack in held] == ops and _free(engine, a) and _free(engine, b)
