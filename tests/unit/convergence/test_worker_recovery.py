"""The check-resource workflow in one process (tests/unit/stack_rig.py) when
things overlap or go wrong: an update while a create is held, dead and leaked
locks, crashes, failures with and without rollback, unexpected errors, the
watchdog, nodes cut before their driver call, and claims that no longer fit
(the normal workflow: test_worker.py)."""

from __future__ import annotations

from sharemgr.convergence import actions, lifecycle, preview
from sharemgr.convergence import physical as phys
from sharemgr.db import api, models, resource_locks, stack_work, stacks
from sharemgr.reconcile.reconciler import Reconciler

from tests.unit.stack_rig import HOST, V1, Rig, _add, _creates, _one_each, _status


def test_update_while_create_is_held_at_a_gate(rig):
    """The create of 'data' waits at a gate while the stack is updated to a
    template without 'snap' and with 'logs'; the holder finishes, retriggers
    'data' in the new traversal, which extends it: every resource once."""
    a, b = rig.engine(), rig.engine()
    gate = rig.gate("create_share.web-data-")
    rig.create("web", V1)
    thread, _ = a.run_in_thread()
    _wait(lambda: any(c["method"] == "create_share" for c in rig.calls()))

    rig.update("web", """
resources:
  data: {type: share, properties: {size: 2, proto: NFS}}
  logs: {type: share, properties: {size: 1, proto: NFS}}
""")
    b.pump()  # data's new check bails (a holds it), snap's row is cleaned up, logs made
    bailed = [r for r in rig.checks() if "locked by live engine" in (r.error or "")]
    assert len(bailed) == 1 and bailed[0].args["resource_id"] == rig.rows("web")["data"][0].id
    assert _status(rig, "web") == ("UPDATE", "IN_PROGRESS")

    gate.unlink()
    thread.join(30)
    b.pump()
    assert _status(rig, "web") == ("UPDATE", "COMPLETE")
    assert _one_each(rig) == ["web-data", "web-logs"]
    assert {o["name"].rsplit("-", 1)[0]: o["size"] for o in rig.objects()}["web-data"] == 2
    assert not any(c["method"] == "create_snapshot" for c in rig.calls())
    assert set(rig.rows("web")) == {"data", "logs"}


def test_dead_engines_lock_is_broken(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    data = rig.rows("web")["data"][0]
    ghost = f"{HOST}.00000000-0000-0000-0000-000000000000"
    assert resource_locks.resource_lock_acquire(rig.db, data.id, ghost).acquired
    rig.update("web", V1.replace("size: 1", "size: 2"))
    e.pump()
    assert _status(rig, "web") == ("UPDATE", "COMPLETE")
    row = stacks.resource_get(rig.db, data.id)
    assert row.engine_id is None and row.properties["size"] == 2


def test_crash_after_begin_is_settled_then_retriggered(rig):
    """What a SIGKILL leaves after a check started a create: the row CREATE
    IN_PROGRESS locked by the dead engine, the share 'creating', its
    operation and the check request running for the dead engine. The
    watchdog waits for reconciliation (and asks for a pass), abandons the
    dead engine's request, then retriggers the node; the share is made once."""
    e = rig.engine()
    rig.create("web", V1)
    ghost = f"{HOST}.11111111-1111-1111-1111-111111111111"
    (leaf,) = api.request_claim(rig.db, e.hosts, ghost, 1)
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, ghost).acquired
    stack = rig.stack("web")
    props = {"size": 1, "proto": "NFS"}
    plan = phys.plan_create(rig.db, "share", props, "web-data-dead", e.worker.placement)
    begun = stack_work.begin(
        rig.db,
        data.id,
        ghost,
        stack.id,
        stack.current_traversal,
        stack_work.Begin(
            "CREATE",
            {"physical_id": plan.physical_id, "properties": props},
            plan.add,
            plan.changes,
            plan.op.request({}),
        ),
    )
    assert isinstance(begun, stack_work.Begun)

    # Another check of the node bails: dead holder, physical still creating.
    with rig.db.session() as session:
        from sharemgr.convergence import prepare
        prepare.enqueue_check_tx(session, stack.id, stack.current_traversal, (data.id, True), {})
    e.pump()
    assert "reconciliation settles it" in rig.checks()[0].error
    counts = e.watchdog.run_once()
    assert (counts["waiting"], counts["retriggered"], counts["abandoned"]) == (1, 0, 1)
    assert counts["passes_requested"] == 1

    Reconciler(rig.db, e.drivers, e.coordinator, e.operations, HOST, e.engine_id, 2).run()
    assert e.watchdog.run_once()["retriggered"] == 1
    assert e.watchdog.run_once()["retriggered"] == 0  # its request is pending: live
    old = api.request_list(rig.db, resource_id=str(data.id))
    assert any(r.id == leaf.id and r.status == "abandoned" for r in old)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    assert _one_each(rig) == ["web-data", "web-snap"]
    # The errored share of the dead engine was replaced and cleaned up.
    assert len(rig.rows("web")["data"]) == 1
    assert rig.rows("web")["data"][0].physical_id != plan.physical_id


