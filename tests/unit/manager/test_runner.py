"""The request loop's outcome writing (manager/runner.py)."""

from __future__ import annotations

from sharemgr.common.outcome import RECORDED, Outcome, Result
from sharemgr.db import api, models, records
from sharemgr.manager.runner import RequestRunner


def _execute(db, handler, req: models.Request) -> None:
    """Run one claimed request as the loop's worker thread does."""
    runner = RequestRunner(db, "e1", ["h@dummy"], lambda _req: handler, workers=1,
                           poll_interval=0.05, any_host=False)
    try:
        runner._execute(req)
    finally:
        for lane in runner.lanes:
            lane.executor.shutdown()


def _claimed(db) -> records.Record:
    with db.session() as session:
        api.request_add_tx(session, "share", "r1", "create", "h@dummy")
    (req,) = api.request_claim(db, ["h@dummy"], "e1", limit=1)
    return req


def test_the_loop_records_the_outcome_unless_the_handler_did(sqlite_db):
    # A handler that is done: the loop records the request done.
    req = _claimed(sqlite_db)
    _execute(sqlite_db, lambda _r: Outcome.done(), req)
    assert api.get(sqlite_db, models.Request, req.id).status == "done"

    # A handler that says it recorded the outcome (a stack check does, in
    # its report's transaction): the loop writes nothing more. This one
    # wrote nothing, so the request is still running.
    req = _claimed(sqlite_db)
    _execute(sqlite_db, lambda _r: RECORDED, req)
    assert api.get(sqlite_db, models.Request, req.id).status == "running"

    # Each outcome of an operation ends its request as REQUEST_ENDS says.
    for outcome, status, error in (
            (Outcome.stale("moved on"), "done", "stale: moved on"),
            (Outcome.lost("taken"), "abandoned", "lost: taken"),
            (Outcome.failed("refused"), "failed", "refused")):
        req = _claimed(sqlite_db)
        _execute(sqlite_db, lambda _r, o=outcome: o, req)
        row = api.get(sqlite_db, models.Request, req.id)
        assert (row.status, row.error) == (status, error)
    req = _claimed(sqlite_db)
    _execute(sqlite_db, lambda _r: Outcome.not_now("not a member"), req)
    row = api.get(sqlite_db, models.Request, req.id)
    assert (row.status, row.error) == ("pending", "given back: not a member")
    # A node's own result no request ends as (a bug): failed, not left running.
    req = _claimed(sqlite_db)
    _execute(sqlite_db, lambda _r: Outcome(Result.REPLAN), req)
    row = api.get(sqlite_db, models.Request, req.id)
    assert (row.status, row.error) == ("failed", "unexpected outcome replan: ")

    # A handler that fails: recorded failed, whatever it would have returned.
    def boom(_r):
        raise RuntimeError("boom")

    req = _claimed(sqlite_db)
    _execute(sqlite_db, boom, req)
    row = api.get(sqlite_db, models.Request, req.id)
    assert row.status == "failed" and "boom" in row.error


def test_a_request_may_take_more_only_in_the_general_lane_while_claiming(sqlite_db):
    """``may_claim``, asked from inside a running request (a stack check's
    report, which takes the next pending check): only a request of the
    general lane (a backend's lane is kept for its backend), only while
    the loop itself would claim — not once stopping, not out of the group."""
    seen: dict[str, bool] = {}
    runner = RequestRunner(sqlite_db, "e1", ["h@dummy"], lambda _req: handler, workers=1,
                           poll_interval=0.05, any_host=True,
                           backend_workers={"dummy": 1})

    def handler(req: models.Request) -> Outcome[object]:
        seen[req.resource_id] = runner.may_claim()
        return Outcome.done()

    member: list[str | None] = [None]
    runner.not_member = lambda: member[0]
    try:
        with sqlite_db.session() as session:
            api.request_add_tx(session, "stack_resource", "general", "check_resource", None)
            api.request_add_tx(session, "share", "backend", "create", "h@dummy")
        general, backend = api.request_claim(sqlite_db, ["h@dummy"], "e1", limit=2)
        runner._execute(general, True)
        runner._execute(backend, False)
        assert seen == {"general": True, "backend": False}
        assert not runner.may_claim()  # not a request's thread of the general lane
        member[0] = "paused"
        runner._execute(general, True)
        assert seen["general"] is False
        member[0] = None
        runner._stopping.set()
        runner._execute(general, True)
        assert seen["general"] is False
    finally:
        for lane in runner.lanes:
            lane.executor.shutdown()
