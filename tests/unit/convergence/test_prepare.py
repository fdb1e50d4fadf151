"""Traversal preparation (doc/specs.rst, spec 003) on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.convergence import lifecycle, prepare, properties, template
from sharemgr.convergence.graph import Graph, Node
from sharemgr.db import api, migration, models, stack_purge, stacks, sync_points
from sharemgr.db.engine import Database

from tests.unit import statements

U, C = True, False

V1 = template.parse(
    """
resources:
  data: {type: share, properties: {size: 10, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  copy: {type: share, properties: {size: 10, proto: NFS, snapshot: {get_resource: snap}}}
"""
)
# data grows (in place), snap goes, copy no longer depends on it, logs is new.
V2 = template.parse(
    """
resources:
  data: {type: share, properties: {size: 20, proto: NFS}}
  copy: {type: share, properties: {size: 10, proto: NFS}}
  logs: {type: share, properties: {size: 1, proto: CIFS}, depends_on: [data]}
"""
)


def _counts(db):
    with db.session() as session:
        return {
            m.__table__.name: session.scalar(sa.select(sa.func.count()).select_from(m))
            for m in (models.StackTemplate, models.StackResource, models.SyncPoint,
                      models.Request)
        }


def _rows(db, stack_id):
    return {r.id: r for r in stacks.resource_list(db, stack_id)}


def _check_requests(db, traversal_id):
    return sorted(
        (r.args["resource_id"], r.args["is_update"])
        for r in api.request_list(db)
        if r.action == vocab.ACTION_CHECK and r.args.get("traversal") == traversal_id
    )


def _update(db, rid, values):
    with db.session() as session:
        stacks.resource_update_tx(session, rid, {}, values)


def _finish(db, tr, status="COMPLETE"):
    """Stand in for the check-resource workflow: every chosen row now has its
    template's definition, every other row was cleaned up, stack complete."""
    for rid in tr.chosen.values():
        _update(db, rid, {
            "action": "CREATE", "status": "COMPLETE", "template_id": tr.template_id,
            "physical_id": f"p{rid}"})
    for rid in set(tr.names) - set(tr.chosen.values()):
        _update(db, rid, {"action": "DELETE", "status": "COMPLETE"})
    with db.session() as session:
        assert stacks.stack_set_status_tx(session, tr.stack_id, tr.traversal_id, status)
    if status == "COMPLETE":
        with db.session() as session:
            stack_purge.purge_tx(session, tr.stack_id)
    return stacks.stack_get(db, tr.stack_id)


def _create(db, name="web", tmpl=V1):
    with db.session() as session:
        stack = stacks.stack_create_tx(session, name)
    return lifecycle.prepare_traversal(db, stack, "CREATE", tmpl)


def test_new_rows_are_one_insert_and_one_update_however_many(db):
    """A preparation's new rows go in one INSERT, and the ``requires`` of
    those that require others in one UPDATE sent for all of them (it was a
    statement per row, then one per row again for ``requires``)."""
    chain = "".join(f"  s{i}: {{type: share, properties: {{size: 1, proto: NFS}}"
                    f"{f', depends_on: [s{i - 1}]' if i else ''}}}\n" for i in range(40))
    with statements.sent(db, "INSERT INTO stack_resources", "UPDATE stack_resources") as seen:
        tr = _create(db, tmpl=template.parse("resources:\n" + chain))
    assert [text.split()[0] for text, _ in seen] == ["INSERT", "UPDATE"]
    rows = _rows(db, tr.stack_id)
    assert sorted(tr.created) == sorted(rows) and len(rows) == 40
    for i in range(40):
        row = rows[tr.chosen[f"s{i}"]]
        assert row.name == f"s{i}" and (row.action, row.status) == ("INIT", "COMPLETE")
        assert row.requires == ([tr.chosen[f"s{i - 1}"]] if i else [])


def test_create(db):
    tr = _create(db)
    rows = _rows(db, tr.stack_id)
    assert {r.name: r.id for r in rows.values()} == dict(tr.chosen) == {
        "data": tr.chosen["data"], "snap": tr.chosen["snap"], "copy": tr.chosen["copy"]}
    assert set(tr.created) == set(rows)
    for row in rows.values():
        assert (row.action, row.status, row.template_id) == ("INIT", "COMPLETE", tr.template_id)
    d, s, c = (tr.chosen[n] for n in ("data", "snap", "copy"))
    assert rows[s].requires == [d] and rows[c].requires == [s] and rows[d].requires == []

    stack = stacks.stack_get(db, tr.stack_id)
    assert (stack.action, stack.status) == ("CREATE", "IN_PROGRESS")
    assert stack.current_traversal == tr.traversal_id
    assert stack.template_id == tr.template_id and stack.prev_template_id is None
    assert Graph.from_json(stack.current_deps) == tr.graph
    assert prepare.load_traversal_graph(stack) == tr.graph
    assert template.template_from_dict(stacks.template_get(db, tr.template_id)) == V1

    assert tr.leaves == (Node(d, U),)
    assert _check_requests(db, tr.traversal_id) == [(d, True)]
    request = api.request_list(db)[0]
    assert (request.resource_type, request.action, request.host) == (
        "stack_resource", "check_resource", None)
    assert request.args == {"stack_id": tr.stack_id, "traversal": tr.traversal_id,
                            "resource_id": d, "is_update": True, "input_data": {}}

    points = sync_points.list_for_traversal(db, tr.stack_id, tr.traversal_id)
    # One per node, the stack's, and one per root at the stack (its report).
    assert len(points) == len(tr.graph) + 1 + len(tr.graph.roots()) == 8
    assert (tr.stack_id, True) in {(p.entity_id, p.is_update) for p in points}

    with pytest.raises(prepare.InvalidStackAction):
        lifecycle.prepare_traversal(db, stack, "CREATE", V1)


def test_update_keeps_rows_adds_new_ones_and_cleans_up_removed(db):
    first = _create(db)
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE", V2)
    rows = _rows(db, stack.id)
    d, s, c = (first.chosen[n] for n in ("data", "snap", "copy"))
    assert tr.chosen["data"] == d and tr.chosen["copy"] == c  # same rows, updated in place
    logs = tr.chosen["logs"]
    assert tr.created == (logs,)
    assert rows[logs].requires == [d] and rows[logs].template_id == tr.template_id
    assert Node(s, U) not in tr.graph and Node(s, C) in tr.graph  # snap: clean-up only
    # snap is cleaned up after copy's update and clean-up (copy required it).
    assert tr.graph.requires(Node(s, C)) == {Node(c, C)}
    assert set(tr.leaves) == {Node(d, U), Node(c, U)}

    stack = stacks.stack_get(db, stack.id)
    assert (stack.action, stack.status) == ("UPDATE", "IN_PROGRESS")
    assert stack.prev_template_id == first.template_id  # the last one that completed
    assert stack.template_id == tr.template_id
    # The first traversal's points are gone: its engines learn they were superseded.
    assert sync_points.list_for_traversal(db, stack.id, first.traversal_id) == []
    assert not sync_points.sync(db, d, first.traversal_id, True, "x", 1).found
    assert len(sync_points.list_for_traversal(db, stack.id, tr.traversal_id)) == len(
        tr.graph) + 1 + len(tr.graph.roots())


def test_update_while_an_update_is_in_progress_keeps_the_rollback_target(db):
    first = _create(db)
    stack = _finish(db, first)
    second = lifecycle.prepare_traversal(db, stack, "UPDATE", V2)
    third = lifecycle.prepare_traversal(db, stacks.stack_get(db, stack.id), "UPDATE", V1)
    stack = stacks.stack_get(db, stack.id)
    assert stack.prev_template_id == first.template_id
    assert stack.template_id == third.template_id
    # V2's row for logs is not in V1: clean-up only.
    logs = second.chosen["logs"]
    assert Node(logs, U) not in third.graph and Node(logs, C) in third.graph


def test_type_change_replaces_the_row(db):
    first = _create(db, tmpl=template.parse("resources: {x: {type: share_server}}"))
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE",
                                   template.parse("resources: {x: {type: share_group}}"))
    old, new = first.chosen["x"], tr.chosen["x"]
    assert new != old
    rows = _rows(db, stack.id)
    assert rows[new].replaces == old and rows[old].replaced_by == new
    assert tr.graph.requires(Node(old, C)) == {Node(new, C)}  # old goes after the new exists


def test_a_row_being_deleted_gets_a_replacement(db):
    # Spec 001: an update node whose resource is DELETE_IN_PROGRESS gets a
    # replacement; preparation decides it once.
    first = _create(db, tmpl=template.parse("resources: {x: {type: share_server}}"))
    stack = _finish(db, first)
    old = first.chosen["x"]
    _update(db, old, {"action": "DELETE", "status": "IN_PROGRESS"})
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE",
                                   template.parse("resources: {x: {type: share_server}}"))
    assert tr.chosen["x"] != old and tr.created == (tr.chosen["x"],)
    assert Node(old, C) in tr.graph and Node(old, U) not in tr.graph


