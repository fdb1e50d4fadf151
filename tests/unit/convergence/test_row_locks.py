"""A stack row's lock as checks, the watchdog and its tidying take, break
and let go of it (convergence/row_locks.py): a lock this engine leaked, a
live engine's, one taken over or given back while a check's driver call
ran."""

from __future__ import annotations

import logging

from sharemgr.convergence import physical as phys
from sharemgr.db import resource_locks, stacks

from tests.unit.stack_rig import HOST, V1, FixedPace, _one_each, _status


def test_a_lock_this_engine_leaked_is_taken_over(rig):
    """A lock whose release was lost (a database error) belongs to a live
    engine — this one — but no check of it holds the row: taken over, not
    waited for forever."""
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, e.engine_id).acquired
    rig.update("web", V1.replace("size: 1", "size: 2"))
    e.pump()
    assert _status(rig, "web") == ("UPDATE", "COMPLETE")
    assert stacks.resource_get(rig.db, data.id).engine_id is None


def test_a_live_engines_lock_is_not_taken(rig):
    a, b = rig.engine(), rig.engine()
    rig.create("web", V1)
    a.pump()
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, a.engine_id).acquired
    rig.update("web", V1.replace("size: 1", "size: 2"))
    b.pump()
    assert _status(rig, "web") == ("UPDATE", "IN_PROGRESS")
    assert "locked by live engine" in rig.checks()[0].error
    assert stacks.resource_get(rig.db, data.id).engine_id == a.engine_id


def test_watchdog_releases_a_leaked_lock_and_retriggers(rig):
    """A lock this engine holds while none of its checks does (a release lost
    to a database error) makes every check bail on a 'live' holder; the
    watchdog releases it and retriggers the stalled node."""
    e, other = rig.engine(), rig.engine()
    rig.create("web", V1)
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, e.engine_id).acquired
    other.pump()
    assert "locked by live engine" in rig.checks()[0].error
    assert other.watchdog.run_once()["waiting"] == 1  # another engine's lock: wait
    counts = e.watchdog.run_once()
    assert counts["retriggered"] == 1
    assert stacks.resource_get(rig.db, data.id).engine_id is None
    assert e.watchdog.run_once()["retriggered"] == 0  # its check is pending now
    other.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")


def test_watchdog_leaves_a_leaked_lock_a_check_took_over_meanwhile(rig, monkeypatch):
    """The watchdog judged the lock leaked, then read the resource; a check
    of this engine took the lock over meanwhile (as leaked, too). Its
    release was conditioned on the engine alone and dropped that check's
    lock; it is now conditioned on the key the watchdog read."""
    e, other = rig.engine(), rig.engine()
    rig.create("web", V1)
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, e.engine_id).acquired
    other.pump()
    real = phys.observe

    def observe_while_taken(db, type_, physical_id):
        # The check's take-over of its engine's leaked lock: same holder, new key.
        assert resource_locks.resource_lock_steal(db, data.id, e.engine_id,
                                                  e.engine_id).acquired
        monkeypatch.setattr(phys, "observe", real)
        return real(db, type_, physical_id)

    monkeypatch.setattr(phys, "observe", observe_while_taken)
    e.watchdog.run_once()
    assert stacks.resource_get(rig.db, data.id).engine_id == e.engine_id


GHOST = f"{HOST}.00000000-0000-0000-0000-000000000000"


def _fast_create_with(rig, monkeypatch, meanwhile) -> tuple[str, str | None, str]:
    """A plain create (the fast path: its end written in the report's
    transaction) during whose driver call ``meanwhile(engine, row id)``
    runs; returns the engine's id, and its row's holder and status
    afterwards."""
    one = "resources:\n  data: {type: share, properties: {size: 1, proto: NFS}}\n"
    e = rig.engine()
    real = e.drivers["dummy"].create_share

    def create_then(share, *args, **kwargs):
        out = real(share, *args, **kwargs)
        (row,) = rig.rows("web")["data"]
        meanwhile(e, row.id)
        return out

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create_then)
    rig.create("web", one)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "IN_PROGRESS")
    ((holder, status),) = [(r.engine_id, r.status) for r in rig.rows("web")["data"]]
    return e.engine_id, holder, status


def test_a_fast_create_whose_row_lock_was_taken_meanwhile_bails(rig, monkeypatch):
    """As above, on the fast path: nothing of the report is written."""

    def stolen(e, rid):
        assert resource_locks.resource_lock_steal(rig.db, rid, GHOST, e.engine_id).acquired

    assert _fast_create_with(rig, monkeypatch, stolen)[1:] == (GHOST, "IN_PROGRESS")


def test_a_fast_create_whose_row_lock_came_back_to_its_engine_bails(rig, monkeypatch):
    """As above, but the lock comes back to this same engine before the
    report: another engine took it (this one judged dead), ended and let
    it go, and another check of this engine took it again. The late end,
    conditioned on the engine alone, passed: it wrote its values over the
    row and released the other check's lock. Now it is conditioned on the
    lock's key as its begin set it: the node bails, and the row stays
    with the check that holds it."""

    def taken_back(e, rid):
        assert resource_locks.resource_lock_steal(rig.db, rid, GHOST, e.engine_id).acquired
        assert resource_locks.resource_lock_release(rig.db, rid, GHOST)
        assert resource_locks.resource_lock_acquire(rig.db, rid, e.engine_id).acquired

    engine_id, holder, status = _fast_create_with(rig, monkeypatch, taken_back)
    assert (holder, status) == (engine_id, "IN_PROGRESS")


