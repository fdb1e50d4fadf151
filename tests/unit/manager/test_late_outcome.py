"""An operation whose success its lock's holder writes
(``manager/late_outcome.py``): ``run`` hands the success back unwritten with
the lock held; the holder writes it in its own transaction, then lets the
lock go; one whose row was taken over meanwhile is lost and re-observed."""

from __future__ import annotations

import contextlib

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.manager import held_reads, late_outcome, operations
from sharemgr.manager.op_errors import Lost
from sharemgr.manager.plans import Op, Reread

from tests.unit.reconcile_harness import HOSTBE, add_request, expect, fetch, make_share


def _deleting(engine) -> models.ShareInstance:
    inst = make_share(engine.db, vocab.DELETING)
    add_request(engine.db, vocab.SHARE_INSTANCE, inst.id, HOSTBE, status=vocab.REQUEST_RUNNING,
                engine_id=engine.engine_id, action=vocab.ACTION_DELETE)
    return inst


def _free(engine, inst: models.ShareInstance) -> bool:
    with engine.peer().try_lock(operations.lock_name(vocab.SHARE_INSTANCE, inst.id)) as got:
        return got


def _deferred(engine, every: contextlib.ExitStack) -> list[tuple[Op, models.ShareInstance]]:
    """Two deletes a batch holds, their successes left to it."""
    insts = [_deleting(engine), _deleting(engine)]
    held = held_reads.reread_held(
        engine.operations,
        [Op(vocab.SHARE_INSTANCE, i.id, vocab.ACTION_DELETE, host=HOSTBE, taken=0)
         for i in insts], defer=True)
    out = []
    for (op, stack), inst in zip(held, insts, strict=True):
        every.push(stack)
        assert op is not None and op.reread is not None and op.reread.defer
        out.append((op, inst))
    return out


def test_a_success_left_to_the_holder_is_written_in_its_transaction(engine):
    with contextlib.ExitStack() as every:
        ops = _deferred(engine, every)
        done = []
        for op, inst in ops:
            performed = engine.operations.perform(op)
            expect(performed, Result.DONE)
            assert late_outcome.defers(op, performed.data)
            # Called, not written; the lock still the holder's.
            assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETING
            assert not _free(engine, inst)
            done.append(performed.data)
        with engine.db.session() as session:
            assert all(late_outcome.write_tx(session, changes) for changes in done)
        for (op, inst), changes in zip(ops, done, strict=True):
            late_outcome.written(engine.operations, op, changes)
            assert _free(engine, inst)
            assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).deleted_at is not None
    assert engine.driver.methods() == ["delete_share", "delete_share"]


def test_a_success_whose_row_was_taken_meanwhile_is_lost_and_re_observed(engine):
    """A pass took the row (its fencing token bumped) after the call: the
    holder's write loses, as ``run``'s own would; written alone it is lost,
    the resource re-observed and the lock let go."""
    observed: list[tuple[str, str]] = []
    engine.operations.on_lost = lambda rtype, ident: observed.append((rtype, ident))
    with contextlib.ExitStack() as every:
        (op, inst), _other = _deferred(engine, every)
        performed = engine.operations.perform(op)
        expect(performed, Result.DONE)
        fence = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).fence
        assert api.conditional_update(engine.db, models.ShareInstance, inst.id, {},
                                      {"fence": fence + 1})
        with engine.db.session() as session:
            assert not late_outcome.write_tx(session, performed.data)
            session.rollback()
        with pytest.raises(Lost):
            late_outcome.write_alone(engine.operations, op, performed.data)
        row = fetch(engine.db, vocab.SHARE_INSTANCE, inst.id)
        assert (row.status, row.deleted_at, row.fence) == (vocab.DELETING, None, fence + 1)
        assert observed == [(vocab.SHARE_INSTANCE, inst.id)]
        assert _free(engine, inst)


def test_a_copy_the_driver_goes_on_with_is_never_left_to_the_holder():
    """Its node waits for the status poll, which needs the outcome written
    and the lock free."""
    copying = [(models.ShareInstance, "i", {}, {"progress": "0%"})]
    reread = Reread(object(), None, release=lambda: None, defer=True)
    op = Op(vocab.SHARE_INSTANCE, "i", vocab.ACTION_CREATE, reread=reread)
    assert not late_outcome.defers(op, copying)
    assert late_outcome.defers(op, [(models.ShareInstance, "i", {}, {"status": "available"})])
    assert not late_outcome.defers(Op(vocab.SHARE_INSTANCE, "i", vocab.ACTION_CREATE),
                                   [(models.ShareInstance, "i", {}, {"status": "available"})])
