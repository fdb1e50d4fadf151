"""SyncPoints (doc/specs.rst, spec 004) on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest
import sqlalchemy as sa
from sharemgr.db import api, migration, models, stacks, sync_points
from sharemgr.db.engine import Database

T1 = str(uuid.uuid4())
T2 = str(uuid.uuid4())


def _stack(db, name):
    with db.session() as session:
        return stacks.stack_create_tx(session, name)


@pytest.fixture
def stack(db):
    return _stack(db, f"s-{uuid.uuid4().hex[:6]}")


def _create(db, *args, **kwargs):
    with db.session() as session:
        return sync_points.create_tx(session, *args, **kwargs)


def _get(db, *args):
    with db.session() as session:
        return sync_points.get_tx(session, *args)


def _requests(db, resource_id):
    return [r for r in api.request_list(db, resource_id=resource_id)]


def report(db, entity_id, traversal_id, is_update, sender, data, required=(), then=None, *,
           known=None, lock_after=sync_points.LOCK_AFTER, max_attempts=sync_points.MAX_ATTEMPTS):
    """A report in a transaction of its own, as convergence/report.py
    writes one: ``then(session, input_data)`` (the successor's request) in
    the transaction of the CAS that made the point ready."""
    for attempt in sync_points.retrying(lock_after, max_attempts):
        with attempt, db.session() as session:
            result = sync_points.sync_tx(session, entity_id, traversal_id, is_update, sender,
                                         data, required, known, attempt.lock, attempt.first)
            if result.fired and then is not None:
                then(session, result.input_data)
    return dataclasses.replace(result, attempts=attempt.number)


def _tx_then(session, result, then):
    """``sync_tx``'s caller's part: act on a point made ready, in its transaction."""
    if result.fired:
        then(session, result.input_data)
    return result


def test_create_one_point_per_node_plus_the_stack(db, stack):
    n = _create(db, stack.id, T1, [(1, True), (1, False), (2, True)])
    assert n == 4
    points = sync_points.list_for_traversal(db, stack.id, T1)
    assert {(p.entity_id, p.is_update) for p in points} == {
        ("1", True), ("1", False), ("2", True), (stack.id, True)}
    assert all(p.atomic_key == 0 and p.input_data == {} for p in points)
    point = _get(db, 1, T1, False)
    assert point.stack_id == stack.id and point.traversal_id == T1 and not point.is_update
    assert _get(db, 1, T2, False) is None
    assert _get(db, 3, T1, True) is None


def test_reports_for_traversal_are_each_points_input_data(db, stack):
    """The watchdog's read: each point's reports by key, as the whole rows
    hold them, of one traversal only."""
    _create(db, stack.id, T1, [(1, True), (1, False), (2, True)])
    _create(db, stack.id, T2, [(1, True)], include_stack=False)
    report(db, 1, T1, False, "1:update", {"name": "a", "resource_id": 1}, required={"1:update"})
    got = sync_points.reports_for_traversal(db, stack.id, T1)
    assert got == {(p.entity_id, p.is_update): p.input_data
                   for p in sync_points.list_for_traversal(db, stack.id, T1)}
    assert got[("1", False)] == {"1:update": {"name": "a", "resource_id": 1}}
    assert sync_points.reports_for_traversal(db, stack.id, T2) == {("1", True): {}}



def test_sync_merges_and_bumps_the_key(db, stack):
    _create(db, stack.id, T1, [(5, True)], include_stack=False)
    assert sync_points.sync(db, 5, T1, True, "1:update", {"a": 1}).input_data == {
        "1:update": {"a": 1}}
    merged = sync_points.sync(db, 5, T1, True, "2:update", None).input_data
    assert merged == {"1:update": {"a": 1}, "2:update": None}
    point = _get(db, 5, T1, True)
    assert point.atomic_key == 2 and point.input_data == merged
    assert not sync_points.sync(db, 6, T1, True, "x", 1).found


def test_compare_and_swap_loses_on_a_stale_key(db, stack):
    _create(db, stack.id, T1, [(5, True)], include_stack=False)
    stale = _get(db, 5, T1, True)
    sync_points.sync(db, 5, T1, True, "1:update", 1)
    with db.session() as session:
        assert not sync_points.cas_tx(session, 5, T1, True, stale.atomic_key, {"lost": 1})
    with db.session() as session:
        assert sync_points.cas_tx(session, 5, T1, True, stale.atomic_key + 1, {"won": 1})
    assert _get(db, 5, T1, True).input_data == {"won": 1}


def test_sync_fires_once_in_the_transaction_of_the_write(db, stack):
    _create(db, stack.id, T1, [(9, True)], include_stack=False)
    required = {"1:update", "2:update"}
    calls = []

    def on_ready(session, data):
        calls.append(dict(data))
        api.request_add_tx(session, "stack_resource", "9", "check_resource", None, {"d": data})

    r1 = report(db, 9, T1, True, "1:update", {"x": 1}, required, on_ready)
    assert r1.found and not r1.ready and not r1.fired and calls == []
    r2 = report(db, 9, T1, True, "2:update", {"x": 2}, required, on_ready)
    assert r2.ready and r2.fired
    assert calls == [{"1:update": {"x": 1}, "2:update": {"x": 2}}]
    assert len(_requests(db, "9")) == 1
    # A sender reporting again (a retriggered node) merges but fires nothing.
    r3 = report(db, 9, T1, True, "2:update", {"x": 3}, required, on_ready)
    assert r3.ready and not r3.fired and len(calls) == 1
    assert r3.input_data["2:update"] == {"x": 3}
    assert len(_requests(db, "9")) == 1


def test_a_report_rolls_back_the_write_when_the_successor_s_enqueue_fails(db, stack):
    _create(db, stack.id, T1, [(9, True)], include_stack=False)

    def on_ready(session, data):
        api.request_add_tx(session, "stack_resource", "9", "check_resource", None, {})
        raise RuntimeError("enqueue failed")

    with pytest.raises(RuntimeError):
        report(db, 9, T1, True, "1:update", 1, {"1:update"}, on_ready)
    point = _get(db, 9, T1, True)
    assert point.input_data == {} and point.atomic_key == 0
    assert _requests(db, "9") == []
    # Retrying the report then fires.
    result = sync_points.sync(db, 9, T1, True, "1:update", 1, {"1:update"})
    assert result.fired


def _statements(db):
    """The statements ``db`` runs while the returned list is being filled."""
    seen: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *a: seen.append(a[2].split()[0]))
    return seen


def test_a_point_with_one_sender_is_written_blind_and_fires(db, stack):
    """A point waiting for one sender needs no read for its first report:
    one UPDATE, which fires the successor; what it stores is what a read
    and a CAS would have stored, for ``sync`` and for ``sync_tx``."""
    _create(db, stack.id, T1, [(9, True), (10, True)], include_stack=False)
    calls = []
    seen = _statements(db)
    result = report(db, 9, T1, True, "1:update", {"x": 1}, {"1:update"},
                    lambda s, d: calls.append(d))
    assert [s for s in seen if s in ("SELECT", "UPDATE")] == ["UPDATE"]
    assert result.found and result.ready and result.fired and calls == [{"1:update": {"x": 1}}]
    seen.clear()
    with db.session() as session:
        r_tx = _tx_then(session, sync_points.sync_tx(session, 10, T1, True, "1:update", None,
                                                     {"1:update"}), lambda s, d: calls.append(d))
    assert [s for s in seen if s in ("SELECT", "UPDATE")] == ["UPDATE"]
    assert r_tx.fired and calls[-1] == {"1:update": None}
    for rid, data in ((9, {"x": 1}), (10, None)):
        point = _get(db, rid, T1, True)
        assert point.atomic_key == 1 and point.input_data == {"1:update": data}
    # The sender again: the blind write finds the point written, reads it,
    # merges, and fires nothing.
    again = report(db, 9, T1, True, "1:update", {"x": 2}, {"1:update"},
                   lambda s, d: calls.append(d))
    assert again.ready and not again.fired and len(calls) == 2
    assert _get(db, 9, T1, True).input_data == {"1:update": {"x": 2}}


def test_a_blind_first_write_keeps_what_another_sender_wrote(db, stack):
    """A sender the point does not wait for wrote first (the key moved):
    the one it waits for then reads and merges, and fires once."""
    _create(db, stack.id, T1, [(9, True)], include_stack=False)
    sync_points.sync(db, 9, T1, True, "old:update", 0, {"1:update"})
    calls = []
    with db.session() as session:
        result = _tx_then(session, sync_points.sync_tx(session, 9, T1, True, "1:update", 1,
                                                       {"1:update"}), lambda s, d: calls.append(d))
    assert result.fired and calls == [{"old:update": 0, "1:update": 1}]
    assert _get(db, 9, T1, True).atomic_key == 2
    with db.session() as session:
        gone = sync_points.sync_tx(session, 8, T1, True, "1:update", 1, {"1:update"})
    assert not gone.found and not gone.fired


def test_a_point_whose_content_the_sender_knows_is_written_blind(db, stack):
    """``known``: the caller knows what the point holds before its report
    (the graph's order): one UPDATE at the key that many reports left, and
    it fires as a read and a CAS would. A point that holds something else
    (a sender reported twice) is read and merged."""
    _create(db, stack.id, T1, [(9, False), (10, False)], include_stack=False)
    required = {"9:update", "8:cleanup"}
    calls = []
    first = report(db, 9, T1, False, "9:update", None, required,
                   lambda s, d: calls.append(d), known={})
    assert first.found and not first.ready and calls == []
    seen = _statements(db)
    with db.session() as session:
        second = _tx_then(session, sync_points.sync_tx(
            session, 9, T1, False, "8:cleanup", None, required, known={"9:update": None}),
            lambda s, d: calls.append(d))
    assert [s for s in seen if s in ("SELECT", "UPDATE")] == ["UPDATE"]
    assert second.fired and calls == [{"9:update": None, "8:cleanup": None}]
    point = _get(db, 9, T1, False)
    assert point.atomic_key == 2 and point.input_data == calls[0]
    # Point 10: its first sender reported twice (key 2); the second's blind
    # write at key 1 finds it moved, reads, merges, and fires once.
    for _ in range(2):
        sync_points.sync(db, 10, T1, False, "9:update", None, required, known={})
    seen.clear()
    late = report(db, 10, T1, False, "8:cleanup", None, required,
                  lambda s, d: calls.append(d), known={"9:update": None})
    assert [s for s in seen if s in ("SELECT", "UPDATE")] == ["UPDATE", "SELECT", "UPDATE"]
    assert late.fired and len(calls) == 2 and _get(db, 10, T1, False).atomic_key == 3


def test_a_blind_write_checks_who_wrote_not_only_how_many(db, stack):
    """The key says how many reports a point took, not whose: a sender whose
    earlier report came first (its other predecessor's report was split
    into a later transaction) and that reports again, believing the other
    reported, finds key 1 as it expects. The write checks the point names
    that other sender: it does not, so the point is read and merged, and
    nothing fires until the other sender reports."""
    _create(db, stack.id, T1, [(9, False)], include_stack=False)
    required = {"9:update", "8:cleanup"}
    calls = []
    sync_points.sync(db, 9, T1, False, "8:cleanup", None, required, known={"9:update": None})
    again = report(db, 9, T1, False, "8:cleanup", None, required,
                   lambda s, d: calls.append(d), known={"9:update": None})
    assert again.found and not again.ready and calls == []
    assert _get(db, 9, T1, False).input_data == {"8:cleanup": None}
    last = report(db, 9, T1, False, "9:update", None, required,
                  lambda s, d: calls.append(d), known={})
    assert last.fired and calls == [{"8:cleanup": None, "9:update": None}]


def test_roots_report_to_points_of_their_own_and_the_stack_counts_them(db, stack):
    """``report_roots_tx``: each root writes its own point at the stack
    (``root_entity``), a root reporting again changes nothing, and the
    stack's point counts: the report that brings it to the number of roots
    fires, once. The stack's point stays one small row whatever the roots."""
    roots = ["1:cleanup", "2:cleanup", "3:cleanup"]
    _create(db, stack.id, T1, [], roots=roots)
    sent: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    with db.session() as session:
        two = sync_points.report_roots_tx(session, stack.id, T1, ["2:cleanup", "1:cleanup"], 3)
    assert two.found and not two.ready and not two.fired
    # The stack's count raised and read in one statement where UPDATE …
    # RETURNING exists (not MariaDB).
    reads = [q for q in sent if q.startswith("SELECT sync_points.atomic_key")]
    assert len(reads) == (1 if db.dialect == "mysql" else 0)
    with db.session() as session:
        again = sync_points.report_roots_tx(session, stack.id, T1, ["1:cleanup"], 3)
    assert again.found and not again.fired
    with db.session() as session:
        last = sync_points.report_roots_tx(session, stack.id, T1, ["3:cleanup", "2:cleanup"], 3)
        late = sync_points.report_roots_tx(session, stack.id, T1, ["3:cleanup"], 3)
    assert last.fired and late.found and not late.fired
    point = _get(db, stack.id, T1, True)
    assert point.atomic_key == 3 and point.input_data == {}
    assert _get(db, sync_points.root_entity(stack.id, "1:cleanup"), T1, False).input_data == {
        "1:cleanup": None}
    with db.session() as session:
        assert not sync_points.report_roots_tx(session, stack.id, "other", ["1:cleanup"], 3).found


def test_roots_reported_from_the_start_are_counted(db, stack):
    """A preparation's settled roots: their points written, the stack's key
    counting them, so the remaining root's report completes the stack."""
    key = sync_points.root_entity(stack.id, "1:cleanup")
    _create(db, stack.id, T1, [], roots=["1:cleanup", "2:cleanup"],
            reported={(key, False): {"1:cleanup": None}})
    assert _get(db, stack.id, T1, True).atomic_key == 1
    with db.session() as session:
        assert sync_points.report_roots_tx(session, stack.id, T1, ["2:cleanup"], 2).fired


def test_sync_on_a_missing_point_reports_a_superseded_traversal(db, stack):
    called = []
    result = report(db, 9, T1, True, "1:update", 1, {"1:update"},
                    lambda s, d: called.append(d))
    assert not result.found and not result.fired and called == []


def test_delete_all_of_one_traversal(db, stack):
    _create(db, stack.id, T1, [(1, True), (2, True)])
    _create(db, stack.id, T2, [(1, True)])
    with db.session() as session:
        assert sync_points.delete_all_tx(session, stack.id, T1) == 3
    assert sync_points.list_for_traversal(db, stack.id, T1) == []
    assert len(sync_points.list_for_traversal(db, stack.id, T2)) == 2
    with db.session() as session:
        assert sync_points.delete_all_tx(session, stack.id) == 2


def test_a_report_that_keeps_losing_its_cas_gives_up_and_locks_after_three(monkeypatch):
    """``retrying``: each lost CAS is another attempt, in a new transaction;
    from the fourth the read locks the point; at the limit the report ends
    with SyncPointContention (it never loops for ever)."""
    monkeypatch.setattr(sync_points.time, "sleep", lambda _s: None)
    locks = []
    with pytest.raises(sync_points.SyncPointContention, match="5 times"):
        for attempt in sync_points.retrying(lock_after=3, max_attempts=5):
            with attempt:
                locks.append((attempt.number, attempt.lock, attempt.first))
                raise sync_points.CasLost()
    assert locks == [(1, False, True), (2, False, False), (3, False, False),
                     (4, True, False), (5, True, False)]


def test_is_ready():
    assert sync_points.is_ready({}, ())
    assert sync_points.is_ready({"a": 1, "b": None}, {"a", "b"})
    assert not sync_points.is_ready({"a": 1}, {"a", "b"})


def _fan_in(url, lock_after, writers=50):
    """``writers`` threads report to one SyncPoint at once, each as its own
    sender; on_ready enqueues the successor's request in the CAS transaction."""
    db = Database(url, pool_size=writers)
    try:
        migration.upgrade(db)
        stack = _stack(db, f"fan-{uuid.uuid4().hex[:6]}")
        _create(db, stack.id, T1, [(42, True)], include_stack=False)
        senders = [f"{i}:update" for i in range(writers)]
        barrier = threading.Barrier(writers)
        results, errors, fired_in = [], [], []
        guard = threading.Lock()

        def on_ready(session, data):
            with guard:
                fired_in.append(threading.get_ident())
            api.request_add_tx(session, "stack_resource", "42", "check_resource", None,
                               {"input_data": data})

        def writer(i):
            try:
                barrier.wait()
                r = report(db, 42, T1, True, senders[i], {"from": i}, senders, on_ready,
                           lock_after=lock_after, max_attempts=10_000)
                with guard:
                    results.append(r)
            except Exception as exc:  # pragma: no cover - reported below
                with guard:
                    errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(results) == writers and all(r.found for r in results)
        point = _get(db, 42, T1, True)
        # No lost input data: every sender's entry is there with its own value.
        assert point.input_data == {s: {"from": i} for i, s in enumerate(senders)}
        assert point.atomic_key == writers
        # The successor was triggered exactly once.
        assert sum(r.fired for r in results) == 1
        assert len(fired_in) == 1
        with db.session() as session:
            rows = list(session.scalars(sa.select(models.Request).where(
                models.Request.resource_id == "42")))
        assert len(rows) == 1
        assert set(rows[0].args["input_data"]) == set(senders)
        return results
    finally:
        db.dispose()


def test_fifty_concurrent_writers_on_postgresql(pg_url, many_connections):
    _fan_in(pg_url, lock_after=sync_points.LOCK_AFTER)


def test_fifty_concurrent_writers_on_postgresql_with_compare_and_swap_alone(
        pg_url, many_connections):
    # No locking read at all: the atomic_key CAS and its retries alone keep
    # every sender's data. Some writers must have lost a race and retried.
    results = _fan_in(pg_url, lock_after=None)
    assert max(r.attempts for r in results) > 1


def test_fifty_concurrent_writers(db_url, many_connections):
    _fan_in(db_url, lock_after=sync_points.LOCK_AFTER)