def test_a_batch_whose_one_row_was_taken_meanwhile_ends_the_others(rig, monkeypatch, caplog):
    """Three plain creates run in one thread: the first check's report
    takes the other two, whose ends are written in one report
    (``Reporter.end_many``, batches of three); the lock of one of them was
    taken by another engine while its driver call ran. That transaction
    writes nothing; each node then ends alone: the other completes and
    lets go of its row, the taken one bails and its row stays with the
    engine that took it."""
    three = "resources:\n" + "".join(
        f"  {n}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n" for n in "abc")
    caplog.set_level(logging.INFO)
    e = rig.engine()
    e.stacks.take_checks_when(lambda: True)
    e.worker.pace = FixedPace(3)
    real = e.drivers["dummy"].create_share
    calls: list[str] = []

    def create_then(share, *args, **kwargs):
        out = real(share, *args, **kwargs)
        calls.append(share["id"])
        if len(calls) == 2:  # b's: the stack's resources are created in name order
            (row,) = rig.rows("web")["b"]
            assert resource_locks.resource_lock_steal(rig.db, row.id, GHOST,
                                                      e.engine_id).acquired
        return out

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create_then)
    rig.create("web", three)
    assert e.step(1) == 1  # one request from the loop; the report takes the others
    rows = rig.rows("web")
    assert [(r.engine_id, r.action, r.status) for n in "ac" for r in rows[n]] == [
        (None, "CREATE", "COMPLETE")] * 2
    ((b,),) = [rows["b"]]
    assert (b.engine_id, b.status) == (GHOST, "IN_PROGRESS")
    assert _status(rig, "web") == ("CREATE", "IN_PROGRESS")
    assert "2 nodes (traversal" in caplog.text and "each ends alone" in caplog.text


def test_a_batch_whose_one_lock_moved_before_its_begin_begins_each_alone(rig, monkeypatch):
    """Three plain creates: the first check's report takes the other two,
    whose work begins together (``stack_work.begin_many``). One row's lock
    moved after it was planned (taken and let go by another engine): their
    begin writes nothing, and each check runs alone — the moved one's fast
    path finds its key changed too, and its general path takes the lock.
    The stack completes, every share made once."""
    from sharemgr.convergence import chained
    from sharemgr.db import stack_work

    three = "resources:\n" + "".join(
        f"  {n}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n" for n in "abc")
    e = rig.engine()
    e.stacks.take_checks_when(lambda: True)
    e.worker.pace = FixedPace(3)
    planned_fast, begin_many = e.worker.planned_fast, stack_work.begin_many
    answers = []

    def planned_then_moved(claimed):
        p = planned_fast(claimed)
        if p is not None and p.row.name == "b":
            assert resource_locks.resource_lock_steal(rig.db, p.row.id, GHOST, None).acquired
            assert resource_locks.resource_lock_release(rig.db, p.row.id, GHOST)
        return p

    def recorded(*args, **kwargs):
        answers.append(begin_many(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(e.worker, "planned_fast", planned_then_moved)
    monkeypatch.setattr(chained.stack_work, "begin_many", recorded)
    rig.create("web", three)
    assert e.step(1) == 1
    assert [getattr(a, "result", None) for a in answers] == ["retry"]
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    assert _one_each(rig, ("share",)) == ["web-a", "web-b", "web-c"]


def test_a_batch_of_creates_reads_its_rows_in_one_statement(rig, monkeypatch):
    """Three plain creates: the first check's report takes the other two,
    whose work begins together; their rows are then re-read in one
    statement under their locks (``manager/held_reads.py``), and neither
    create reads its row again. The stack completes, every share made once."""
    from sharemgr.manager import held_reads, operations

    three = "resources:\n" + "".join(
        f"  {n}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n" for n in "abc")
    e = rig.engine()
    e.stacks.take_checks_when(lambda: True)
    e.worker.pace = FixedPace(3)
    batch_read, own_read = held_reads.resources.instances_with_shares, \
        operations.db_leases.read_and_lease
    batches: list[int] = []
    alone: list[str] = []

    def read_batch(db, ids):
        batches.append(len(ids))
        return batch_read(db, ids)

    def read_alone(db, model, ident, *args, **kwargs):
        alone.append(ident)
        return own_read(db, model, ident, *args, **kwargs)

    monkeypatch.setattr(held_reads.resources, "instances_with_shares", read_batch)
    monkeypatch.setattr(operations.db_leases, "read_and_lease", read_alone)
    rig.create("web", three)
    assert e.step(1) == 1
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    assert _one_each(rig, ("share",)) == ["web-a", "web-b", "web-c"]
    assert (batches, len(alone)) == ([2], 1)  # the first check's create read alone