def test_choose_prefers_a_healthy_row_over_a_failed_replacement(db):
    first = _create(db, tmpl=template.parse("resources: {x: {type: share_server}}"))
    stack = _finish(db, first)
    old = first.chosen["x"]
    # An earlier traversal replaced x and the replacement failed to create.
    with db.session() as session:
        failed = stacks.resources_add_tx(session, [stacks.resource_new(
            stack.id, "x", "share_server", first.template_id, replaces=old)])[0]
        stacks.resource_update_tx(session, failed.id, {}, {"action": "CREATE",
                                                           "status": "FAILED"})
        stacks.resource_update_tx(session, old, {}, {"replaced_by": failed.id})
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE",
                                   template.parse("resources: {x: {type: share_server}}"))
    assert tr.chosen["x"] == old and tr.created == ()
    assert Node(failed.id, C) in tr.graph and Node(failed.id, U) not in tr.graph


def test_choose_prefers_an_in_progress_replacement_over_the_replaced_row(db):
    rows = [
        _Row(1, "x", "share", template_id=1, replaced_by=2),
        _Row(2, "x", "share", template_id=2, action="CREATE", status="IN_PROGRESS", replaces=1),
    ]
    tmpl = template.parse("resources: {x: {type: share, properties: {size: 1, proto: NFS}}}")
    chosen, replaced = prepare.choose_rows(rows, tmpl, new_template_id=3, current_template_id=2)
    assert chosen["x"].id == 2 and replaced == {}
    # Rolling back to template 1 picks the row it left.
    chosen, _ = prepare.choose_rows(rows, tmpl, new_template_id=1, current_template_id=2)
    assert chosen["x"].id == 1


