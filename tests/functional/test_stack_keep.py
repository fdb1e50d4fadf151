"""Keeping what matters through sharectl and a real share-manager
(doc/convergence.rst, "Keeping what matters"): deletion_policy retain,
stack abandon and adopt, stack resource mark-unhealthy; on SQLite + file
locks and on PostgreSQL + Redis."""

from __future__ import annotations

import json

import pytest

from tests.functional.test_stacks import _rows, _setup, _write, embedded, servers  # noqa: F401

pytestmark = pytest.mark.functional

RETAINED = """
resources:
  data:
    type: share
    deletion_policy: Retain
    properties: {size: 1, proto: NFS}
  scratch: {type: share, properties: {size: 1, proto: NFS}}
"""
SCRATCH_ONLY = """
resources:
  scratch: {type: share, properties: {size: 1, proto: NFS}}
"""
V1 = """
parameters:
  size: {type: number, default: 1}
resources:
  data: {type: share, properties: {size: {get_param: size}, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
"""


@pytest.fixture(params=["embedded", "servers"])
def either(request):
    return request.getfixturevalue(request.param)


def _started(deployment, either):
    d = _setup(deployment, either)
    d.sync()
    d.start()
    return d


def _status(d, share_id):
    out = d.sharectl("share", "show", share_id, "-f", "json", check=False)
    return json.loads(out.stdout)["status"] if out.returncode == 0 else None


def test_a_retained_share_outlives_its_removal_and_its_stack(deployment, either):
    d = _started(deployment, either)
    v1, v2 = _write(d, "v1", RETAINED), _write(d, "v2", SCRATCH_ONLY)
    assert d.json("stack", "create", "web", "-t", v1, "--wait")["status"] == "COMPLETE"
    data, scratch = _rows(d, "web")["data"].physical_id, _rows(d, "web")["scratch"].physical_id

    assert d.json("stack", "update", "web", "-t", v2, "--dry-run") == {
        "data": "retained", "scratch": "unchanged"}
    assert d.json("stack", "update", "web", "-t", v2, "--wait")["status"] == "COMPLETE"
    assert set(_rows(d, "web")) == {"scratch"}
    assert _status(d, data) == "available"

    d.sharectl("stack", "delete", "web", "--wait")
    assert d.json("stack", "list") == []
    assert _status(d, data) == "available" and _status(d, scratch) is None
    # Managed as any user's share: it can be resized and deleted.
    d.sharectl("share", "extend", data, "2", "--wait")
    assert d.json("share", "show", data)["size"] == 2
    d.sharectl("share", "delete", data, "--wait")
    assert _status(d, data) is None

    out = d.sharectl("stack", "create", "bad", "-t", _write(d, "bad", RETAINED.replace(
        "Retain", "Keep")), check=False)
    assert out.returncode == 2 and "'deletion_policy' must be Retain or Delete" in out.stderr