def test_failure_without_rollback_stops_the_traversal(tmp_path):
    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_snapshot"}})
    try:
        e = rig.engine()
        rig.create("web", _add(V1, "more: {type: share, properties: {size: 1, proto: NFS}}"),
                   disable_rollback=True)
        e.pump()
        stack = rig.stack("web")
        assert (stack.action, stack.status) == ("CREATE", "FAILED")
        assert "create_snapshot" in stack.status_reason and "snap" in stack.status_reason
        rows = rig.rows("web")
        failed = [r for v in rows.values() for r in v if r.status == "FAILED"]
        assert failed and failed[0].status_reason
        assert not rig.checks("pending")
        # On demand: roll back to nothing (no template ever completed).
        rig.start("web", "ROLLBACK")
        e.pump()
        assert _status(rig, "web") == ("ROLLBACK", "COMPLETE")
        assert rig.objects() == []
    finally:
        rig.close()


def test_failed_update_rolls_back_to_the_replaced_row(tmp_path):
    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_share.web-bad-"}})
    try:
        e = rig.engine()
        rig.create("web", V1)
        e.pump()
        before = {n: (v[0].id, v[0].physical_id) for n, v in rig.rows("web").items()}
        rig.update("web", _add(V1.replace("proto: NFS", "proto: CIFS"),
                               "bad: {type: share, properties: {size: 1, proto: NFS}, "
                               "depends_on: [snap]}"))
        e.pump()
        stack = rig.stack("web")
        assert (stack.action, stack.status) == ("ROLLBACK", "COMPLETE")
        assert "bad" in stack.status_reason
        after = {n: (v[0].id, v[0].physical_id) for n, v in rig.rows("web").items()}
        assert after == before  # the original rows and physical resources are back
        assert _one_each(rig) == ["web-data", "web-snap"]
        assert {o["kind"]: o["status"] for o in rig.objects()} == {
            "share": "available", "snapshot": "available"}
        # The rollback purged the failed update's template; SQLite gives its
        # id to the next one, which must not be mistaken for it.
        rig.create("other", V1.replace("data", "main"))
        e.pump()
        assert _status(rig, "other") == ("CREATE", "COMPLETE")
    finally:
        rig.close()


def test_a_failed_resize_is_never_undone_by_replacing_the_share(tmp_path):
    """A shrink the backend refuses leaves the share shrinking_error, its data
    there: the rollback to the old size must not replace it (a new, empty
    share and the old one deleted, as it did), nor may a later update; each
    fails on it, saying how to reset it, and the share is the same one."""
    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "shrink_share"}})
    try:
        e = rig.engine()
        two = "resources:\n  vol: {type: share, properties: {size: 2, proto: NFS}}\n"
        rig.create("shr", two)
        e.pump()
        (vol,) = rig.rows("shr")["vol"]
        rig.update("shr", two.replace("size: 2", "size: 1"))
        e.pump()
        stack = rig.stack("shr")
        assert (stack.action, stack.status) == ("ROLLBACK", "FAILED")
        assert "shrinking_error" in stack.status_reason
        assert f"share reset-state {vol.physical_id}" in stack.status_reason
        assert [r.physical_id for r in rig.rows("shr")["vol"]] == [vol.physical_id]
        assert [(o["kind"], o["status"]) for o in rig.objects()] == [("share", "available")]
        assert [c["method"] for c in rig.calls()].count("create_share") == 1
        assert api.get(rig.db, models.Share, vol.physical_id) is not None
        # The preview says so too, and the next update fails the same way.
        changes = {c.name: c for c in preview.preview(
            rig.db, actions.load_template(two, rig.backends),
            actions.current_rows(rig.db, rig.stack("shr"))).changes}
        assert changes["vol"].change == preview.UNKNOWN
        assert "shrinking_error" in changes["vol"].reason
        rig.update("shr", two)
        e.pump()
        assert rig.stack("shr").status == "FAILED"
        assert [r.physical_id for r in rig.rows("shr")["vol"]] == [vol.physical_id]
    finally:
        rig.close()


