"""Resource groups through sharectl and a real share-manager (doc/convergence.rst,
"Resource groups"): create a group of 3, scale it to 5 and to 2 by
``stack update`` (the highest indexes go, the others keep their shares), its
members' attributes as outputs, the preview of each scaling. On SQLite +
file locks and on PostgreSQL + Redis."""

from __future__ import annotations

import pytest

from tests.functional.test_stacks import _rows, _setup, _write, embedded, servers  # noqa: F401

pytestmark = pytest.mark.functional

TEMPLATE = """
parameters:
  count: {type: number, default: 3}
resources:
  shares:
    type: resource_group
    properties:
      count: {get_param: count}
      resource_def:
        type: share
        properties: {size: 1, proto: NFS, backend: dummy, name: "data-%index%"}
  snap:
    type: snapshot
    properties: {share: {get_attr: [shares, resource.1, id]}}
outputs:
  names: {get_attr: [shares, name]}
  ids: {get_attr: [shares, refs]}
  second: {get_attr: [shares, resource.1, name]}
"""


@pytest.fixture(params=["embedded", "servers"])
def either(request):
    return request.getfixturevalue(request.param)


def _members(d):
    rows = _rows(d, "web")
    return {n: r.physical_id for n, r in rows.items()
            if n.startswith("shares.") and not r.action == "DELETE"}


def _name(i):
    """Member i's share name: <stack>-<resource>-<name property>, %index% substituted."""
    return f"web-shares.{i}-data-{i}"


def _outputs(d):
    return {o["output_key"]: o["output_value"] for o in d.json("stack", "output", "list", "web")}


@pytest.mark.long(70)
def test_a_group_scales_by_update(deployment, either):
    d = _setup(deployment, either)
    d.sync()
    d.start()
    path = _write(d, "groups", TEMPLATE)

    # A mistake in the group: exit 2 naming the group and the member, nothing written.
    bad = _write(d, "bad", TEMPLATE.replace("size: 1", "size: '%index%'"))
    out = d.sharectl("stack", "create", "web", "-t", bad, check=False)
    assert out.returncode == 2, out.stderr
    assert "group 'shares' member 0 property 'size': must be an integer" in out.stderr
    assert d.json("stack", "list") == []

    assert d.json("stack", "create", "web", "-t", path, "--dry-run") == {
        "shares.0": "added", "shares.1": "added", "shares.2": "added", "snap": "added"}
    shown = d.json("stack", "create", "web", "-t", path, "--wait")
    assert shown["status"] == "COMPLETE", shown
    assert shown["groups"] == {"shares": 3} and shown["resources"] == 4
    three = _members(d)
    assert sorted(three) == ["shares.0", "shares.1", "shares.2"] and all(three.values())
    listed = {r["name"] for r in d.json("stack", "resource", "list", "web")}
    assert listed == {"shares.0", "shares.1", "shares.2", "snap"}
    assert _outputs(d) == {"names": [_name(i) for i in range(3)],
                           "ids": [three[f"shares.{i}"] for i in range(3)],
                           "second": _name(1)}
    snap = _rows(d, "web")["snap"]
    assert snap.properties["share"] == three["shares.1"]

    # Up to 5: two new members, the others (and the snapshot) unchanged.
    assert d.json("stack", "update", "web", "-t", path, "-P", "count=5", "--dry-run") == {
        "shares.0": "unchanged", "shares.1": "unchanged", "shares.2": "unchanged",
        "shares.3": "added", "shares.4": "added", "snap": "unchanged"}
    shown = d.json("stack", "update", "web", "-t", path, "-P", "count=5", "--wait")
    assert shown["status"] == "COMPLETE" and shown["groups"] == {"shares": 5}
    five = _members(d)
    assert sorted(five) == [f"shares.{i}" for i in range(5)]
    assert {n: five[n] for n in three} == three
    assert _rows(d, "web")["snap"].physical_id == snap.physical_id
    assert _outputs(d)["names"] == [_name(i) for i in range(5)]

    # Down to 2: the highest indexes go, the rest keep their shares.
    assert d.json("stack", "update", "web", "-t", path, "-P", "count=2", "--dry-run") == {
        "shares.0": "unchanged", "shares.1": "unchanged", "shares.2": "deleted",
        "shares.3": "deleted", "shares.4": "deleted", "snap": "unchanged"}
    shown = d.json("stack", "update", "web", "-t", path, "-P", "count=2", "--wait")
    assert shown["status"] == "COMPLETE" and shown["groups"] == {"shares": 2}
    two = _members(d)
    assert two == {n: three[n] for n in ("shares.0", "shares.1")}
    assert _outputs(d) == {"names": [_name(0), _name(1)],
                           "ids": [three["shares.0"], three["shares.1"]],
                           "second": _name(1)}
    gone = {five[f"shares.{i}"] for i in (2, 3, 4)}
    shares = {s["id"] for s in d.json("share", "list")}
    assert not gone & shares and set(two.values()) <= shares

    # A reference past the count is refused, naming the group and the index.
    out = d.sharectl("stack", "update", "web", "-t", path, "-P", "count=1", check=False)
    assert out.returncode == 2
    assert "resource 'snap' property 'share': group 'shares' has no member 1 (count 1)" \
        in out.stderr, out.stderr
    assert _members(d) == two
