"""Startup reconciliation (doc/specs.rst, spec 002 and architecture §6): every resource type ×
every transient status of its row × every backend answer, against a real
database, a real tooz file coordinator, real Operations and Reconciler, and a
fake driver programmed per test.

The expected outcomes are the spec's table as the harness writes it
(``EXPECTED``), not read from ``reconcile/rules.py``: the first tests check
that the rules data says the same thing, the others that a pass does it.
"""

from __future__ import annotations

import types

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.db import reconcile as db_rec
from sharemgr.reconcile import rules

from tests.unit.reconcile_harness import (
    ANSWERS,
    BACKEND_SIZE,
    DELETE_METHOD,
    EXCLUDED,
    EXPECTED,
    HEALTHY,
    HOST,
    HOSTBE,
    STAGE_ORDER,
    STATUS_METHOD,
    D,
    Engine,
    K,
    Literal,
    Q,
    add_request,
    coord_url,
    engine_id,
    export_path,
    fetch,
    make,
    make_share,
    request_row,
)

QUERY_CASES = [(t, s) for t, rows in EXPECTED.items() for s, (a, _) in rows.items() if a == Q]
DELETE_CASES = [(t, s) for t, rows in EXPECTED.items() for s, (a, _) in rows.items() if a == D]
MARK_CASES = [(t, s) for t, rows in EXPECTED.items() for s, (a, _) in rows.items() if a == K]


@pytest.fixture
def any_engine(db, tmp_path):
    """The same engine on SQLite, PostgreSQL and MariaDB."""
    eng = Engine(db, coord_url(tmp_path))
    yield eng
    eng.close()
    assert eng.forbidden_calls() == []


def _nothing_else(result, failures=0):
    assert result["skipped"] == {}
    assert result["failures"] == failures
    assert result["abandoned_requests"] == 0


# The rules data ------------------------------------------------------------------


def test_rules_data_is_the_spec_table():
    got = {t: {s: (r.action, r.error) for s, r in rows.items()} for t, rows in rules.RULES.items()}
    assert got == EXPECTED
    for rtype, rows in rules.RULES.items():
        for status, rule in rows.items():
            if rule.action == rules.QUERY:
                assert (rule.ok, rule.method) == (vocab.AVAILABLE, STATUS_METHOD[rtype]), \
                    (rtype, status)
            elif rule.action == rules.DELETE:
                assert rule.ok == vocab.DELETED, (rtype, status)
    assert tuple(rules.STAGES) == STAGE_ORDER


@pytest.mark.parametrize("rtype", STAGE_ORDER)
def test_every_transient_status_is_settled_or_excluded(rtype):
    transient = {s for s in vocab.VALID_STATUSES[rtype] if s in vocab.TRANSIENT_STATUSES}
    assert transient == set(EXPECTED[rtype]) | EXCLUDED[rtype]
    assert not set(EXPECTED[rtype]) & EXCLUDED[rtype]


# Query the backend and converge ---------------------------------------------------


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("rtype,status", QUERY_CASES)
def test_query_rule(engine, rtype, status, answer):
    db = engine.db
    row = make(db, rtype, status)
    other = make(db, rtype, vocab.AVAILABLE)  # settled: never looked at
    engine.driver.answer = answer

    result = engine.run()

    after = fetch(db, rtype, row.id)
    healthy = answer == HEALTHY
    expected = vocab.AVAILABLE if healthy else EXPECTED[rtype][status][1]
    assert after.status == expected
    assert after.deleted_at is None
    assert engine.driver.calls == [(STATUS_METHOD[rtype], row.id)]
    assert fetch(db, rtype, other.id).status == vocab.AVAILABLE
    assert result["outcomes"] == {rtype: {expected: 1}}
    _nothing_else(result)

    if rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
        share = api.get(db, models.Share, after.share_id)
        # A resize's, or a managed share's (the backend alone knows it).
        sized = healthy and status in (vocab.EXTENDING, vocab.SHRINKING, vocab.MANAGING)
        assert share.size == (BACKEND_SIZE if sized else 5)
        if healthy:
            assert after.export_locations == [{
                "path": export_path(row.id), "is_admin_only": False,
                "preferred": rtype == vocab.SHARE_INSTANCE,
            }]
        else:
            assert after.export_locations == []
    if rtype == vocab.REPLICA:
        # The backend's replica state when healthy; error otherwise.
        expected = vocab.REPLICA_OUT_OF_SYNC if healthy else vocab.REPLICA_ERROR
        assert after.replica_state == expected
    if rtype == vocab.SNAPSHOT_INSTANCE:
        assert after.progress == ("100%" if healthy else "0%")
        if status == vocab.MANAGING:
            snap = api.get(db, models.ShareSnapshot, after.snapshot_id)
            assert snap.size == (1 if healthy else 5)  # the backend's answer: 1 GiB


