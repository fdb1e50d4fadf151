"""db/stack_keep.py on SQLite, PostgreSQL and MariaDB: mark-unhealthy's
conditional updates, abandon's deletes, adopt's one transaction."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api, models, resource_locks, stack_events, stack_keep, stacks, sync_points

ME = "host-a.1"


def _stack(db, name="web", status="COMPLETE", action="CREATE", rows=("data",)):
    """A stack at rest (or not) with a template and one complete row per name."""
    with db.session() as session:
        stack = stacks.stack_create_tx(session, name)
        tid = stacks.template_create_tx(session, {"resources": {}}, stack.id)
        made = stacks.resources_add_tx(session, [
            stacks.resource_new(stack.id, n, "share", tid) for n in rows])
        for i, row in enumerate(made):
            row.action, row.physical_id = "CREATE", f"phys-{name}-{i}"
        traversal = str(uuid.uuid4())
        assert stacks.stack_swap_traversal_tx(session, stack.id, None, traversal, {
            "action": action, "status": status, "template_id": tid})
        sync_points.create_tx(session, stack.id, traversal, [(r.id, True) for r in made])
        ids = [r.id for r in made]
    return stacks.stack_get(db, stack.id), ids


def _row(db, rid):
    return stacks.resource_get(db, rid)


def test_mark_unhealthy_and_reset_are_conditional(db):
    stack, (rid,) = _stack(db)
    key = _row(db, rid).atomic_key
    stack_keep.resource_mark_unhealthy(db, stack.id, rid, "bad disk")
    row = _row(db, rid)
    assert (row.action, row.status, row.status_reason) == ("CHECK", "FAILED", "bad disk")
    assert row.atomic_key == key + 1
    stack_keep.resource_mark_unhealthy(db, stack.id, rid, "again")  # marked twice: fine
    stack_keep.resource_mark_unhealthy(db, stack.id, rid, None, reset=True)
    assert (_row(db, rid).action, _row(db, rid).status) == ("CHECK", "COMPLETE")
    with pytest.raises(stack_keep.Refused, match="not marked unhealthy"):
        stack_keep.resource_mark_unhealthy(db, stack.id, rid, None, reset=True)
    # Each mark and reset is an event of the row (the refused one is not).
    marks = [(e.action, e.status, e.reason) for e in stack_events.events(db, stack.id, "data")]
    assert marks == [("CHECK", "FAILED", "bad disk"), ("CHECK", "FAILED", "again"),
                     ("CHECK", "COMPLETE", None)]


def test_mark_unhealthy_refuses_a_held_row_a_deleted_one_and_a_busy_stack(db):
    stack, (rid, other) = _stack(db, rows=("data", "logs"))
    assert resource_locks.resource_lock_acquire(db, rid, ME).acquired
    with pytest.raises(stack_keep.Refused, match=f"held by {ME}"):
        stack_keep.resource_mark_unhealthy(db, stack.id, rid, None)
    with db.session() as session:
        stacks.resource_update_tx(session, other, {}, {"action": "DELETE"})
    with pytest.raises(stack_keep.Refused, match="DELETE COMPLETE"):
        stack_keep.resource_mark_unhealthy(db, stack.id, other, None)
    busy, (bid,) = _stack(db, "busy", status="IN_PROGRESS", action="UPDATE")
    with pytest.raises(stack_keep.Refused, match="UPDATE IN_PROGRESS"):
        stack_keep.resource_mark_unhealthy(db, busy.id, bid, None)
    assert _row(db, bid).status == "COMPLETE"
    # Another stack's row is not this stack's to mark.
    with pytest.raises(stack_keep.Refused):
        stack_keep.resource_mark_unhealthy(db, busy.id, other, None)


def test_abandon_deletes_the_stacks_records_only(db):
    stack, ids = _stack(db, rows=("data", "logs"))
    keep, _ = _stack(db, "keep")
    with db.session() as session:
        pending = api.request_add_tx(session, vocab.STACK_RESOURCE, str(ids[0]),
                                     vocab.ACTION_CHECK, None, {"stack_id": stack.id})
        check = api.request_add_tx(session, vocab.STACK, stack.id, vocab.ACTION_STACK_CHECK,
                                   None, {})
        share_op = api.request_add_tx(session, vocab.SHARE, "phys-web-0", "delete", None, {})
    assert stack_events.events(db, stack.id) and stack_events.events(db, keep.id)
    gone = stack_keep.abandon(db, stack.id)
    assert stack_events.events(db, stack.id) == []  # its events go with its records
    assert stack_events.events(db, keep.id)
    assert gone.stack.name == "web" and sorted(r.id for r in gone.rows) == sorted(ids)
    assert gone.template == {"resources": {}}
    assert stacks.stack_get(db, stack.id, include_deleted=True) is None
    assert stacks.resource_list(db, stack.id) == []
    assert sync_points.list_for_traversal(db, stack.id, stack.current_traversal) == []
    left = {r.id for r in api.request_list(db)}
    assert pending.id not in left and check.id not in left and share_op.id in left
    t = models.StackTemplate.__table__
    with db.reading() as session:
        assert session.execute(sa.select(t.c.id).where(t.c.stack_id == stack.id)).all() == []
        assert session.execute(sa.select(t.c.id).where(t.c.stack_id == keep.id)).all()
    # Another stack is untouched.
    assert len(stacks.resource_list(db, keep.id)) == 1


def test_abandon_is_refused_in_progress_or_with_a_held_row(db):
    busy, _ = _stack(db, "busy", status="IN_PROGRESS", action="UPDATE")
    with pytest.raises(stack_keep.Refused, match="UPDATE IN_PROGRESS"):
        stack_keep.abandon(db, busy.id)
    stack, (rid,) = _stack(db)
    resource_locks.resource_lock_acquire(db, rid, ME)
    with pytest.raises(stack_keep.Refused, match="held by"):
        stack_keep.abandon(db, stack.id)
    assert stacks.stack_get(db, busy.id) and stacks.stack_get(db, stack.id)
    assert len(stacks.resource_list(db, stack.id)) == 1


def _adopted(name, pid, requires=()):
    return stack_keep.Adopted(name, "share", pid, {"size": 1, "proto": "NFS"},
                              {"id": pid}, requires)


def test_adopt_makes_a_complete_stack_in_one_go(db):
    stack = stack_keep.adopt(db, "new", {"resources": {"a": {}, "b": {}}},
                             [_adopted("a", "pa"), _adopted("b", "pb", ("a",))],
                             timeout_seconds=60)
    assert (stack.action, stack.status) == ("CREATE", "COMPLETE")
    assert "ADOPT" in stack.status_reason and stack.timeout_seconds == 60
    rows = {r.name: r for r in stacks.resource_list(db, stack.id)}
    assert {n: (r.physical_id, r.action, r.status, r.template_id) for n, r in rows.items()} == {
        "a": ("pa", "CREATE", "COMPLETE", stack.template_id),
        "b": ("pb", "CREATE", "COMPLETE", stack.template_id)}
    assert rows["b"].requires == [rows["a"].id] and rows["a"].properties["size"] == 1
    assert stack.current_deps == {"nodes": [[rows["a"].id, True], [rows["b"].id, True]],
                                  "edges": [[0, 1]]}


def test_adopt_refuses_a_resource_another_stack_has_and_writes_nothing(db):
    other, (rid,) = _stack(db, "other")
    with pytest.raises(stack_keep.Refused, match="phys-other-0 belongs to stack other"):
        stack_keep.adopt(db, "new", {"resources": {}},
                         [_adopted("a", "pa"), _adopted("b", "phys-other-0")])
    assert stacks.stack_get_by_name(db, "new") is None
    assert stack_keep.owners(db, [("share", "phys-other-0"), ("share", "pa")]) == {
        ("share", "phys-other-0"): "other"}
    # Once its row is DELETE COMPLETE (retained, say), nobody owns it.
    with db.session() as session:
        stacks.resource_update_tx(session, rid, {}, {"action": "DELETE"})
    assert stack_keep.owners(db, [("share", "phys-other-0")]) == {}
    with pytest.raises(stacks.StackExists):
        stack_keep.adopt(db, "other", {"resources": {}}, [_adopted("a", "pa")])


def test_two_adopts_of_one_share_at_once_one_wins(db):
    """The share's row is locked while the adopt checks that nobody owns it:
    racing adopts (threads, each its own transaction) cannot both take it."""
    import threading

    with db.session() as session:
        share = models.Share(id=models.new_id(), size=1, share_proto="NFS", name="s")
        session.add(share)
        pid = share.id
    barrier = threading.Barrier(4)
    results: list[object] = []

    def adopt(name):
        barrier.wait()
        try:
            results.append(stack_keep.adopt(db, name, {"resources": {}},
                                            [_adopted("a", pid)]).name)
        except stack_keep.Refused as exc:
            results.append(exc)

    threads = [threading.Thread(target=adopt, args=(f"s{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in results if isinstance(r, str)]
    assert len(results) == 4 and len(won) == 1, results
    assert stack_keep.owners(db, [("share", pid)]) == {("share", pid): won[0]}
