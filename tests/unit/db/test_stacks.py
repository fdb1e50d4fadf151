"""The stack / template / stack-resource DB API on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import sqlalchemy as sa
from sharemgr.common import outcome
from sharemgr.db import api, models, resource_locks, stack_events, stack_purge, stack_work, stacks

from tests.unit import statements

ME, OTHER, DEAD = "host-a.1", "host-b.2", "host-c.3"


def _stack(db, name, disable_rollback=False):
    with db.session() as session:
        return stacks.stack_create_tx(session, name, disable_rollback)


@pytest.fixture
def stack(db):
    return _stack(db, f"s-{uuid.uuid4().hex[:6]}")


def _new_row(session, stack_id, name, type_, template_id):
    return stacks.resources_add_tx(
        session, [stacks.resource_new(stack_id, name, type_, template_id)])[0]


def _resource(db, stack, name="data", type_="share"):
    with db.session() as session:
        return _new_row(session, stack.id, name, type_, None)


def _set_status(db, *args):
    with db.session() as session:
        return stacks.stack_set_status_tx(session, *args)


def test_stack_create_get_list(db):
    s = _stack(db, "web", disable_rollback=True)
    assert (s.action, s.status, s.current_traversal) == ("INIT", "COMPLETE", None)
    assert stacks.stack_get(db, s.id).name == "web"
    assert stacks.stack_get_by_name(db, "web").id == s.id
    assert stacks.stack_lookup(db, "web").id == s.id
    assert stacks.stack_lookup(db, s.id).disable_rollback is True
    with pytest.raises(stacks.StackExists):
        _stack(db, "web")
    with pytest.raises(stacks.StackNotFound):
        stacks.stack_lookup(db, "nope")
    _stack(db, "db")
    assert [x.name for x in stacks.stack_list(db)] == ["web", "db"]


def test_traversal_swap_wins_once(db, stack):
    t1, t2, t3 = (str(uuid.uuid4()) for _ in range(3))
    with db.session() as session:
        assert stacks.stack_swap_traversal_tx(session, stack.id, None, t1, {"action": "CREATE"})
    with db.session() as session:
        # A second swap from "no traversal" lost: the stack moved on.
        assert not stacks.stack_swap_traversal_tx(session, stack.id, None, t2)
        assert stacks.stack_swap_traversal_tx(session, stack.id, t1, t3)
    assert stacks.stack_get(db, stack.id).current_traversal == t3
    assert stacks.stack_get(db, stack.id).current_traversal != t1


def test_stack_set_status_and_delete_complete(db, stack):
    t = str(uuid.uuid4())
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, t,
                                       {"action": "DELETE", "status": "IN_PROGRESS"})
    assert not _set_status(db, stack.id, "old", "COMPLETE")
    assert _set_status(db, stack.id, t, "COMPLETE", "done")
    assert stacks.stack_get(db, stack.id) is None  # a completed delete soft-deletes
    gone = stacks.stack_get(db, stack.id, include_deleted=True)
    assert gone.status == "COMPLETE" and gone.deleted_at is not None
    # Once not IN_PROGRESS, a second completion does not win.
    assert not _set_status(db, stack.id, t, "FAILED")


def test_resource_lock_acquire_release_steal(db, stack):
    r = _resource(db, stack)
    first = resource_locks.resource_lock_acquire(db, r.id, ME)
    assert first.acquired and first.holder == ME and first.atomic_key == 1
    busy = resource_locks.resource_lock_acquire(db, r.id, OTHER)
    assert not busy.acquired and busy.holder == ME and busy.atomic_key == 1
    assert not resource_locks.resource_lock_release(db, r.id, OTHER)  # not the holder
    assert resource_locks.resource_lock_release(db, r.id, ME)
    assert stacks.resource_get(db, r.id).engine_id is None
    assert stacks.resource_get(db, r.id).atomic_key == 2

    assert resource_locks.resource_lock_acquire(db, r.id, DEAD).acquired
    # Stealing names the dead holder; a stale idea of who holds it fails.
    assert not resource_locks.resource_lock_steal(db, r.id, ME, OTHER).acquired
    stolen = resource_locks.resource_lock_steal(db, r.id, ME, DEAD)
    assert stolen.acquired and stolen.holder == ME
    assert not resource_locks.resource_lock_release(db, r.id, DEAD)  # the old holder woke up
    assert stacks.resource_get(db, r.id).engine_id == ME

    missing = resource_locks.resource_lock_acquire(db, 999_999, ME)
    assert not missing.acquired and not missing.found


def test_other_writes_do_not_make_a_lock_look_held(db, stack):
    # Heat conditioned release on atomic_key; any write that bumped the key
    # made the release fail. Here a holder's own writes never block release.
    r = _resource(db, stack)
    assert resource_locks.resource_lock_acquire(db, r.id, ME).acquired
    assert stacks.resource_set_state(db, r.id, ME, "CREATE", "IN_PROGRESS")
    with db.session() as session:
        assert stacks.resource_update_tx(session, r.id, {"engine_id": ME}, {"atomic_key": 40})
    assert resource_locks.resource_lock_release(db, r.id, ME)
    assert resource_locks.resource_lock_acquire(db, r.id, OTHER).acquired


def test_state_changes_need_the_lock(db, stack):
    r = _resource(db, stack)
    assert not stacks.resource_set_state(db, r.id, ME, "CREATE", "IN_PROGRESS")
    resource_locks.resource_lock_acquire(db, r.id, ME)
    assert stacks.resource_set_state(
        db, r.id, ME, "CREATE", "COMPLETE", "created",
        values={"physical_id": "p1"}, expected={"action": "INIT"})
    row = stacks.resource_get(db, r.id)
    assert (row.action, row.status, row.status_reason, row.physical_id) == (
        "CREATE", "COMPLETE", "created", "p1")
    assert not stacks.resource_set_state(
        db, r.id, ME, "UPDATE", "IN_PROGRESS", expected={"action": "INIT"})


def test_begin_needs_the_current_traversal(db, stack):
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, t1, {"status": "IN_PROGRESS"})
    r = _resource(db, stack)
    resource_locks.resource_lock_acquire(db, r.id, ME)
    assert stack_work.begin(db, r.id, ME, stack.id, t2,
                            stack_work.Begin("DELETE")) == outcome.SUPERSEDED
    assert isinstance(stack_work.begin(db, r.id, ME, stack.id, t1, stack_work.Begin("DELETE")),
                      stack_work.Begun)
    row = stacks.resource_get(db, r.id)
    assert (row.action, row.status, row.current_traversal) == ("DELETE", "IN_PROGRESS", t1)
    lost = stack_work.begin(db, r.id, "other", stack.id, t1, stack_work.Begin("DELETE"))
    assert lost == outcome.Outcome.bailed(
        f"resource {r.id}: its lock was taken by another engine")
    # A traversal that ended (timed out, cancelled without rollback) starts nothing.
    assert _set_status(db, stack.id, t1, "FAILED", "timed out")
    assert stack_work.begin(db, r.id, ME, stack.id, t1,
                            stack_work.Begin("UPDATE")) == outcome.SUPERSEDED


def test_replace_is_atomic_and_once(db, stack):
    t = str(uuid.uuid4())
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, t, {"status": "IN_PROGRESS"})
    old = _resource(db, stack)
    with db.session() as session:
        assert stacks.resource_replace_tx(session, old.id, ME, stack.id, t, None) is None
    resource_locks.resource_lock_acquire(db, old.id, ME)
    with db.session() as session:
        assert stacks.resource_replace_tx(session, old.id, ME, stack.id, "stale", None) is None
    with db.session() as session:
        new = stacks.resource_replace_tx(session, old.id, ME, stack.id, t, None, requires=[5])
    assert new is not None
    new = stacks.resource_get(db, new.id)
    assert (new.name, new.type, new.replaces, new.engine_id, new.requires) == (
        "data", "share", old.id, ME, [5])
    assert stacks.resource_get(db, old.id).replaced_by == new.id
    with db.session() as session:
        assert stacks.resource_replace_tx(session, old.id, ME, stack.id, t, None) is None


def test_purge_rows_and_templates(db, stack):
    with db.session() as session:
        t_old = stacks.template_create_tx(session, {"resources": {}}, stack.id)
        t_cur = stacks.template_create_tx(session, {"resources": {"a": {}}}, stack.id)
        t_row = stacks.template_create_tx(session, {"resources": {"b": {}}}, stack.id)
        other = stacks.template_create_tx(session, {"resources": {}}, None)
        _new_row(session, stack.id, "keep", "share", t_row)
        done = _new_row(session, stack.id, "gone", "share", t_old)
        stacks.resource_update_tx(session, done.id, {}, {"action": "DELETE", "status": "COMPLETE"})
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, "t", {"template_id": t_cur})
    with db.session() as session:
        assert stack_purge.purge_tx(session, stack.id) == (1, 1)
    assert [r.name for r in stacks.resource_list(db, stack.id)] == ["keep"]
    assert stacks.template_get(db, t_old) is None
    for kept in (t_cur, t_row, other):
        assert stacks.template_get(db, kept) is not None


def test_heads_names_counted_and_rows_settled(db, stack):
    """The reads and the write of a large stack's hot spots (issue 29): the
    stacks without their graphs, the resource names in one count, settled
    rows' template in bulk (only rows nobody holds)."""
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, "t1",
                                       {"current_deps": {"nodes": [[1, True]], "edges": []}})
    heads = {s.id: s for s in stack_work.stack_heads(db)}
    assert stack.id in heads and "current_deps" not in heads[stack.id].__dict__
    a, b = _resource(db, stack, "a").id, _resource(db, stack, "b").id
    _resource(db, stack, "a")  # a second row of the same name
    assert stacks.resource_name_count(db, stack.id) == 2
    assert resource_locks.resource_lock_acquire(db, b, "e1").acquired
    with db.session() as session:
        tid = stacks.template_create_tx(session, {"resources": {}}, stack.id)
        assert stacks.resources_settle_tx(session, [a, b], tid, chunk=1) == 1
    assert stacks.resource_get(db, a).template_id == tid
    assert stacks.resource_get(db, b).template_id != tid