@pytest.mark.parametrize("status,error", [(vocab.EXTENDING, vocab.EXTENDING_ERROR),
                                          (vocab.SHRINKING, vocab.SHRINKING_ERROR)])
@pytest.mark.parametrize("size,written", [(3, 3), (12, 12), ("12", 12), (12.0, 12), (1, 1)])
def test_resize_writes_the_backend_size_whichever_way_it_went(engine, status, error, size,
                                                              written):
    inst = make_share(engine.db, status, size=5)
    engine.driver.answers[inst.id] = Literal({"status": vocab.AVAILABLE, "size": size,
                                              "export_locations": []})
    engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.AVAILABLE
    assert api.get(engine.db, models.Share, inst.share_id).size == written


@pytest.mark.parametrize("status,error", [(vocab.EXTENDING, vocab.EXTENDING_ERROR),
                                          (vocab.SHRINKING, vocab.SHRINKING_ERROR)])
@pytest.mark.parametrize("size", [None, "lots", -1, 0, 12.5, True, [12]])
def test_resize_without_a_usable_size_is_the_error_outcome(engine, status, error, size):
    """The size is what a resize query is for: without it the database cannot be
    made to match the backend."""
    inst = make_share(engine.db, status, size=5)
    answer = {"status": vocab.AVAILABLE, "export_locations": []}
    if size is not None:
        answer["size"] = size
    engine.driver.answers[inst.id] = Literal(answer)
    result = engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == error
    assert api.get(engine.db, models.Share, inst.share_id).size == 5
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {error: 1}}
    assert result["failures"] == 0


@pytest.mark.parametrize("rtype", [vocab.SHARE_INSTANCE, vocab.REPLICA])
@pytest.mark.parametrize("locations", [
    [{"no_path": "x"}], 7, [None], "10.0.0.1:/x",
], ids=["dict-without-path", "not-a-list", "none-item", "bare-string"])
def test_unusable_export_locations_are_the_error_outcome(engine, rtype, locations):
    """A healthy status with export locations the manager cannot record is an
    unusable answer: the error outcome, not a crash that leaves the resource
    in creating for ever."""
    row = make(engine.db, rtype, vocab.CREATING)
    engine.driver.answers[row.id] = Literal({"status": vocab.AVAILABLE, "size": 5,
                                             "export_locations": locations})
    result = engine.run()
    assert fetch(engine.db, rtype, row.id).status == vocab.ERROR
    assert result["outcomes"] == {rtype: {vocab.ERROR: 1}}
    assert result["failures"] == 0


def test_export_locations_as_plain_paths_are_recorded(engine):
    inst = make_share(engine.db, vocab.CREATING)
    engine.driver.answers[inst.id] = Literal({"status": vocab.AVAILABLE, "size": 5,
                                              "export_locations": ["10.0.0.9:/p"]})
    engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).export_locations == [
        {"path": "10.0.0.9:/p", "is_admin_only": False, "preferred": False}]


