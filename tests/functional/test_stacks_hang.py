"""Stacks that never hang: the cases that once left a stack IN_PROGRESS
forever, each through real share-manager processes and sharectl; stack
timeouts and ``stack cancel``. On SQLite + file locks, PostgreSQL + Redis
and MariaDB + Redis."""

from __future__ import annotations

import collections

import pytest
from sharemgr.db import stacks

from tests.functional.harness import assert_backend_agrees, database, wait_until
from tests.functional.test_stacks import (
    EMBEDDED,
    MARIADB,
    SERVERS,
    _by_stack_resource,
    _create_calls,
    _gated,
    _rows,
    _settled,
    _stack,
    _write,
)

pytestmark = pytest.mark.functional

ONE_SHARE = """
resources:
  data:
    type: share
    properties: {size: 1, proto: NFS}
"""
SNAPPED = ONE_SHARE + """
  snap:
    type: snapshot
    properties: {share: {get_resource: data}}
"""
# Fast recovery: a short startup wait, a watchdog twice a second, Redis locks
# that expire with the membership.
FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2",
                    "stack_watchdog_interval": "0.5"}}


@pytest.fixture(params=[EMBEDDED, SERVERS, MARIADB])
def setup(request):
    return request.param, request


def _deployment(deployment, setup, backends=None):
    kw = {"extra": FAST, "redis_options": "lock_timeout=3"}
    if backends is not None:
        kw["backends"] = backends
    return _gated(deployment, setup, **kw)


def _calls(d, method):
    return [c for c in d.backend("calls") if c["method"] == method]


def _one_row_each(d, name):
    """The stack's rows, asserting one row per resource name."""
    db, _ = database(d)
    try:
        rows = stacks.resource_list(db, stacks.stack_lookup(db, name).id)
    finally:
        db.dispose()
    names = collections.Counter(r.name for r in rows)
    assert all(n == 1 for n in names.values()), rows
    return {r.name: r for r in rows}


def test_crash_restart_then_update_completes(deployment, setup):
    """Case 1: SIGKILL during a slow create, restart, update at once with the
    same template. The update's check bails on the dead engine's lock while
    the share is 'creating'; reconciliation settles it and the watchdog
    retriggers the node: UPDATE COMPLETE, and --wait returns."""
    d, _gates = _deployment(deployment, setup,
                            backends={"dummy": {"dummy_method_delays": "create_share:5"}})
    d.sync()
    engine = d.start()
    template = _write(d, "one", ONE_SHARE)
    d.sharectl("stack", "create", "web", "-t", template)
    wait_until(lambda: _calls(d, "create_share"), what="the create to reach the driver")
    engine.kill()
    d.start()
    out = d.json("stack", "update", "web", "-t", template, "--wait", "--wait-timeout", "120")
    assert (out["action"], out["status"]) == ("UPDATE", "COMPLETE")
    rows = _one_row_each(d, "web")
    assert rows["data"].status == "COMPLETE"
    objs = _by_stack_resource(d)
    assert list(objs) == ["web-data"] and len(objs["web-data"]) == 1
    assert_backend_agrees(d)


def test_delete_while_no_engine_runs(deployment, setup):
    """Case 2: the create is held at a gate, the manager SIGKILLed there, the
    stack deleted while no manager runs, the gate removed, the manager
    started: the delete completes and the backend is empty."""
    d, gates = _deployment(deployment, setup)
    d.sync()
    engine = d.start()
    (gates / "create_share.web-data-").write_text("")
    d.sharectl("stack", "create", "web", "-t", _write(d, "one", ONE_SHARE))
    wait_until(lambda: _calls(d, "create_share"), what="the create to reach the gate")
    engine.kill()
    d.sharectl("stack", "delete", "web")
    (gates / "create_share.web-data-").unlink()
    d.start()
    wait_until(lambda: _settled(d, "web", "DELETE"), timeout=90, what="the delete")
    stack = _stack(d, "web")
    assert (stack.action, stack.status) == ("DELETE", "COMPLETE")
    assert d.backend("list") == []
    assert_backend_agrees(d)


def test_replacement_cut_by_a_crash_is_cleaned_up(deployment, setup):
    """Case 3: a replacement (proto changes) waits at a gate when the manager
    is SIGKILLed; after the restart the stack ends UPDATE COMPLETE with one
    row for the name, and the cut replacement is gone from the database and
    the backend."""
    d, gates = _deployment(deployment, setup)
    d.sync()
    engine = d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", ONE_SHARE), "--wait")
    first = _rows(d, "web")["data"]
    (gates / "create_share.web-data-").write_text("")
    d.sharectl("stack", "update", "web", "--allow-replace", "-t",
               _write(d, "v2", ONE_SHARE.replace("NFS", "CIFS")))
    wait_until(lambda: len(_calls(d, "create_share")) == 2,
               what="the replacement's create to reach the gate")
    engine.kill()
    (gates / "create_share.web-data-").unlink()
    d.start()
    wait_until(lambda: _settled(d, "web", "UPDATE"), timeout=90, what="the update")
    assert _stack(d, "web").status == "COMPLETE"
    rows = _one_row_each(d, "web")
    assert rows["data"].physical_id != first.physical_id
    assert rows["data"].properties["proto"] == "CIFS"
    objs = d.backend("list")
    assert [(o["share_id"], o["status"]) for o in objs] == [
        (rows["data"].physical_id, "available")]
    db, _ = database(d)
    try:
        from sharemgr.db import api, models
        live = [s.id for s in api.query(db, models.Share)]
    finally:
        db.dispose()
    assert live == [rows["data"].physical_id]  # the cut replacement's share is gone too
    assert_backend_agrees(d)


