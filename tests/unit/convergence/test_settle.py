"""Unchanged nodes settled in bulk by the preparation (convergence/settle.py,
issue 29): an update traverses only the changed nodes and those downstream
of them, on SQLite, PostgreSQL and MariaDB, with the in-process engine of
tests/unit/stack_rig.py."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.convergence.graph import Node
from sharemgr.db import api, models, sync_points

from tests.unit.stack_rig import Rig

SHARES = """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}, depends_on: [a]}
  c: {type: share, properties: {size: 1, proto: NFS}}
  d: {type: share, properties: {size: 1, proto: NFS, name: {get_attr: [c, name]}}}
  e: {type: share, properties: {size: 1, proto: NFS}}
"""
GROW_A = SHARES.replace("a: {type: share, properties: {size: 1",
                        "a: {type: share, properties: {size: 2")


@pytest.fixture
def any_rig(tmp_path, db_url):
    r = Rig(tmp_path, db_url=db_url)
    yield r
    r.close()


def _created(rig, name="web"):
    e = rig.engine()
    rig.create(name, SHARES)
    e.pump()
    assert (rig.stack(name).action, rig.stack(name).status) == ("CREATE", "COMPLETE")
    return e, {n: rows[0] for n, rows in rig.rows(name).items()}


def _checked(rig, traversal):
    """The nodes a check request of ``traversal`` was written for."""
    return {Node(r.args["resource_id"], r.args["is_update"]) for r in api.request_list(rig.db)
            if r.action == vocab.ACTION_CHECK and r.args.get("traversal") == traversal}


def _nodes(rows, *names):
    return {Node(rows[n].id, u) for n in names for u in (True, False)}


def test_an_update_traverses_only_what_changed_and_what_follows(any_rig):
    rig = any_rig
    e, rows = _created(rig)

    tr = rig.update("web", GROW_A)
    # a changed; b follows it (depends_on); c, d (which reads c) and e did not.
    assert tr.settled == _nodes(rows, "c", "d", "e")
    assert _checked(rig, tr.traversal_id) == {Node(rows["a"].id, True)}
    e.pump()
    # Clean-ups with nothing to do are reported for inline, without a check.
    checked = _checked(rig, tr.traversal_id)
    assert {Node(rows["a"].id, True), Node(rows["b"].id, True)} <= checked
    assert checked <= _nodes(rows, "a", "b")
    stack = rig.stack("web")
    assert (stack.action, stack.status) == ("UPDATE", "COMPLETE")
    after = {n: r[0] for n, r in rig.rows("web").items()}
    assert {n: r.id for n, r in after.items()} == {n: r.id for n, r in rows.items()}
    assert after["a"].properties["size"] == 2
    assert {r.template_id for r in after.values()} == {stack.template_id}
    assert [c["method"] for c in rig.calls()].count("extend_share") == 1
    assert sync_points.list_for_traversal(rig.db, stack.id, tr.traversal_id) == []


def test_settled_nodes_have_no_points_and_count_as_done(any_rig):
    """A settled node's check never runs, so nothing reads a point of its:
    the preparation writes points for the nodes to traverse only (and the
    markers at the stack of the roots among them); the stack's point
    counts the settled roots, and the progress counts settled nodes done."""
    from sharemgr.convergence import actions

    rig = any_rig
    e, rows = _created(rig)
    tr = rig.update("web", GROW_A)
    stack = rig.stack("web")
    points = {(p.entity_id, p.is_update): p
              for p in sync_points.list_for_traversal(rig.db, stack.id, tr.traversal_id)}
    traversed = _nodes(rows, "a", "b")
    roots = [n for n in tr.graph.roots() if n in traversed]
    assert set(points) == ({(str(n.resource_id), n.is_update) for n in traversed}
                           | {(sync_points.root_entity(stack.id, n.key), False) for n in roots}
                           | {(stack.id, True)})
    assert points[(stack.id, True)].atomic_key == len(tr.graph.roots()) - len(roots)
    assert actions.progress(rig.db, stack) == actions.Progress(3, 5)
    e.pump()
    assert (rig.stack("web").action, rig.stack("web").status) == ("UPDATE", "COMPLETE")


def test_an_in_place_update_takes_the_fast_path(any_rig, monkeypatch):
    """A resize of a share whose row nobody holds is begun, carried out and
    reported as a create is (worker ``_fast_update``), not through the
    general path's lock, re-read and second plan; b, after it and
    unchanged, still is checked the general way."""
    from sharemgr.convergence.act import Actor

    general: list[Node] = []
    act = Actor.act
    monkeypatch.setattr(Actor, "act", lambda self, ctx: general.append(ctx.node) or act(self, ctx))
    rig = any_rig
    e, rows = _created(rig)
    general.clear()
    rig.update("web", GROW_A)
    e.pump()
    assert (rig.stack("web").action, rig.stack("web").status) == ("UPDATE", "COMPLETE")
    assert [c["method"] for c in rig.calls()].count("extend_share") == 1
    assert rig.rows("web")["a"][0].properties["size"] == 2
    assert Node(rows["a"].id, True) not in general
    assert Node(rows["b"].id, True) in general


def test_a_change_upstream_traverses_everything_downstream(any_rig):
    rig = any_rig
    e, rows = _created(rig)
    tr = rig.update("web", SHARES.replace(
        "c: {type: share, properties: {size: 1", "c: {type: share, properties: {size: 3"))
    assert tr.settled == _nodes(rows, "a", "b", "e")
    assert _checked(rig, tr.traversal_id) == {Node(rows["c"].id, True)}
    e.pump()
    assert (rig.stack("web").action, rig.stack("web").status) == ("UPDATE", "COMPLETE")
    assert Node(rows["d"].id, True) in _checked(rig, tr.traversal_id)


def test_an_update_that_changes_nothing_completes_in_its_preparation(any_rig):
    rig = any_rig
    _e, rows = _created(rig)
    tr = rig.update("web", SHARES)
    assert tr.complete and tr.settled == _nodes(rows, *rows)
    assert _checked(rig, tr.traversal_id) == set()
    stack = rig.stack("web")
    assert (stack.action, stack.status) == ("UPDATE", "COMPLETE")
    assert stack.template_id == tr.template_id
    assert {r[0].template_id for r in rig.rows("web").values()} == {tr.template_id}


def test_a_resource_changed_underneath_is_checked(any_rig):
    """The physical side counts: a share whose recorded size moved (a drift
    the stack check wrote) is not settled, and its check resizes it back."""
    rig = any_rig
    e, rows = _created(rig)
    with rig.db.session() as session:
        session.execute(sa.update(models.Share).where(models.Share.id == rows["e"].physical_id)
                        .values(size=5))
    tr = rig.update("web", SHARES)
    assert tr.settled == _nodes(rows, "a", "b", "c", "d")
    assert _checked(rig, tr.traversal_id) == {Node(rows["e"].id, True)}
    e.pump()
    assert (rig.stack("web").action, rig.stack("web").status) == ("UPDATE", "COMPLETE")
    assert any(c["method"] == "shrink_share" for c in rig.calls())


def test_a_create_and_a_delete_settle_nothing(any_rig):
    rig = any_rig
    e = rig.engine()
    tr = rig.create("web", SHARES)
    assert tr.settled == frozenset() and len(_checked(rig, tr.traversal_id)) == 3  # a, c, e
    e.pump()
    tr = rig.start("web", "DELETE")
    assert tr.settled == frozenset()
    e.pump()
    assert rig.objects() == []