@pytest.mark.parametrize("reported,written", [
    (None, vocab.REPLICA_IN_SYNC),
    (vocab.REPLICA_IN_SYNC, vocab.REPLICA_IN_SYNC),
    (vocab.REPLICA_OUT_OF_SYNC, vocab.REPLICA_OUT_OF_SYNC),
    # A secondary being created never becomes the active replica: that is a
    # promotion, and two active instances would break the share.
    (vocab.REPLICA_ACTIVE, vocab.REPLICA_OUT_OF_SYNC),
    ("bogus", vocab.REPLICA_OUT_OF_SYNC),
])
def test_replica_state_of_a_created_replica(engine, reported, written):
    rep = make(engine.db, vocab.REPLICA, vocab.CREATING)
    engine.driver.replica_state = reported
    engine.run()
    after = fetch(engine.db, vocab.REPLICA, rep.id)
    assert (after.status, after.replica_state) == (vocab.AVAILABLE, written)


@pytest.mark.parametrize("status", ["creating", "extending", "deleting", "", 0])
def test_a_backend_status_other_than_healthy_is_the_error_outcome(engine, status):
    inst = make_share(engine.db, vocab.CREATING)
    engine.driver.answers[inst.id] = Literal({"status": status, "size": 5,
                                              "export_locations": ["p"]})
    engine.run()
    assert fetch(engine.db, vocab.SHARE_INSTANCE, inst.id).status == vocab.ERROR


# Retry the delete ------------------------------------------------------------------


@pytest.mark.parametrize("succeeds", [True, False], ids=["succeeds", "fails"])
@pytest.mark.parametrize("rtype,status", DELETE_CASES)
def test_delete_rule(engine, rtype, status, succeeds):
    db = engine.db
    row = make(db, rtype, status)
    if not succeeds:
        engine.driver.delete_fails.add(row.id)

    result = engine.run()

    after = fetch(db, rtype, row.id)
    assert engine.driver.calls == [(DELETE_METHOD[rtype], row.id)]
    expected = vocab.DELETED if succeeds else EXPECTED[rtype][status][1]
    assert after.status == expected
    assert (after.deleted_at is not None) == succeeds
    assert (api.get(db, type(after), row.id) is None) == succeeds
    assert result["outcomes"] == {rtype: {expected: 1}}
    _nothing_else(result)
    if rtype == vocab.SHARE_INSTANCE:
        # Its only instance: the logical share goes with it.
        share = api.get(db, models.Share, after.share_id, include_deleted=True)
        assert (share.deleted_at is not None) == succeeds
    if rtype == vocab.REPLICA:
        # The active instance remains: the share stays.
        assert api.get(db, models.Share, after.share_id) is not None
    if rtype == vocab.SNAPSHOT_INSTANCE:
        snap = api.get(db, models.ShareSnapshot, after.snapshot_id, include_deleted=True)
        assert (snap.deleted_at is not None) == succeeds


@pytest.mark.parametrize("rtype,status", DELETE_CASES[:1])
def test_a_stopping_engine_starts_no_delete_retry(engine, rtype, status):
    """Asked to stop, a pass under way calls no driver for a row it would
    retry the delete of: the row stays in its status for the next pass (a
    chaos run's engine, SIGTERMed, went on retrying deletes one by one
    until it was killed, and a peer then retried the one it was in)."""
    row = make(engine.db, rtype, status)
    engine.reconciler.stopping.set()
    result = engine.run()
    assert engine.driver.calls == []
    assert fetch(engine.db, rtype, row.id).status == status
    assert result["skipped"] == {"the engine is stopping": 1}


def test_deleting_one_of_two_instances_keeps_the_share(engine):
    db = engine.db
    inst = make_share(db, vocab.DELETING)
    sibling = models.ShareInstance(id=models.new_id(), share_id=inst.share_id, host=HOSTBE,
                              status=vocab.AVAILABLE, export_locations=[])
    api.add_all(db, [sibling])
    engine.run()
    assert fetch(db, vocab.SHARE_INSTANCE, inst.id).status == vocab.DELETED
    assert api.get(db, models.Share, inst.share_id) is not None


def test_delete_retry_passes_the_server_and_its_details(engine):
    """teardown_server gets the stored backend_details back."""
    seen = []
    row = make(engine.db, vocab.SHARE_SERVER, vocab.DELETING)
    engine.driver.teardown_server = lambda server, details: seen.append((server, details))
    engine.run()
    # The call carries the token the retry took the server with.
    token = seen[0][0].pop("fence_token")
    assert isinstance(token, int) and token > 0
    assert seen == [({"id": row.id, "host": HOSTBE, "backend_details": {"k": "v"}},
                     {"k": "v"})]
    assert fetch(engine.db, vocab.SHARE_SERVER, row.id).status == vocab.DELETED