def test_unexpected_error_fails_the_stack(rig, monkeypatch):
    e = rig.engine()

    def boom(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(phys, "plan_create", boom)
    rig.create("web", V1, disable_rollback=True)
    e.pump()
    stack = rig.stack("web")
    assert stack.status == "FAILED" and "a bug" in stack.status_reason


def test_check_goes_to_an_engine_of_the_backend(tmp_path):
    backends = {"b1": {"share_driver": "dummy"}, "b2": {"share_driver": "dummy"}}
    rig = Rig(tmp_path, backends=backends)
    try:
        one = rig.engine(backends={"b1": backends["b1"]})
        two = rig.engine(host="hostB", backends={"b2": backends["b2"]})
        rig.create("web", """
resources:
  x: {type: share, properties: {size: 1, proto: NFS, backend: b2}}
  y: {type: snapshot, properties: {share: {get_resource: x}}}
""")
        assert one.pump() == 1  # forwarded, not run
        forwarded = rig.checks()[-1]  # oldest: the leaf
        assert forwarded.error.startswith("stale: forwarded to *@b2")
        assert one.pump() == 0
        two.pump()
        assert _status(rig, "web") == ("CREATE", "COMPLETE")
        assert {o["kind"] for o in rig.objects("b2")} == {"share", "snapshot"}
        assert rig.objects("b1") == []
        data = rig.rows("web")["x"][0]
        assert phys.observe(rig.db, "share", data.physical_id).host == "hostB@b2"
    finally:
        rig.close()


def _wait(predicate, timeout=20):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_watchdog_fails_a_node_whose_checks_keep_failing(rig):
    """Three failed check requests of one node (errors a check could not even
    record) fail the stack instead of another retry."""
    e = rig.engine()
    rig.create("web", V1.replace("size: 1", "size: 1, name: x"))
    runs = []
    for _ in range(3):
        (req,) = e.claim()
        api.request_finish(rig.db, req.id, e.engine_id, "failed", "OperationalError: gone")
        runs.append(e.watchdog.run_once())
    assert [(r["retriggered"], r["failed_stacks"]) for r in runs] == [(1, 0), (1, 0), (0, 1)]
    stack = rig.stack("web")
    assert (stack.action, stack.status) == ("ROLLBACK", "IN_PROGRESS")
    assert "failed 3 times: OperationalError: gone" in stack.status_reason
    e.pump()
    assert _status(rig, "web") == ("ROLLBACK", "COMPLETE")


def test_watchdog_tidies_a_dead_engines_row_on_a_failed_stack(rig):
    """A dead engine's check was cut short (row CREATE IN_PROGRESS, locked)
    and the stack failed before anything retriggered it: the watchdog marks
    the row FAILED and drops the dead lock."""
    e = rig.engine()
    rig.create("web", V1)
    data = rig.rows("web")["data"][0]
    ghost = f"{HOST}.22222222-2222-2222-2222-222222222222"
    assert resource_locks.resource_lock_acquire(rig.db, data.id, ghost).acquired
    assert stacks.resource_set_state(rig.db, data.id, ghost, "CREATE", "IN_PROGRESS")
    stack = rig.stack("web")
    assert lifecycle.fail(rig.db, stack.id, stack.current_traversal, "boom", rollback=False)
    assert e.watchdog.run_once()["tidied"] == 1
    row = stacks.resource_get(rig.db, data.id)
    assert (row.action, row.status, row.engine_id) == ("CREATE", "FAILED", None)
    assert "cut short by the death of engine" in row.status_reason


def test_watchdog_tidies_a_cut_row_left_unlocked_on_a_timed_out_stack(rig):
    """A check cut by a partition left its row CREATE IN_PROGRESS; a later
    check took over the leaked lock, found the stack's traversal over (it
    had timed out) and let the lock go: nobody holds the row and nobody
    will end its action. The watchdog marks it FAILED (seen in a fault run:
    the stack settled only when the user deleted it again)."""
    e = rig.engine()
    rig.create("web", V1)
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, e.engine_id).acquired
    assert stacks.resource_set_state(rig.db, data.id, e.engine_id, "CREATE", "IN_PROGRESS")
    assert resource_locks.resource_lock_release(rig.db, data.id, e.engine_id)
    stack = rig.stack("web")
    assert lifecycle.fail(rig.db, stack.id, stack.current_traversal, "timed out",
                          rollback=False)
    assert e.watchdog.run_once()["tidied"] == 1
    row = stacks.resource_get(rig.db, data.id)
    assert (row.action, row.status, row.engine_id) == ("CREATE", "FAILED", None)
    assert "cut short by a pause or partition" in row.status_reason