@dataclasses.dataclass(frozen=True)
class _Lease:
    until: float
    deadline: float


def _share_rows(i):
    share = models.Share(id=str(uuid.uuid4()), size=1, share_proto="NFS", name=f"s{i}")
    inst = models.ShareInstance(id=str(uuid.uuid4()), share_id=share.id, host="h@b#p",
                                status="creating")
    return share, inst


def test_begin_many_begins_every_row_or_none(db, stack):
    """``begin_many``: several rows' work, each row's lock taken with its
    key, in one transaction — all of them begin (their shares and
    instances inserted, a table's in one statement; their events in one;
    their operations' requests running for this engine, with their leases,
    each key returned with its resource), or, when one row's lock moved or the
    traversal is not current, none does and nothing is written."""
    t = str(uuid.uuid4())
    with db.session() as session:
        stacks.stack_swap_traversal_tx(session, stack.id, None, t, {"status": "IN_PROGRESS"})
    rows = [_resource(db, stack, f"r{i}") for i in range(3)]
    made = [_share_rows(i) for i in range(3)]

    def items(keys):
        return [(r.id, stack_work.Begin(
            "CREATE", {"physical_id": inst.id}, (share, inst),
            op={"resource_type": "share_instance", "resource_id": inst.id, "action": "create",
                "host": "h@b#p", "args": {}}, op_lease=_Lease(60.0, 3600.0)), key)
            for r, (share, inst), key in zip(rows, made, keys, strict=True)]

    keys = [stacks.resource_get(db, r.id).atomic_key for r in rows]
    events = len(stack_events.events(db, stack.id))
    moved = [keys[0], keys[1] + 1, keys[2]]
    assert stack_work.begin_many(db, ME, stack.id, t, items(moved)) == outcome.RETRY
    assert stack_work.begin_many(db, ME, stack.id, "stale", items(keys)) == outcome.SUPERSEDED
    assert [(r.engine_id, r.action) for r in map(stacks.resource_get, [db] * 3,
                                                  [r.id for r in rows])] == [(None, "INIT")] * 3
    assert api.get(db, models.Share, made[0][0].id) is None
    assert len(stack_events.events(db, stack.id)) == events
    assert api.request_list(db) == []

    sent: list[str] = []

    def seen(*args):
        sent.append(args[2])

    sa.event.listen(db.engine, "before_cursor_execute", seen)
    try:
        begun = stack_work.begin_many(db, ME, stack.id, t, items(keys))
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", seen)
    assert isinstance(begun, list)
    inserts = [s.split("(")[0].split()[2].strip('"`') for s in sent if s.startswith("INSERT")]
    # The requests' keys come back from one INSERT on every database, each
    # with its resource (SQLite returns many rows in no promised order).
    assert sorted(inserts) == ["requests", "share_instances", "shares", "stack_events"]
    assert [(b.resource_id, b.key) for b in begun] == [
        (r.id, k + 1) for r, k in zip(rows, keys, strict=True)]
    for r, b, (share, inst) in zip(rows, begun, made, strict=True):
        row = stacks.resource_get(db, r.id)
        assert (row.engine_id, row.action, row.status, row.physical_id) == (
            ME, "CREATE", "IN_PROGRESS", inst.id)
        assert api.get(db, models.ShareInstance, inst.id).share_id == share.id
        req = api.get(db, models.Request, b.op_request_id)
        assert (req.resource_id, req.status, req.engine_id) == (inst.id, "running", ME)
        assert req.lease_expires_at is not None and b.op_lease is not None
    assert [e.resource_id for e in stack_events.events(db, stack.id)[events:]] == [
        r.id for r in rows]


