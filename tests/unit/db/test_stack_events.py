"""Stack events (db/stack_events.py) on SQLite, PostgreSQL and MariaDB: written
with the status change they describe, in its transaction, ordered by id,
trimmed to the cap, gone with their stack."""

from __future__ import annotations

import uuid

import pytest
from sharemgr.db import stack_events, stack_purge, stack_work, stacks
from sharemgr.db.models import StackEvent

ME = "host-a.1"


@pytest.fixture
def stack(db):
    with db.session() as session:
        return stacks.stack_create_tx(session, f"s-{uuid.uuid4().hex[:6]}")


def _start(db, stack, action="CREATE", status="IN_PROGRESS", reason=None):
    """Swap in a new traversal with ``action status``; its id."""
    t = str(uuid.uuid4())
    with db.session() as session:
        head = stacks.stack_get_tx(session, stack.id)
        assert stacks.stack_swap_traversal_tx(
            session, stack.id, head.current_traversal, t,
            {"action": action, "status": status, "status_reason": reason})
    return t


def _row(db, stack, name="data"):
    with db.session() as session:
        return stacks.resources_add_tx(
            session, [stacks.resource_new(stack.id, name, "share", None, engine_id=ME)])[0]


def _events(db, stack, **kw):
    return [(e.resource_name, e.action, e.status) for e in stack_events.events(db, stack.id, **kw)]


def test_stack_and_resource_changes_are_events_in_order(db, stack):
    t = _start(db, stack)
    row = _row(db, stack)
    with db.session() as session:
        assert stacks.resource_start_tx(session, row.id, ME, t, "CREATE",
                                        {"physical_id": "share-1"})
    assert stack_work.end(db, row.id, ME, "CREATE", "FAILED", "data: no room")
    with db.session() as session:
        assert stacks.stack_set_status_tx(session, stack.id, t, "FAILED", "Resource failed")
    assert _events(db, stack) == [
        (None, "CREATE", "IN_PROGRESS"), ("data", "CREATE", "IN_PROGRESS"),
        ("data", "CREATE", "FAILED"), (None, "CREATE", "FAILED")]
    got = stack_events.events(db, stack.id)
    assert [e.id for e in got] == sorted(e.id for e in got)
    failed = got[2]
    assert (failed.physical_id, failed.resource_id, failed.traversal_id, failed.reason) == \
        ("share-1", row.id, t, "data: no room")
    assert got[3].reason == "Resource failed" and got[3].resource_id is None
    assert stack_events.event_get(db, stack.id, failed.id).reason == "data: no room"
    assert stack_events.event_get(db, "other", failed.id) is None
    assert _events(db, stack, resource="data") == [
        ("data", "CREATE", "IN_PROGRESS"), ("data", "CREATE", "FAILED")]
    assert _events(db, stack, after=got[1].id) == _events(db, stack)[2:]
    assert [r.name for r in stack_events.failures(db, stack.id)] == ["data"]


def test_a_lost_update_or_a_rolled_back_transaction_leaves_no_event(db, stack):
    t = _start(db, stack)
    row = _row(db, stack)
    before = _events(db, stack)
    # Not the lock holder: the conditional update loses, and writes no event.
    assert not stacks.resource_set_state(db, row.id, "someone-else", "CREATE", "COMPLETE")
    with db.session() as session:
        assert not stacks.stack_set_status_tx(session, stack.id, "not-current", "COMPLETE")

    class Boom(Exception):
        pass

    with pytest.raises(Boom), db.session() as session:
        assert stacks.resource_set_state_tx(session, row.id, ME, "CREATE", "COMPLETE")
        assert stacks.stack_set_status_tx(session, stack.id, t, "COMPLETE")
        raise Boom()
    assert _events(db, stack) == before
    assert stacks.resource_get(db, row.id).action == "INIT"


def test_an_unchanged_state_may_skip_its_event(db, stack):
    _start(db, stack)
    row = _row(db, stack)
    before = _events(db, stack)
    assert stacks.resource_set_state(db, row.id, ME, "INIT", "COMPLETE",
                                     values={"template_id": None}, event=False)
    assert _events(db, stack) == before