class _Row:
    def __init__(self, id, name, type, template_id=None, action="CREATE", status="COMPLETE",
                 replaces=None, replaced_by=None):
        self.id, self.name, self.type, self.template_id = id, name, type, template_id
        self.action, self.status = action, status
        self.replaces, self.replaced_by, self.requires = replaces, replaced_by, []


def test_rollback_after_a_failed_update_reuses_the_completed_template(db):
    first = _create(db)
    stack = _finish(db, first)
    second = lifecycle.prepare_traversal(db, stack, "UPDATE", V2)
    stack = _finish(db, second, status="FAILED")
    before = _counts(db)["stack_templates"]
    tr = lifecycle.prepare_traversal(db, stack, "ROLLBACK")
    assert tr.template_id == first.template_id and tr.template == V1
    assert _counts(db)["stack_templates"] == before  # no new template row
    stack = stacks.stack_get(db, stack.id)
    assert (stack.action, stack.status) == ("ROLLBACK", "IN_PROGRESS")
    assert stack.template_id == stack.prev_template_id == first.template_id
    # data and copy keep their rows, logs (V2 only) is cleaned up, and snap,
    # removed by V2, got a new row since the old one was deleted.
    assert tr.chosen["data"] == first.chosen["data"]
    assert tr.chosen["copy"] == first.chosen["copy"]
    assert tr.chosen["snap"] != first.chosen["snap"] and tr.created == (tr.chosen["snap"],)
    logs = second.chosen["logs"]
    assert Node(logs, C) in tr.graph and Node(logs, U) not in tr.graph