# Mark error -------------------------------------------------------------------------


@pytest.mark.parametrize("rtype,status", MARK_CASES)
def test_mark_rule(engine, rtype, status):
    db = engine.db
    row = make(db, rtype, status)
    result = engine.run()
    after = fetch(db, rtype, row.id)
    expected = EXPECTED[rtype][status][1]
    assert after.status == expected
    assert after.deleted_at is None
    assert engine.driver.calls == []  # nothing to ask: the operation cannot resume
    assert result["outcomes"] == {rtype: {expected: 1}}
    _nothing_else(result)
    if rtype == vocab.REPLICA:
        assert after.replica_state == vocab.REPLICA_ERROR


# The whole table in one pass, on every database -----------------------------------


def _whole_table(eng):
    rows = {}
    for rtype, statuses in EXPECTED.items():
        for status in statuses:
            rows[(rtype, status)] = make(eng.db, rtype, status).id
    return rows


@pytest.mark.parametrize("backend_ok", [True, False], ids=["backend-ok", "backend-fails"])
def test_whole_table_in_one_pass(any_engine, backend_ok):
    eng = any_engine
    rows = _whole_table(eng)
    if not backend_ok:
        eng.driver.answer = "missing"
        eng.driver.delete_fails.add("*")

    result = eng.run()

    want: dict[str, dict[str, int]] = {}
    for (rtype, status), ident in rows.items():
        action, error = EXPECTED[rtype][status]
        expected = error
        if backend_ok and action == Q:
            expected = vocab.AVAILABLE
        elif backend_ok and action == D:
            expected = vocab.DELETED
        assert fetch(eng.db, rtype, ident).status == expected, (rtype, status)
        want.setdefault(rtype, {}).setdefault(expected, 0)
        want[rtype][expected] += 1
    assert result["outcomes"] == want
    _nothing_else(result)
    calls = eng.driver.calls
    assert len(calls) == len(QUERY_CASES) + len(DELETE_CASES)
    assert len(set(calls)) == len(calls)  # each resource acted on once

    # A second pass finds nothing left to settle.
    eng.driver.calls.clear()
    again = eng.run()
    assert again["outcomes"] == {}
    assert eng.driver.calls == []


# Stages, dry run, the pass record ----------------------------------------------------


def test_stages_run_in_dependency_order(sqlite_db, tmp_path):
    eng = Engine(sqlite_db, coord_url(tmp_path), workers=8)
    try:
        # Two resources per stage, each needing a driver call; created in
        # reverse order so that creation order cannot explain the call order.
        wanted = {
            vocab.SHARE_SERVER: vocab.DELETING, vocab.SHARE_INSTANCE: vocab.CREATING,
            vocab.REPLICA: vocab.CREATING, vocab.SNAPSHOT_INSTANCE: vocab.CREATING,
            vocab.SHARE_GROUP: vocab.CREATING, vocab.GROUP_SNAPSHOT: vocab.CREATING,
            vocab.BACKUP: vocab.DELETING,
        }
        stage_of = {}
        for rtype in reversed(STAGE_ORDER):
            for _ in range(2):
                stage_of[make(eng.db, rtype, wanted[rtype]).id] = STAGE_ORDER.index(rtype)
        eng.run()
        order = [stage_of[ident] for _, ident in eng.driver.calls]
        assert len(order) == 2 * len(STAGE_ORDER)
        assert order == sorted(order)
        # Servers first: every server was settled before any share was asked.
        first_share = next(i for i, (m, _) in enumerate(eng.driver.calls)
                           if m == "get_share_status")
        assert all(m == "teardown_server" for m, _ in eng.driver.calls[:first_share])
    finally:
        eng.close()