REPLICATED = ONE_SHARE + "".join(f"""
  r{i}:
    type: replica
    properties: {{share: {{get_resource: data}}}}
""" for i in (1, 2, 3))


def test_sibling_replicas_of_many_stacks(deployment, setup):
    """Case 4: eight stacks of one share and three replicas, created back to
    back, all complete (sibling replicas race to make the share's first
    replica; the loser plans again)."""
    d, _gates = _deployment(deployment, setup)
    d.sections["DEFAULT"]["request_workers"] = "4"
    d.write_config()
    d.sync()
    d.start()
    template = _write(d, "rep", REPLICATED)
    names = [f"s{i}" for i in range(8)]
    for name in names:
        d.sharectl("stack", "create", name, "-t", template)
    for name in names:
        wait_until(lambda n=name: _settled(d, n, "CREATE"), timeout=120,
                   what=f"stack {name}")
    assert {n: _stack(d, n).status for n in names} == dict.fromkeys(names, "COMPLETE")
    made = collections.Counter(n.rsplit("-", 1)[0] for m, n in _create_calls(d)
                               if m == "create_replica")
    assert made == {f"{n}-data": 3 for n in names}
    assert_backend_agrees(d)


def test_timeout_fails_and_rolls_back(deployment, setup):
    """A create held at a gate outlives its --timeout: the watchdog fails it
    ('timed out') and rolls back; once the held call returns, the rollback
    deletes what was made (within the same timeout, which a rollback keeps).
    With --disable-rollback it stays FAILED."""
    d, gates = _deployment(deployment, setup)
    d.sync()
    d.start()
    web_gate, keep_gate = gates / "create_snapshot.web-snap-", gates / "create_snapshot.keep-"
    web_gate.write_text("")
    keep_gate.write_text("")
    template = _write(d, "snapped", SNAPPED)
    d.sharectl("stack", "create", "web", "-t", template, "--timeout", "0.25")
    d.sharectl("stack", "create", "keep", "-t", template, "--timeout", "0.05",
               "--disable-rollback")
    wait_until(lambda: _settled(d, "keep", "CREATE"), timeout=60, what="the timeout of keep")
    assert "timed out after 0.05 minute(s)" in _stack(d, "keep").status_reason
    keep_gate.unlink()
    wait_until(lambda: _stack(d, "web").action == "ROLLBACK", timeout=60,
               what="the timeout of web")
    web_gate.unlink()
    wait_until(lambda: _settled(d, "web", "ROLLBACK"), timeout=60, what="the rollback")
    web = _stack(d, "web")
    assert web.status == "COMPLETE", web.status_reason
    assert "timed out after 0.25 minute(s)" in web.status_reason
    keep = _stack(d, "keep")
    assert (keep.action, keep.status) == ("CREATE", "FAILED")
    wait_until(lambda: _rows(d, "keep")["snap"].status != "IN_PROGRESS",
               what="keep's held create to end")
    assert sorted(_by_stack_resource(d)) == ["keep-data", "keep-snap"]
    assert_backend_agrees(d)


def test_cancel_rolls_back_or_leaves_failed(deployment, setup):
    """``stack cancel`` while a create waits at a gate: the traversal stops
    (the snapshot is never made) and rolls back; with --no-rollback the stack
    is FAILED and stays so."""
    d, gates = _deployment(deployment, setup)
    d.sync()
    d.start()
    (gates / "create_share").write_text("")
    template = _write(d, "snapped", SNAPPED)
    d.sharectl("stack", "create", "web", "-t", template)
    d.sharectl("stack", "create", "keep", "-t", template)
    wait_until(lambda: len(_calls(d, "create_share")) == 2, what="both creates at the gate")
    out = d.json("stack", "cancel", "keep", "--no-rollback")
    assert (out["action"], out["status"]) == ("CREATE", "FAILED")
    assert "cancelled" in out["status_reason"]
    d.sharectl("stack", "cancel", "web")
    assert _stack(d, "web").action == "ROLLBACK"
    (gates / "create_share").unlink()
    wait_until(lambda: _settled(d, "web", "ROLLBACK"), timeout=60, what="the rollback")
    assert _stack(d, "web").status == "COMPLETE"
    again = d.sharectl("stack", "cancel", "keep", check=False)
    assert again.returncode == 2 and "nothing to cancel" in again.stderr
    wait_until(lambda: _rows(d, "keep")["data"].status != "IN_PROGRESS",
               what="keep's held create to end")
    assert _stack(d, "keep").status == "FAILED"
    assert _calls(d, "create_snapshot") == []
    assert sorted(_by_stack_resource(d)) == ["keep-data"]
    assert_backend_agrees(d)