def test_rollback_of_a_failed_create_removes_everything(db):
    first = _create(db)
    stack = _finish(db, first, status="FAILED")
    tr = lifecycle.prepare_traversal(db, stack, "ROLLBACK")
    assert tr.template.resources == {} and tr.chosen == {}
    assert all(not n.is_update for n in tr.graph) and len(tr.graph) == 3


def test_delete(db):
    first = _create(db)
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "DELETE")
    d, s, c = (first.chosen[n] for n in ("data", "snap", "copy"))
    assert tr.graph.topological_order() == [Node(c, C), Node(s, C), Node(d, C)]
    assert tr.leaves == (Node(c, C),) and _check_requests(db, tr.traversal_id) == [(c, False)]
    assert stacks.stack_get(db, stack.id).action == "DELETE"
    # Refused while the delete runs, saying so (not "once what stopped it is gone").
    with pytest.raises(prepare.InvalidStackAction, match="this one is still running"):
        lifecycle.prepare_traversal(db, stacks.stack_get(db, stack.id), "UPDATE", V1)
    # Deleting again while deleting is allowed (it restarts the traversal).
    again = lifecycle.prepare_traversal(db, stacks.stack_get(db, stack.id), "DELETE")
    # A delete that failed (a user's snapshot in the way) is only deleted
    # again: an update would judge what is left against the template's
    # defaults, its parameters forgotten (as Heat refuses it).
    assert lifecycle.fail(db, stack.id, again.traversal_id, "a snapshot is in the way")
    failed = stacks.stack_get(db, stack.id)
    assert (failed.action, failed.status) == ("DELETE", "FAILED")
    for action, target in (("UPDATE", V1), ("ROLLBACK", None)):
        with pytest.raises(prepare.InvalidStackAction, match="DELETE FAILED; only a delete"):
            lifecycle.prepare_traversal(db, failed, action, target)
    lifecycle.prepare_traversal(db, failed, "DELETE")


def test_nothing_to_do_completes_at_once(db):
    tr = _create(db, tmpl=template.Template.empty())
    assert tr.complete and len(tr.graph) == 0 and tr.leaves == ()
    stack = stacks.stack_get(db, tr.stack_id)
    assert (stack.action, stack.status) == ("CREATE", "COMPLETE")
    assert _counts(db)["sync_points"] == 0 and _counts(db)["requests"] == 0
    lifecycle.prepare_traversal(db, stack, "DELETE")
    assert stacks.stack_get(db, tr.stack_id) is None  # deleted, nothing left to wait for


def test_a_stale_stack_loses_and_writes_nothing(db):
    first = _create(db)
    stale = stacks.stack_get(db, first.stack_id)
    stack = _finish(db, first)
    lifecycle.prepare_traversal(db, stack, "UPDATE", V2)
    before = _counts(db)
    with pytest.raises(prepare.TraversalLost):
        lifecycle.prepare_traversal(db, stale, "UPDATE", V1)
    assert _counts(db) == before


def test_a_lost_race_inside_a_callers_transaction_keeps_the_callers_writes(db):
    first = _create(db)
    stale = stacks.stack_get(db, first.stack_id)
    lifecycle.prepare_traversal(db, _finish(db, first), "UPDATE", V2)
    before = _counts(db)
    with db.session() as session:
        api.request_add_tx(session, "share", "s1", "create", "h@b", {})
        with pytest.raises(prepare.TraversalLost):
            prepare.prepare_traversal_tx(session, stale, "UPDATE", V1)
    after = _counts(db)
    assert after == {**before, "requests": before["requests"] + 1}


