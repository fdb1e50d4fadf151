"""A create from a snapshot that goes on in the backend after the driver's
call (manager/successes.py, manager/clone_poll.py, and the
reconciliation of one a crash cut short): real database, coordinator,
Operations and Reconciler; the driver is the reconciliation rigs' fake."""

from __future__ import annotations

import logging

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import models
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import clone_poll, successes
from sharemgr.manager.op_errors import OperationFailed
from sharemgr.manager.plans import Op

from tests.unit.reconcile_harness import (
    HEALTHY,
    HOSTBE,
    Literal,
    add,
    expect,
    export_path,
    fetch,
    make_share,
    make_snapshot,
)

COPYING = {"status": vocab.CREATING_FROM_SNAPSHOT, "export_locations": []}


def _clone(db, progress: str | None = None) -> models.ShareInstance:
    """A share from a snapshot, its instance creating_from_snapshot."""
    snap = make_snapshot(db, vocab.AVAILABLE)
    share = models.Share(id=models.new_id(), size=5, share_proto="NFS", name="c",
                         snapshot_id=snap.snapshot_id)
    inst = models.ShareInstance(id=models.new_id(), share_id=share.id, host=HOSTBE,
                                status=vocab.CREATING_FROM_SNAPSHOT, export_locations=[],
                                progress=progress)
    add(db, share, inst)
    return inst


def _answers(engine, answer: object) -> list[str]:
    calls: list[str] = []

    def create_share_from_snapshot(share, snapshot, share_server=None):
        calls.append(share["id"])
        return answer

    engine.driver.create_share_from_snapshot = create_share_from_snapshot
    return calls


def _poll(engine) -> None:
    clone_poll.poll_clones(engine.operations, [HOSTBE])


def test_an_answer_that_the_copy_goes_on_ends_the_call_not_the_create(any_engine):
    engine = any_engine  # the poll's query on SQLite, PostgreSQL and MariaDB
    db = engine.db
    inst = _clone(db)
    _answers(engine, COPYING)
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE)),
           Result.DONE)
    row = fetch(db, vocab.SHARE_INSTANCE, inst.id)
    assert (row.status, row.progress) == (vocab.CREATING_FROM_SNAPSHOT, "0%")

    engine.driver.answers[inst.id] = Literal({"status": vocab.CREATING_FROM_SNAPSHOT,
                                              "progress": "40%"})
    _poll(engine)
    row = fetch(db, vocab.SHARE_INSTANCE, inst.id)
    assert (row.status, row.progress) == (vocab.CREATING_FROM_SNAPSHOT, "40%")

    engine.driver.answers[inst.id] = HEALTHY
    _poll(engine)
    row = fetch(db, vocab.SHARE_INSTANCE, inst.id)
    assert (row.status, row.progress) == (vocab.AVAILABLE, "100%")
    assert [e["path"] for e in row.export_locations] == [export_path(inst.id)]


@pytest.mark.parametrize("answer", ["missing", "error"])
def test_a_copy_that_fails_in_the_backend_ends_in_error(engine, answer):
    inst = _clone(engine.db, progress="0%")
    engine.driver.answers[inst.id] = answer
    _poll(engine)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR


def test_the_poll_leaves_a_create_whose_call_still_runs(engine):
    """No progress: the create's own call is at work; the poll asks nothing."""
    inst = _clone(engine.db)
    _poll(engine)
    assert ("get_share_status", inst.id) not in engine.driver.calls
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.CREATING_FROM_SNAPSHOT


def test_an_answer_with_another_status_fails_the_create(engine):
    inst = _clone(engine.db)
    _answers(engine, {"status": "error"})
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE)),
           Result.FAILED, "answered status 'error'")
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR


def test_a_plain_create_cannot_answer_that_it_goes_on(engine):
    with pytest.raises(OperationFailed):
        successes.checked(COPYING)
    assert successes.checked(COPYING, vocab.CREATING_FROM_SNAPSHOT) is COPYING
    # Through the call: nothing would ever end a plain create left copying.
    inst = make_share(engine.db, vocab.CREATING)
    engine.driver.create_share = lambda share, share_server=None: COPYING
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE)),
           Result.FAILED, "answered status 'creating_from_snapshot'")
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR


def test_an_answer_the_manager_cannot_record_fails_the_create(engine, caplog):
    """Export locations without a path: the driver's bug, read inside the
    call, so the create fails (error, its traceback logged with the
    method) instead of leaving the share creating with its request lost."""
    inst = make_share(engine.db, vocab.CREATING)
    engine.driver.create_share = lambda share, share_server=None: [{"preferred": True}]
    caplog.set_level(logging.WARNING, "sharemgr.manager.operations")
    expect(engine.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE)),
           Result.FAILED, "failed: 'path'")
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR
    [record] = [r for r in caplog.records if r.name == "sharemgr.manager.operations"]
    assert record.levelno == logging.ERROR and record.exc_info[0] is KeyError
    assert "from driver method create_share" in record.getMessage()


def test_reconciliation_hands_a_copy_still_going_on_to_the_poll(engine):
    """A crash during the call: the pass asks get_share_status; a copy
    still going on is left to the poll (progress set, status kept), which
    ends it; the next pass leaves it alone."""
    db = engine.db
    inst = _clone(db)
    engine.driver.answers[inst.id] = Literal({"status": vocab.CREATING_FROM_SNAPSHOT})
    engine.run()
    row = fetch(db, vocab.SHARE_INSTANCE, inst.id)
    assert (row.status, row.progress) == (vocab.CREATING_FROM_SNAPSHOT, "0%")

    asked = len(engine.driver.calls)
    summary = engine.run()
    assert len(engine.driver.calls) == asked, "the second pass asked the backend again"
    assert "status poll" in str(summary)

    engine.driver.answers[inst.id] = HEALTHY
    _poll(engine)
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE


def test_an_outage_leaves_the_copy_for_the_next_run(engine, caplog):
    """A backend that cannot answer now: one warning line, nothing written."""
    inst = _clone(engine.db, progress="0%")

    def outage(share, share_server=None):
        raise ShareBackendException("cluster unreachable")

    engine.driver.get_share_status = outage
    _poll(engine)
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.CREATING_FROM_SNAPSHOT
    assert "cluster unreachable" in caplog.text and "Traceback" not in caplog.text