@pytest.fixture
def dry_run(engine):
    """A dry run over the whole table, a dead engine's resource and a pending
    one: the rows and the result."""
    db = engine.db
    run = types.SimpleNamespace(engine=engine, db=db, rows=_whole_table(engine))
    run.inst = make_share(db, vocab.CREATING)
    run.dead_req = add_request(db, vocab.SHARE_INSTANCE, run.inst.id, HOSTBE,
                               vocab.REQUEST_RUNNING, engine_id())
    run.pending = make_share(db, vocab.CREATING)
    add_request(db, vocab.SHARE_INSTANCE, run.pending.id, HOSTBE)
    run.result = engine.run(dry_run=True)
    return run


def test_dry_run_changes_nothing(dry_run):
    db, result = dry_run.db, dry_run.result
    for (rtype, status), ident in dry_run.rows.items():
        assert fetch(db, rtype, ident).status == status
    assert fetch(db, vocab.SHARE_INSTANCE, dry_run.inst.id).status == vocab.CREATING
    assert request_row(db, dry_run.dead_req).status == vocab.REQUEST_RUNNING
    assert dry_run.engine.driver.calls == []
    assert result["outcomes"] == {}
    assert result["abandoned_requests"] == 0


def test_dry_run_returns_the_plan(dry_run):
    rows, inst, pending = dry_run.rows, dry_run.inst, dry_run.pending
    plan = {p["id"]: p for p in dry_run.result["plan"]}
    assert set(plan) == set(rows.values()) | {inst.id, pending.id}
    for (rtype, status), ident in rows.items():
        action, error = EXPECTED[rtype][status]
        item = plan[ident]
        assert (item["type"], item["status"]) == (rtype, status)
        assert item["action"].split()[0] == action
        assert error in item["outcome"]
        if action == Q:
            assert item["action"] == f"query {STATUS_METHOD[rtype]}"
    # The dead engine's resource would be settled; the pending one skipped.
    assert plan[inst.id]["action"] == "query get_share_status"
    assert (plan[pending.id]["action"], plan[pending.id]["reason"]) == ("skip", "request pending")


def test_dry_run_is_recorded_with_its_plan(dry_run):
    result = dry_run.result
    record = db_rec.passes(dry_run.db, pass_id=result["id"])[0]
    assert record.dry_run is True
    assert record.summary["plan"] == result["plan"]


@pytest.fixture
def recorded(engine):
    """A pass (trigger 'manual:7') that settles two shares, one to error and
    one a dead engine's delete, and skips a busy one: the shares, the result
    and the pass record."""
    db = engine.db
    run = types.SimpleNamespace(engine=engine, db=db)
    a = make_share(db, vocab.CREATING)
    b = make_share(db, vocab.DELETING)
    run.busy = make_share(db, vocab.CREATING, task_state="migration_in_progress")
    engine.driver.answers[a.id] = "missing"
    add_request(db, vocab.SHARE_INSTANCE, b.id, HOSTBE, vocab.REQUEST_RUNNING, engine_id(),
                action="delete")
    run.result = engine.run(trigger="manual:7")
    run.record = db_rec.passes(db, host=HOST)[0]
    return run


def test_the_pass_record_names_the_pass(recorded):
    record = recorded.record
    assert record.id == recorded.result["id"]
    assert (record.host, record.engine_id, record.trigger, record.dry_run) == (
        HOST, recorded.engine.engine_id, "manual:7", False)
    assert record.finished_at is not None and record.finished_at >= record.started_at


def test_the_pass_record_holds_the_summary(recorded):
    summary = recorded.record.summary
    assert summary["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.ERROR: 1, vocab.DELETED: 1}}
    assert summary["skipped"] == {"busy task_state migration_in_progress": 1}
    assert summary["abandoned_requests"] == 1
    assert summary["failures"] == 0
    assert summary["duration_seconds"] >= 0
    assert summary["plan"] == []
    assert {k: v for k, v in recorded.result.items() if k != "id"} == summary


def test_the_recorded_pass_left_the_busy_share_alone(recorded):
    assert fetch(recorded.db, vocab.SHARE_INSTANCE, recorded.busy.id).status == vocab.CREATING
