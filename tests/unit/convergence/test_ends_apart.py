"""A batch's operations' successes, written by its report
(``manager/late_outcome.py``, ``Reporter.end_many``), and what happens when
that transaction cannot write them (``convergence/ends_apart.py``)."""

from __future__ import annotations

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.convergence import lifecycle
from sharemgr.db import api, models, resources
from sharemgr.manager import operations
from sharemgr.manager.coordination import Coordinator

from tests.unit.stack_rig import HOST, FixedPace, _status

THREE = "resources:\n" + "".join(
    f"  {n}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n" for n in "abc")


def _batched(rig, monkeypatch) -> tuple[object, list[str]]:
    """An engine running three plain creates in one thread (the first
    check's report takes the other two, which begin together and end in
    one report) and the resources whose outcomes it wrote on their own."""
    e = rig.engine()
    e.stacks.take_checks_when(lambda: True)
    e.worker.pace = FixedPace(3)
    alone: list[str] = []
    real = operations.Operations.write_outcome

    def write_outcome(self, changes, what, rtype, ident):
        alone.append(ident)
        return real(self, changes, what, rtype, ident)

    monkeypatch.setattr(operations.Operations, "write_outcome", write_outcome)
    return e, alone


def _instance(rig, name: str) -> models.ShareInstance:
    (row,) = rig.rows("web")[name]
    inst = resources.primary_instance(rig.db, row.physical_id)
    assert inst is not None
    return inst


def _free(rig, inst: models.ShareInstance) -> bool:
    """Whether another engine could take the instance's lock now."""
    peer = Coordinator(rig.coordination_url, f"{HOST}.peer")
    peer.start(heartbeat=False)
    try:
        with peer.try_lock(operations.lock_name(vocab.SHARE_INSTANCE, inst.id)) as got:
            return got
    finally:
        peer.stop()


def _op_request(rig, inst: models.ShareInstance) -> models.Request:
    (req,) = [r for r in api.request_list(rig.db) if r.resource_id == inst.id]
    return req


def test_a_batchs_successes_are_written_by_its_report(rig, monkeypatch):
    """The two creates begun together have their successes written in the
    transaction that ends their nodes (the first, a lone check, in one of
    its own): each share available, its request done, its lock let go."""
    e, alone = _batched(rig, monkeypatch)
    rig.create("web", THREE)
    assert e.step(1) == 1
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    insts = {n: _instance(rig, n) for n in "abc"}
    assert alone == [insts["a"].id]
    assert {i.status for i in insts.values()} == {vocab.AVAILABLE}
    ends = {n: _op_request(rig, i) for n, i in insts.items()}
    assert {r.status for r in ends.values()} == {vocab.REQUEST_DONE}
    # In one transaction with their nodes' ends: one stamp for both.
    assert ends["b"].finished_at == ends["c"].finished_at
    assert all(_free(rig, i) for i in insts.values())


def test_a_success_lost_in_the_report_cuts_its_node_and_the_others_complete(
        rig, monkeypatch):
    """A reconciliation pass took b's instance (its fencing token bumped)
    after b's driver call returned, before the report wrote its success:
    the report's transaction writes nothing, then each node ends alone.
    c completes; b's success is not written over the pass's take, its
    resource is re-observed, its request abandoned, its node cut (its row
    left locked for the watchdog, as a lost operation's is)."""
    e, _alone = _batched(rig, monkeypatch)
    observed: list[tuple[str, str]] = []
    e.operations.on_lost = lambda rtype, ident: observed.append((rtype, ident))
    real = e.drivers["dummy"].create_share
    taken: list[str] = []

    def create_then_taken(share, *args, **kwargs):
        out = real(share, *args, **kwargs)
        if share["name"].split("-")[1] == "b":  # <stack>-<resource>-<suffix>
            taken.append(share["id"])
            assert api.conditional_update(rig.db, models.ShareInstance, share["id"], {},
                                          {"fence": 99})
        return out

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create_then_taken)
    rig.create("web", THREE)
    assert e.step(1) == 1
    b, c = _instance(rig, "b"), _instance(rig, "c")
    assert taken == [b.id]
    assert (b.status, b.fence) == (vocab.CREATING, 99)
    assert c.status == vocab.AVAILABLE
    assert observed == [(vocab.SHARE_INSTANCE, b.id)]
    req = _op_request(rig, b)
    assert req.status == vocab.REQUEST_ABANDONED and (req.error or "").startswith("lost:")
    rows = rig.rows("web")
    assert [(r.action, r.status) for r in rows["c"]] == [("CREATE", "COMPLETE")]
    assert [(r.engine_id, r.status) for r in rows["b"]] == [(e.engine_id, "IN_PROGRESS")]
    assert _free(rig, b) and _free(rig, c)


def test_a_report_that_fails_writes_each_success_alone(rig, monkeypatch):
    """The batch's report transaction meets an outage: nothing of it is
    written; each node then ends alone, its success written first, and the
    stack completes."""
    e, alone = _batched(rig, monkeypatch)
    real, failed = lifecycle.in_one_transaction, list[object]()

    def in_one_transaction(db, work):
        if getattr(work, "__name__", "") == "report" and not failed:
            failed.append(work)
            raise sa.exc.OperationalError("UPDATE sync_points", {}, Exception(
                "server closed the connection unexpectedly"))
        return real(db, work)

    rig.create("web", THREE)
    monkeypatch.setattr(lifecycle, "in_one_transaction", in_one_transaction)
    e.pump()
    assert failed
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    insts = [_instance(rig, n) for n in "abc"]
    assert {i.status for i in insts} == {vocab.AVAILABLE}
    assert sorted(alone) == sorted(i.id for i in insts)


def test_a_batchs_report_writes_its_rows_and_points_one_statement_each(rig, monkeypatch):
    """The two creates begun together end in one report whose rows' ends,
    clean-up points and root points are one UPDATE each (``ends_tx``,
    ``first_reports_tx``); only the lone first check writes its row and its
    two points one statement each."""
    e, _alone = _batched(rig, monkeypatch)
    sent: list[str] = []

    def seen(*args):
        sent.append(" ".join(args[2].split()))

    sa.event.listen(rig.db.engine, "before_cursor_execute", seen)
    try:
        rig.create("web", THREE)
        assert e.step(1) == 1
    finally:
        sa.event.remove(rig.db.engine, "before_cursor_execute", seen)
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    updates = [q for q in sent if q.startswith(("UPDATE", "WITH given"))]
    per_row_points = [q for q in updates if q.startswith("UPDATE sync_points SET")
                      and "input_data=?" in q]
    together_points = [q for q in updates if q.startswith("WITH given")
                       and "UPDATE sync_points SET" in q]
    per_row_ends = [q for q in updates if q.startswith("UPDATE stack_resources SET")
                    and "atomic_key=(stack_resources.atomic_key + ?)" in q]
    together_ends = [q for q in updates if q.startswith("WITH given")
                     and "UPDATE stack_resources SET" in q and "w_engine_id" in q]
    assert (len(per_row_points), len(together_points)) == (2, 2), updates
    assert (len(per_row_ends), len(together_ends)) == (1, 1), updates