def test_several_rows_ends_have_their_events_in_one_statement(db, stack):
    """A report that ends several nodes writes their rows without an event
    each, then all their events in one ``INSERT … SELECT`` (in the order of
    the rows' ids), as their ends left the rows."""
    t = _start(db, stack)
    rows = [_row(db, stack, name) for name in ("b", "a")]
    with db.session() as session:
        for row in rows:
            assert stacks.resource_start_tx(session, row.id, ME, t, "CREATE")
    before = _events(db, stack)
    with db.session() as session:
        for row in rows:
            assert stack_work.end_tx(session, row.id, ME, "CREATE", "COMPLETE", None,
                                     {"physical_id": f"share-{row.name}"}, event=False)
        assert _events(db, stack) == before  # another connection: not committed yet
        stack_events.resource_events_tx(session, [r.id for r in reversed(rows)])
        stack_events.resource_events_tx(session, [])  # nothing to write: no statement
    got = stack_events.events(db, stack.id)[len(before):]
    assert [(e.resource_name, e.resource_id, e.physical_id, e.action, e.status, e.traversal_id)
            for e in got] == [(r.name, r.id, f"share-{r.name}", "CREATE", "COMPLETE", t)
                              for r in sorted(rows, key=lambda r: r.id)]


def test_events_are_kept_up_to_the_cap_at_a_terminal_status(db, stack):
    db.max_events_per_stack = 3
    t = _start(db, stack)
    rows = [_row(db, stack, f"r{i}") for i in range(4)]
    for row in rows:
        assert stacks.resource_set_state(db, row.id, ME, "CREATE", "IN_PROGRESS")
    assert len(_events(db, stack)) == 5  # no purge while the traversal runs
    with db.session() as session:
        assert stacks.stack_set_status_tx(session, stack.id, t, "COMPLETE", "done")
    assert _events(db, stack) == [("r2", "CREATE", "IN_PROGRESS"),
                                  ("r3", "CREATE", "IN_PROGRESS"), (None, "CREATE", "COMPLETE")]
    # A new event after a purge never takes an old id.
    _start(db, stack, "UPDATE")
    ids = [e.id for e in stack_events.events(db, stack.id)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    with db.session() as session:
        assert stack_events.purge_tx(session, stack.id, 0) == 0  # 0: keep all


def test_other_stacks_events_are_not_purged(db, stack):
    db.max_events_per_stack = 1
    with db.session() as session:
        other = stacks.stack_create_tx(session, f"o-{uuid.uuid4().hex[:6]}")
    _start(db, other)
    _start(db, other, "UPDATE")
    _start(db, stack, "CREATE", "COMPLETE")
    assert len(stack_events.events(db, other.id)) == 2
    assert len(stack_events.events(db, stack.id)) == 1


def test_events_go_with_a_deleted_stack(db, stack):
    t = _start(db, stack, "DELETE")
    with db.session() as session:
        assert stacks.stack_set_status_tx(session, stack.id, t, "COMPLETE")
        stack_purge.purge_tx(session, stack.id)
    assert stack_events.events(db, stack.id) == []
    # A live stack's purge keeps them.
    with db.session() as session:
        live = stacks.stack_create_tx(session, f"l-{uuid.uuid4().hex[:6]}")
    _start(db, live)
    with db.session() as session:
        stack_purge.purge_tx(session, live.id)
        assert stack_events.delete_tx(session, live.id) == 1


def test_a_check_is_an_event(db, stack):
    t = _start(db, stack, "CREATE", "COMPLETE")
    assert stacks.stack_mark_checked(db, stack.id, t, "FAILED", "drifted: data (missing)")
    assert _events(db, stack)[-1] == (None, "CHECK", "FAILED")


def _ev(name, rid, action, traversal="t1"):
    return StackEvent(resource_name=name, resource_id=rid, action=action, status="COMPLETE",
                      traversal_id=traversal)


def test_changes_tell_added_updated_replaced_and_deleted_apart():
    evs = [_ev(None, None, "UPDATE"), _ev("new", 5, "CREATE"), _ev("size", 2, "UPDATE"),
           _ev("swap", 6, "CREATE"), _ev("swap", 3, "DELETE"), _ev("gone", 4, "DELETE"),
           _ev("old", 1, "CREATE", traversal="t0")]
    got = stack_events.changes(evs, "t1")
    assert (got.added, got.updated, got.replaced, got.deleted) == (
        {"new"}, {"size"}, {"swap"}, {"gone"})