def _race(db, stack, templates):
    """Prepare one UPDATE per template at the same moment, all from the same
    view of the stack. Returns {index: Traversal or None (lost)}."""
    barrier = threading.Barrier(len(templates))
    outcome, errors = {}, []

    def run(i, tmpl):
        try:
            barrier.wait()
            outcome[i] = lifecycle.prepare_traversal(db, stack, "UPDATE", tmpl)
        except prepare.TraversalLost:
            outcome[i] = None
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(templates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return outcome


def test_two_preparations_racing_one_wins_and_the_loser_leaves_no_rows(db_url):
    db = Database(db_url)
    try:
        migration.upgrade(db)
        for round_ in range(3):
            first = _create(db, name=f"race{round_}")
            stack = _finish(db, first)
            with db.session() as session:  # as completing the traversal does
                sync_points.delete_all_tx(session, stack.id)
            before = _counts(db)
            outcome = _race(db, stack, [V2, V1])
            winners = [tr for tr in outcome.values() if tr is not None]
            assert len(winners) == 1 and len(outcome) == 2
            won = winners[0]
            current = stacks.stack_get(db, stack.id)
            assert current.current_traversal == won.traversal_id
            assert current.template_id == won.template_id
            # Exactly the winner's rows were added: one template, its new
            # resource rows, its points, its leaves' requests.
            after = _counts(db)
            assert after["stack_templates"] == before["stack_templates"] + 1
            assert after["stack_resources"] == before["stack_resources"] + len(won.created)
            assert after["sync_points"] == before["sync_points"] + len(won.graph) + 1 + len(
                won.graph.roots())
            assert after["requests"] == before["requests"] + len(won.leaves)
            assert {r.id for r in stacks.resource_list(db, stack.id)} == set(won.names)
    finally:
        db.dispose()

V1_BIGGER = template.parse(
    """
resources:
  data: {type: share, properties: {size: 20, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  copy: {type: share, properties: {size: 10, proto: NFS, snapshot: {get_resource: snap}}}
"""
)


def _one(requests):
    assert len(requests) == 1, requests
    return requests[0]


def test_retrigger_in_the_newer_traversal_when_ready(db):
    first = _create(db)
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE", V1_BIGGER)
    d, s = tr.chosen["data"], tr.chosen["snap"]
    # snap's update waits for data's update in the new traversal: not ready.
    assert lifecycle.retrigger(db, stack.id, s) == []
    payload = properties.ResourceData("data", d, "p-data", {"size": 20}).to_dict()
    sync_points.sync(db, s, tr.traversal_id, True, Node(d, U).key, payload,
                     tr.graph.requires_keys(Node(s, U)))
    request = _one(lifecycle.retrigger(db, stack.id, s))
    assert request.args["traversal"] == tr.traversal_id
    assert request.args["resource_id"] == s and request.args["is_update"] is True
    assert request.args["input_data"] == {Node(d, U).key: payload}
    # data is a leaf of the new traversal: always ready; but it has reported
    # to snap's point, and only to it: its clean-up node waits for it too.
    assert _one(lifecycle.retrigger(db, stack.id, d)).args["input_data"] == {}
    assert lifecycle.retrigger(db, stack.id, 999_999) == []


def test_retrigger_skips_nodes_that_reported(db):
    first = _create(db)
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE", V1_BIGGER)
    d = tr.chosen["data"]
    node = Node(d, U)
    for succ in tr.graph.required_by(node):
        sync_points.sync(db, succ.resource_id, tr.traversal_id, succ.is_update, node.key,
                         None, tr.graph.requires_keys(succ))
    assert lifecycle.retrigger(db, stack.id, d, only=[node]) == []


def test_retrigger_a_resource_that_is_only_cleaned_up(db):
    first = _create(db)
    stack = _finish(db, first)
    tr = lifecycle.prepare_traversal(db, stack, "DELETE")
    c = first.chosen["copy"]
    request = _one(lifecycle.retrigger(db, stack.id, c))
    assert (request.args["resource_id"], request.args["is_update"]) == (c, False)
    assert lifecycle.retrigger(db, stack.id, first.chosen["data"]) == []  # waits for snap
    assert tr.leaves == (Node(c, C),)


def test_complete_and_fail(db):
    tr = _create(db)
    with db.session() as session:
        assert not lifecycle.complete_tx(session, tr.stack_id, "stale")
    assert not lifecycle.fail(db, tr.stack_id, "stale", "boom")
    assert lifecycle.fail(db, tr.stack_id, tr.traversal_id, "boom", rollback=False)
    stack = stacks.stack_get(db, tr.stack_id)
    assert (stack.status, stack.status_reason) == ("FAILED", "boom")
    # A failed traversal's points go with it, rolled back or not: a point
    # that exists says its traversal is current and in progress.
    assert sync_points.list_for_traversal(db, tr.stack_id, tr.traversal_id) == []
    rid = next(iter(tr.chosen.values()))
    with db.session() as session:
        assert not sync_points.sync_tx(session, rid, tr.traversal_id, True, "x", None).found

    second = lifecycle.prepare_traversal(db, stack, "DELETE")
    for rid in second.names:
        _update(db, rid, {"action": "DELETE", "status": "COMPLETE"})
    with db.session() as session:
        assert lifecycle.complete_tx(session, tr.stack_id, second.traversal_id)
    assert stacks.stack_get(db, tr.stack_id) is None
    assert sync_points.list_for_traversal(db, tr.stack_id, second.traversal_id) == []
    assert stacks.resource_list(db, tr.stack_id) == []


def test_graph_dot(db):
    tr = _create(db)
    dot = prepare.graph_dot(db, stacks.stack_get(db, tr.stack_id))
    assert dot.startswith('digraph "web" {')
    assert f'label="data\\nupdate #{tr.chosen["data"]}"' in dot


def test_losing_at_the_swap_rolls_back_every_row_created(db, monkeypatch):
    # The stack row lock makes the loser notice before it writes; should the
    # guarded swap itself lose, everything inserted by then goes too.
    first = _create(db)
    stack = _finish(db, first)
    before = _counts(db)
    monkeypatch.setattr(prepare.db_stacks, "stack_swap_traversal_tx", lambda *a, **k: False)
    with pytest.raises(prepare.TraversalLost):
        lifecycle.prepare_traversal(db, stack, "UPDATE", V2)  # would add a template, a row, points
    assert _counts(db) == before
    assert stacks.stack_get(db, stack.id).current_traversal == first.traversal_id


class _Deadlock(Exception):
    pgcode = "40P01"  # what PostgreSQL ends a deadlock's victim with


def _losing_one_deadlock(monkeypatch) -> list[str]:
    """The next delete of a stack's points is chosen as a deadlock's victim
    (the long fault run, seed 6121: a ``stack update`` deleting the points
    met an engine's report locking them in another order)."""
    real, lost = sync_points.delete_all_tx, list[str]()

    def delete_all_tx(session, stack_id, traversal_id=None):
        if not lost:
            lost.append(stack_id)
            raise sa.exc.OperationalError("DELETE FROM sync_points", {}, _Deadlock(
                "deadlock detected"))
        return real(session, stack_id, traversal_id)

    monkeypatch.setattr(sync_points, "delete_all_tx", delete_all_tx)
    return lost


def test_a_traversal_whose_preparation_loses_a_deadlock_is_prepared_again(db, monkeypatch):
    """A user's update (or delete, rollback) whose transaction the database
    ended for a deadlock runs again, whole: the user sees it succeed, not a
    database error (it was rolled back, so nothing is written twice)."""
    stack = _finish(db, _create(db))
    lost = _losing_one_deadlock(monkeypatch)
    tr = lifecycle.prepare_traversal(db, stack, "UPDATE", V2)
    assert lost == [stack.id]
    now = stacks.stack_get(db, stack.id)
    assert (now.action, now.status, now.current_traversal) == (
        "UPDATE", "IN_PROGRESS", tr.traversal_id)


def test_a_failure_that_loses_a_deadlock_is_written_again(db, monkeypatch):
    """``sharectl stack cancel`` (and a node's failure): the same."""
    tr = _create(db)
    lost = _losing_one_deadlock(monkeypatch)
    assert lifecycle.fail(db, tr.stack_id, tr.traversal_id, "cancelled", rollback=False)
    assert lost == [tr.stack_id]
    assert stacks.stack_get(db, tr.stack_id).status == "FAILED"