def test_ends_end_every_row_as_end_does_in_one_statement(db, stack):
    """``ends_tx``: rows' ends as ``end_tx`` writes each (action and status,
    values, the lock let go with its key moved on), those of one shape in
    one UPDATE on PostgreSQL and SQLite; a row whose key moved is named and
    the caller's transaction writes nothing."""
    rows = [_resource(db, stack, f"e{i}") for i in range(3)]
    keys = []
    for r in rows:
        assert resource_locks.resource_lock_acquire(db, r.id, ME)
        keys.append(stacks.resource_get(db, r.id).atomic_key)

    def ends(of):
        return [(r.id, "CREATE", {"physical_id": f"p{i}"}, True, k)
                for i, (r, k) in enumerate(zip(rows, of, strict=True))]

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), db.session() as session:
        assert stack_work.ends_tx(session, ME, "COMPLETE",
                                  ends([keys[0], keys[1] + 1, keys[2]])) == rows[1].id
        raise RolledBack
    assert {stacks.resource_get(db, r.id).engine_id for r in rows} == {ME}
    with statements.sent(db, "UPDATE", "WITH") as sent, db.session() as session:
        assert stack_work.ends_tx(session, ME, "COMPLETE", ends(keys)) is None
    assert len(sent) == (3 if db.dialect == "mysql" else 1)
    got = [stacks.resource_get(db, r.id) for r in rows]
    assert [(g.engine_id, g.action, g.status, g.physical_id, g.atomic_key) for g in got] == [
        (None, "CREATE", "COMPLETE", f"p{i}", k + 1) for i, k in enumerate(keys)]
