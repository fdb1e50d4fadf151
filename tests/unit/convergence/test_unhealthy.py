"""A resource marked unhealthy (db/stack_keep.py, CHECK FAILED) is replaced by
the next update of the same template: decide says REPLACE, the
preparation's bulk settling (settle.py) leaves it to a check, the preview
says replaced — without counting it as a share whose data is lost."""

from __future__ import annotations

import pytest
from sharemgr.convergence import actions, preview
from sharemgr.db import stack_keep

V1 = """
resources:
  data: {type: share, properties: {size: 1, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  other: {type: share, properties: {size: 1, proto: NFS}}
"""


def _created(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    return e, {n: v[0] for n, v in rig.rows("web").items()}


def test_the_next_update_replaces_it_and_what_depends_on_it(rig):
    e, before = _created(rig)
    stack = rig.stack("web")
    stack_keep.resource_mark_unhealthy(rig.db, stack.id, before["data"].id, "disk smells")
    marked = rig.rows("web")["data"][0]
    assert (marked.action, marked.status, marked.status_reason) == (
        "CHECK", "FAILED", "disk smells")

    got = preview.preview(rig.db, actions.load_template(V1, rig.backends),
                          actions.current_rows(rig.db, stack))
    assert {(c.name, c.change) for c in got.changes} == {
        ("data", "replaced"), ("snap", "replaced"), ("other", "unchanged")}
    (c,) = [c for c in got.changes if c.name == "data"]
    assert c.reason == "marked unhealthy: disk smells" and not got.lost_shares()

    traversal = rig.update("web", V1)
    # Only "other" was settled at the preparation: data and snap are traversed.
    settled = {traversal.names[n.resource_id] for n in traversal.settled if n.is_update}
    assert settled == {"other"}
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    after = {n: v[0] for n, v in rig.rows("web").items()}
    assert after["data"].physical_id != before["data"].physical_id
    assert after["snap"].physical_id != before["snap"].physical_id
    assert after["other"].physical_id == before["other"].physical_id
    assert (after["data"].action, after["data"].status) == ("CREATE", "COMPLETE")


def test_reset_clears_the_mark_and_the_update_then_settles_it(rig):
    e, before = _created(rig)
    stack = rig.stack("web")
    stack_keep.resource_mark_unhealthy(rig.db, stack.id, before["data"].id, None)
    assert rig.rows("web")["data"][0].status_reason == "marked unhealthy"
    stack_keep.resource_mark_unhealthy(rig.db, stack.id, before["data"].id, None, reset=True)
    row = rig.rows("web")["data"][0]
    assert (row.action, row.status, row.status_reason) == ("CHECK", "COMPLETE", None)
    traversal = rig.update("web", V1)
    # Settled again at the preparation (shares are; snapshots never are).
    settled = {traversal.names[n.resource_id] for n in traversal.settled if n.is_update}
    assert settled == {"data", "other"}
    e.pump()
    assert rig.rows("web")["data"][0].physical_id == before["data"].physical_id


def test_refused_while_a_traversal_runs_or_once_reset(rig):
    _e, before = _created(rig)
    stack = rig.stack("web")
    with pytest.raises(stack_keep.Refused, match="not marked unhealthy"):
        stack_keep.resource_mark_unhealthy(rig.db, stack.id, before["data"].id, None,
                                           reset=True)
    rig.update("web", V1.replace("size: 1, proto: NFS}\n  snap", "size: 2, proto: NFS}\n  snap"))
    with pytest.raises(stack_keep.Refused, match="UPDATE IN_PROGRESS"):
        stack_keep.resource_mark_unhealthy(rig.db, stack.id, before["other"].id, None)
    assert rig.rows("web")["other"][0].status == "COMPLETE"