def _own_row_on_a_failed_stack(rig):
    """A row CREATE IN_PROGRESS, locked by engine ``e``, on a stack whose
    traversal was cancelled: the engine and the row."""
    e = rig.engine()
    rig.create("web", V1)
    data = rig.rows("web")["data"][0]
    assert resource_locks.resource_lock_acquire(rig.db, data.id, e.engine_id).acquired
    assert stacks.resource_set_state(rig.db, data.id, e.engine_id, "CREATE", "IN_PROGRESS")
    stack = rig.stack("web")
    assert lifecycle.fail(rig.db, stack.id, stack.current_traversal, "cancelled",
                          rollback=False)
    return e, data


def test_watchdog_tidies_a_row_its_own_cut_check_left_locked_on_a_failed_stack(rig):
    """A check of this engine was cut (``Actor.cut``: the resource taken
    over while the driver worked) after the user had deleted the stack and
    cancelled the delete: the row stays CREATE IN_PROGRESS, locked by this
    live engine though no check of it holds the lock, and the watchdog
    retriggers nothing on a FAILED stack. Each engine skipped it (its own
    lock; a live engine's): the row stayed busy until the next user action
    (seen in a CI fault run). Its lock is a leaked one: tidied."""
    e, data = _own_row_on_a_failed_stack(rig)
    other = rig.engine()  # a live peer leaves a live engine's row alone
    assert other.watchdog.run_once()["tidied"] == 0
    assert e.watchdog.run_once()["tidied"] == 1
    row = stacks.resource_get(rig.db, data.id)
    assert (row.action, row.status, row.engine_id) == ("CREATE", "FAILED", None)
    assert "cut short by a pause or partition" in row.status_reason


def test_watchdog_leaves_a_row_its_own_check_is_still_working_on(rig):
    """The same row while a check of this engine holds it (the tracker says
    so): not tidied, its check ends it."""
    e, data = _own_row_on_a_failed_stack(rig)
    e.worker.locks.tracker.claim(data.id)
    try:
        assert e.watchdog.run_once()["tidied"] == 0
    finally:
        e.worker.locks.tracker.unclaim(data.id)
    row = stacks.resource_get(rig.db, data.id)
    assert (row.status, row.engine_id) == ("IN_PROGRESS", e.engine_id)


def test_a_check_waits_for_the_row_its_engines_watchdog_is_tidying(rig, monkeypatch):
    """While the watchdog tidies a row (its lock taken), a check of the same
    engine finding the engine's own lock does not take it over as leaked:
    the tidy holds it (the tracker says so), and would release it under
    the check."""
    e, data = _own_row_on_a_failed_stack(rig)
    real = stacks.resource_get
    seen: list[str | None] = []

    def read_while_a_check_comes(db, rid):
        if not seen:
            seen.append(e.worker.locks.take(rid, real(db, rid)))
        return real(db, rid)

    monkeypatch.setattr(stacks, "resource_get", read_while_a_check_comes)
    assert e.watchdog.run_once()["tidied"] == 1
    assert seen and seen[0] is not None and "locked by live engine" in seen[0]
    row = real(rig.db, data.id)
    assert (row.status, row.engine_id) == ("FAILED", None)


def _share_op_requests(rig, e):
    """The share operations' requests (the stack's own checks left out)."""
    return [r for r in api.request_list(rig.db) if r.action != "check_resource"]


