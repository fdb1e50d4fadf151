"""An operation whose success its lock's holder writes
(``manager/late_outcome.py``): ``run`` hands the success back unwritten with
the lock held; the holder writes it in its own transaction, then lets the
lock go; one whose row was taken over meanwhile is lost and re-observed."""

from __future__ import annotations

import contextlib

import pytest
import sqlalchemy as sa
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
            assert late_outcome.write_tx(session, done)
        for op, inst in ops:
            late_outcome.written(engine.operations, op)
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
            assert not late_outcome.write_tx(session, [performed.data])
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


def _creating(db) -> models.ShareInstance:
    share = models.Share(size=1, share_proto="NFS", name="s")
    with db.session() as session:
        session.add(share)
        session.flush()
        inst = models.ShareInstance(share_id=share.id, host=HOSTBE, status=vocab.CREATING)
        session.add(inst)
    return inst


def _success(inst: models.ShareInstance, i: int) -> list:
    return [(models.ShareInstance, inst.id, {"status": vocab.CREATING, "fence": inst.fence},
             {"status": vocab.AVAILABLE,
              "export_locations": [{"path": f"10.0.0.{i}:/s", "is_admin_only": False}]})]


def test_a_batchs_successes_are_written_together_or_not_at_all(db):
    """On every database: a report's successes (each its own export
    locations, each fenced) all win, or one lost and the caller's
    transaction writes none; on PostgreSQL and SQLite those of one shape are
    one UPDATE."""
    insts = [_creating(db) for _ in range(3)]
    sent: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *a: sent.append(a[2]) if " ".join(a[2].split()).startswith(
                        ("UPDATE", "WITH given")) else None)
    # One taken meanwhile (its fencing token moved): nothing is written.
    api.conditional_update(db, models.ShareInstance, insts[1].id, {}, {"fence": 7})
    sent.clear()
    with pytest.raises(_RolledBack), db.session() as session:
        if not late_outcome.write_tx(session, [_success(r, i) for i, r in enumerate(insts)]):
            raise _RolledBack
    assert [api.get(db, models.ShareInstance, r.id).status for r in insts] == [
        vocab.CREATING] * 3
    # MariaDB: one by one, up to the one that lost.
    assert len(sent) == (2 if db.dialect == "mysql" else 1)
    others = [insts[0], insts[2]]
    with db.session() as session:
        assert late_outcome.write_tx(session, [_success(r, i) for i, r in enumerate(others)])
    got = [api.get(db, models.ShareInstance, r.id) for r in others]
    assert [(g.status, g.export_locations[0]["path"]) for g in got] == [
        (vocab.AVAILABLE, "10.0.0.0:/s"), (vocab.AVAILABLE, "10.0.0.1:/s")]


class _RolledBack(Exception):
    pass