def test_abandon_then_adopt(deployment, either):
    d = _setup(deployment, either)
    d.sync()
    v1 = _write(d, "v1", V1)
    # No engine yet: the create stays IN_PROGRESS, and abandon is refused.
    d.sharectl("stack", "create", "web", "-t", v1, "-P", "size=2")
    out = d.sharectl("stack", "abandon", "web", check=False)
    assert out.returncode == 2 and "CREATE IN_PROGRESS" in out.stderr, out.stderr
    d.start()
    _wait_complete(d, "web")

    out = d.sharectl("stack", "abandon", "web")
    data = json.loads(out.stdout)
    assert d.json("stack", "list") == []
    assert data["parameters"] == {"size": "2"} and set(data["resources"]) == {"data", "snap"}
    share = data["resources"]["data"]["physical_id"]
    assert _status(d, share) == "available"
    path = d.root / "abandoned.json"
    path.write_text(out.stdout)

    # A template that contradicts the share: exit 2, nothing written.
    out = d.sharectl("stack", "adopt", "again", "-t", v1, "-P", "size=5",
                     "--adopt-file", str(path), check=False)
    assert out.returncode == 2 and "size is 2, the template says 5" in out.stderr, out.stderr
    out = d.sharectl("stack", "adopt", "again", "-t", v1, "--adopt-file",
                     str(d.root / "nope.json"), check=False)
    assert out.returncode == 2 and "cannot read adopt data" in out.stderr
    assert d.json("stack", "list") == []

    snap = data["resources"]["snap"]["physical_id"]
    assert d.json("stack", "adopt", "again", "-t", v1, "--adopt-file", str(path),
                  "--dry-run") == {"data": f"adopted (share {share})",
                                   "snap": f"adopted (snapshot {snap})"}
    assert d.json("stack", "list") == []
    calls = len(d.backend("calls"))
    shown = d.json("stack", "adopt", "again", "-t", v1, "--adopt-file", str(path))
    assert (shown["action"], shown["status"], shown["progress"]) == ("CREATE", "COMPLETE", "2/2")
    assert shown["parameters"] == {"size": 2}  # the abandoned stack's values
    assert len(d.backend("calls")) == calls  # no driver call
    assert _rows(d, "again")["data"].physical_id == share
    out = d.sharectl("stack", "adopt", "third", "-t", v1, "--adopt-file", str(path),
                     check=False)
    assert out.returncode == 2 and "belongs to stack again" in out.stderr

    # Updated and deleted as any stack.
    assert d.json("stack", "update", "again", "-t", v1, "-P", "size=3",
                  "--wait")["status"] == "COMPLETE"
    assert d.json("share", "show", share)["size"] == 3
    d.sharectl("stack", "delete", "again", "--wait")
    assert _status(d, share) is None


def _wait_complete(d, name):
    from tests.functional.harness import wait_until

    wait_until(lambda: d.json("stack", "show", name)["status"] != "IN_PROGRESS",
               what=f"stack {name} to finish")
    assert d.json("stack", "show", name)["status"] == "COMPLETE"


def test_mark_unhealthy_then_update_or_converge_replaces_it(deployment, either):
    d = _started(deployment, either)
    v1 = _write(d, "v1", V1)
    d.sharectl("stack", "create", "web", "-t", v1, "--wait")
    before = _rows(d, "web")

    shown = d.json("stack", "resource", "mark-unhealthy", "web", "data", "--reason", "bad disk")
    assert (shown["action"], shown["status"], shown["status_reason"]) == (
        "CHECK", "FAILED", "bad disk")
    out = d.sharectl("stack", "resource", "mark-unhealthy", "web", "nope", check=False)
    assert out.returncode == 2 and "no resource 'nope'" in out.stderr

    assert d.json("stack", "update", "web", "-t", v1, "--dry-run") == {
        "data": "replaced: marked unhealthy: bad disk", "snap": "replaced (share)"}
    # No --allow-replace needed: the mark asked for the replacement.
    assert d.json("stack", "update", "web", "-t", v1, "--wait")["status"] == "COMPLETE"
    after = _rows(d, "web")
    assert after["data"].physical_id != before["data"].physical_id
    assert after["snap"].physical_id != before["snap"].physical_id
    assert (after["data"].action, after["data"].status) == ("CREATE", "COMPLETE")

    # --reset clears a mark; a mark then converge replaces.
    d.sharectl("stack", "resource", "mark-unhealthy", "web", "data")
    shown = d.json("stack", "resource", "mark-unhealthy", "web", "data", "--reset")
    assert (shown["action"], shown["status"]) == ("CHECK", "COMPLETE")
    d.sharectl("stack", "resource", "mark-unhealthy", "web", "snap")
    assert d.json("stack", "converge", "web", "--wait")["status"] == "COMPLETE"
    again = _rows(d, "web")
    assert again["data"].physical_id == after["data"].physical_id
    assert again["snap"].physical_id != after["snap"].physical_id