def test_a_node_cut_before_its_driver_call_is_not_the_stacks_failure(rig):
    """Out of the engines group when its create was about to reach the
    driver (issue 27): the operation is given back for a member to run and
    the node waits for the watchdog, its row lock held so that no check
    finds the share busy; the stack completes, nothing is made twice."""

    e = rig.engine()
    e.operations.not_member = lambda: "its membership expired"
    rig.create("web", V1)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "IN_PROGRESS")
    (op,) = _share_op_requests(rig, e)
    assert (op.status, op.engine_id) == ("pending", None) and "given back" in op.error
    data = rig.rows("web")["data"][0]
    assert stacks.resource_get(rig.db, data.id).engine_id == e.engine_id
    # A duplicate check bails instead of failing the stack on a busy share.
    with rig.db.session() as session:
        from sharemgr.convergence import prepare
        stack = rig.stack("web")
        prepare.enqueue_check_tx(session, stack.id, stack.current_traversal, (data.id, True), {})
    e.pump()
    assert "cut check of this engine" in rig.checks()[0].error
    assert e.watchdog.run_once()["waiting"] == 1
    assert stacks.resource_get(rig.db, data.id).engine_id == e.engine_id

    e.operations.not_member = lambda: None  # rejoined: the runner runs the operation
    (claimed,) = api.request_claim(rig.db, e.hosts, e.engine_id, 1)
    e.operations.handle(claimed)
    api.request_finish(rig.db, claimed.id, e.engine_id, "done", None)
    assert e.watchdog.run_once()["retriggered"] == 1
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    assert _one_each(rig) == ["web-data", "web-snap"]
    assert [m for m, _ in _creates(rig)] == ["create_share", "create_snapshot"]


def test_a_node_whose_resource_was_taken_over_waits_for_it(rig, monkeypatch):
    """A create whose share a reconciliation took while the driver worked:
    its outcome is not written (Lost), its request abandoned; the stack does
    not fail: the watchdog retriggers the node once the share has settled,
    and the check completes it with the share the backend made."""
    from sharemgr.db import leases as db_leases
    from sharemgr.db import models

    e = rig.engine()
    real = e.drivers["dummy"].create_share

    def create_then_taken(share, *args, **kwargs):
        out = real(share, *args, **kwargs)
        db_leases.take_rows(rig.db, models.ShareInstance, {share["id"]: "creating"})
        return out

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create_then_taken)
    rig.create("web", V1)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "IN_PROGRESS")
    (op,) = _share_op_requests(rig, e)
    assert op.status == "abandoned" and op.error.startswith("lost:")
    monkeypatch.setattr(e.drivers["dummy"], "create_share", real)
    # The take-over's pass settles the share from the backend: it exists.
    Reconciler(rig.db, e.drivers, e.coordinator, e.operations, HOST, e.engine_id, 2).run()
    assert e.watchdog.run_once()["retriggered"] == 1
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    assert _one_each(rig) == ["web-data", "web-snap"]
    assert [m for m, _ in _creates(rig)] == ["create_share", "create_snapshot"]


def test_a_delete_cut_before_its_driver_call_leaves_nothing_deleting(rig):
    """What a 1,000-kill chaos run found (doc/chaos.rst): a stack DELETE
    whose snapshot delete met the engine out of the group (its membership
    check starved under load) failed the stack and left the snapshot
    'deleting' with no request to finish it. Now the delete is given back,
    runs, and the stack's delete completes."""
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    e.operations.not_member = lambda: "the coordination backend has not answered for 2s"
    rig.start("web", "DELETE")
    e.pump()
    assert _status(rig, "web") == ("DELETE", "IN_PROGRESS")
    (op,) = [r for r in _share_op_requests(rig, e) if r.status == "pending"]
    assert op.action == "delete" and "given back" in op.error
    e.operations.not_member = lambda: None
    (claimed,) = api.request_claim(rig.db, e.hosts, e.engine_id, 1)
    e.operations.handle(claimed)
    api.request_finish(rig.db, claimed.id, e.engine_id, "done", None)
    for _ in range(3):  # the snapshot's node, then the share's
        e.watchdog.run_once()
        e.pump()
    assert _status(rig, "web") == ("DELETE", "COMPLETE")
    assert rig.objects() == []


def test_a_claim_that_no_longer_fits_fails_the_node(tmp_path, monkeypatch):
    """Two 60 GiB shares of a stack in a 100 GiB pool, planned from a read
    that missed the other's placement (as two engines planning at once
    would): the claim in begin's transaction refuses the second, which
    fails with the reason; one share only reaches the backend."""
    from sharemgr.db import capabilities as db_capabilities
    from sharemgr.db import capacity as db_capacity
    from sharemgr.manager import plans

    rig = Rig(tmp_path, backends={"dummy": {"dummy_pools": "p:100"}})
    try:
        e = rig.engine()
        db_capabilities.save(rig.db, f"{HOST}@dummy", {"pools": [
            {"pool_name": "p", "total_capacity_gb": 100, "free_capacity_gb": 100}]}, "e")
        db_capabilities._cache.clear()
        monkeypatch.setattr(plans.db_capacity, "usage", lambda _db, hosts, _since: {
            h: db_capacity.Usage() for h in hosts})
        rig.create("big", """
resources:
  one: {type: share, properties: {size: 60, proto: NFS}}
  two: {type: share, properties: {size: 60, proto: NFS}}
""", disable_rollback=True)
        e.pump()
        assert _status(rig, "big") == ("CREATE", "FAILED")
        reasons = [r.status_reason for v in rig.rows("big").values() for r in v
                   if r.status == "FAILED"]
        assert len(reasons) == 1 and "60 GiB does not fit in pool" in reasons[0], reasons
        assert len([o for o in rig.objects() if o["kind"] == "share"]) == 1
    finally:
        rig.close()


