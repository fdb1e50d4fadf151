"""Abandon and adopt (convergence/abandon.py) against the real engine: the data
abandon prints is what adopt takes back, with no driver call, and the
adopted stack updates and deletes like any other; adopt refuses what does
not fit and writes nothing."""

from __future__ import annotations

import json

import pytest
from sharemgr.convergence import abandon, actions
from sharemgr.db import stacks, status_reads

V1 = """
parameters:
  size: {type: number, default: 1}
resources:
  data: {type: share, properties: {size: {get_param: size}, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
"""


def _abandoned(rig, values=None):
    e = rig.engine()
    rig.create("web", V1) if values is None else actions.create(
        rig.db, "web", actions.load_template(V1, rig.backends, values))
    e.pump()
    data = abandon.abandon(rig.db, rig.stack("web"))
    return e, json.loads(json.dumps(data, default=str))  # what the CLI prints


def _adopt(rig, data, text=V1, values=None, name="again"):
    return abandon.adopt(rig.db, name, actions.load_template(text, rig.backends, values), data)


def test_abandon_keeps_everything_physical_and_prints_what_adopt_reads(rig):
    e, data = _abandoned(rig, {"size": 2})
    assert stacks.stack_get_by_name(rig.db, "web") is None
    assert data["name"] == "web" and data["parameters"] == {"size": 2}
    assert "parameter_values" not in data["template"]
    assert set(data["resources"]) == {"data", "snap"}
    share = data["resources"]["data"]
    assert (share["type"], share["properties"]["size"]) == ("share", 2)
    found = status_reads.share_with_status(rig.db, share["physical_id"])
    assert found is not None and found[1].status == "available"

    calls = len(rig.calls())
    stack = _adopt(rig, data, values={"size": 2})
    assert (stack.action, stack.status) == ("CREATE", "COMPLETE")
    assert len(rig.calls()) == calls  # no driver call
    rows = {r.name: r.physical_id for r in stacks.resource_list(rig.db, stack.id)}
    assert rows == {n: r["physical_id"] for n, r in data["resources"].items()}
    assert actions.progress(rig.db, stack).done == 2

    # Its rows are what a create would have left: an update of the same
    # template settles the share at the preparation (settle.py).
    same = rig.update("again", V1.replace("default: 1", "default: 2"))
    assert {same.names[n.resource_id] for n in same.settled if n.is_update} == {"data"}
    e.pump()
    # The adopted stack updates in place and deletes as any other.
    rig.update("again", V1.replace("default: 1", "default: 3"))
    e.pump()
    assert rig.stack("again").status == "COMPLETE"
    assert status_reads.share_with_status(rig.db, share["physical_id"])[0].size == 3
    rig.start("again", "DELETE")
    e.pump()
    assert status_reads.share_with_status(rig.db, share["physical_id"]) is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["resources"].pop("snap"), "'snap': the adopt data has no physical_id"),
    (lambda d: d["resources"]["snap"].update(type="share"), "the adopt data's is a share"),
    (lambda d: d["resources"]["snap"].update(physical_id="nope"), "snapshot nope does not exist"),
    (lambda d: d["resources"]["data"]["properties"].update(name="x"),
     "name is 'x', the template says None"),
    (lambda d: d["resources"].update(snap="not a mapping"), "no physical_id"),
])
def test_adopt_refuses_data_that_does_not_fit(rig, edit, message):
    _e, data = _abandoned(rig)
    edit(data)
    with pytest.raises(abandon.AdoptError, match=message):
        _adopt(rig, data)
    assert stacks.stack_get_by_name(rig.db, "again") is None


def test_adopt_refuses_a_property_the_database_contradicts(rig):
    _e, data = _abandoned(rig)
    with pytest.raises(abandon.AdoptError, match="size is 1, the template says 5"):
        _adopt(rig, data, values={"size": 5})
    with pytest.raises(abandon.AdoptError, match="proto is 'NFS', the template says 'CIFS'"):
        _adopt(rig, data, V1.replace("proto: NFS", "proto: CIFS"))


def test_adopt_refuses_what_another_stack_has_and_what_is_not_available(rig):
    e, data = _abandoned(rig)
    _adopt(rig, data, name="first")
    with pytest.raises(abandon.AdoptError, match="belongs to stack first"):
        _adopt(rig, data, name="second")
    rig.start("first", "DELETE")
    e.pump()
    with pytest.raises(abandon.AdoptError, match="does not exist"):
        _adopt(rig, data, name="second")