def test_watchdog_tidies_at_once_when_a_stack_it_watched_ends(rig):
    """Not only every TIDY_EVERY runs: the run after a stack it saw IN_PROGRESS
    ended looks for rows left behind (a chaos run's row stayed IN_PROGRESS
    past the run's settle bound, waiting for the twelfth run)."""
    e = rig.engine()
    rig.create("web", V1)
    assert e.watchdog.run_once()["tidied"] == 0  # the first run: nothing left yet
    data = rig.rows("web")["data"][0]
    ghost = f"{HOST}.33333333-3333-3333-3333-333333333333"
    assert resource_locks.resource_lock_acquire(rig.db, data.id, ghost).acquired
    assert stacks.resource_set_state(rig.db, data.id, ghost, "CREATE", "IN_PROGRESS")
    assert e.watchdog.run_once()["tidied"] == 0  # still IN_PROGRESS: its node may come
    stack = rig.stack("web")
    assert lifecycle.fail(rig.db, stack.id, stack.current_traversal, "boom", rollback=False)
    assert e.watchdog.run_once()["tidied"] == 1
    row = stacks.resource_get(rig.db, data.id)
    assert (row.action, row.status, row.engine_id) == ("CREATE", "FAILED", None)


def test_a_node_whose_row_lock_was_taken_while_the_driver_worked_bails(rig, monkeypatch):
    """A replacement's create whose row lock another engine took meanwhile
    (its watchdog judged this engine dead): the row's end is not written, so
    the node does not report done either — the stack waits for the row's
    new holder instead of completing around a row still IN_PROGRESS."""
    one = "resources:\n  data: {type: share, properties: {size: 1, proto: NFS}}\n"
    e = rig.engine()
    rig.create("web", one)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    (old,) = rig.rows("web")["data"]
    ghost = f"{HOST}.00000000-0000-0000-0000-000000000000"
    real = e.drivers["dummy"].create_share

    def create_then_stolen(share, *args, **kwargs):
        out = real(share, *args, **kwargs)
        for row in rig.rows("web")["data"]:
            if row.id != old.id:  # the replacement, begun and locked by this engine
                assert resource_locks.resource_lock_steal(rig.db, row.id, ghost,
                                                          e.engine_id).acquired
        return out

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create_then_stolen)
    rig.update("web", one.replace("NFS", "CIFS"))
    e.pump()
    assert _status(rig, "web") == ("UPDATE", "IN_PROGRESS")
    new = [r for r in rig.rows("web")["data"] if r.id != old.id]
    assert [(r.engine_id, r.status) for r in new] == [(ghost, "IN_PROGRESS")]


def test_a_delete_whose_row_went_after_its_begin_bails_without_a_traceback(rig, monkeypatch,
                                                                            caplog):
    """Paused between its begin and its driver call, the engine lost the
    row to another, which deleted it and purged it (the fault run, seed
    5130): the node is cut, not failed with a bug's traceback."""
    from sharemgr.convergence.worker import GENERAL_PATH, Worker
    from sharemgr.db import models

    one = "resources:\n  data: {type: share, properties: {size: 1, proto: NFS}}\n"
    e = rig.engine()
    rig.create("web", one)
    e.pump()
    monkeypatch.setattr(Worker, "_fast_delete", lambda *a: GENERAL_PATH)
    real = stack_work.begin

    def begun_then_purged(db, rid, *args, **kwargs):
        out = real(db, rid, *args, **kwargs)
        with db.session() as session:
            session.delete(session.get(models.StackResource, rid))
        return out

    monkeypatch.setattr(stack_work, "begin", begun_then_purged)
    rig.start("web", "DELETE")
    e.pump()
    assert _status(rig, "web") == ("DELETE", "IN_PROGRESS")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    (op,) = [r for r in _share_op_requests(rig, e) if r.action == "delete"]
    assert op.status == "abandoned" and "gone after its begin" in op.error
