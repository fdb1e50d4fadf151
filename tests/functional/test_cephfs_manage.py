"""Manage and unmanage on a ``cephfs`` backend through share-manager and
sharectl: a subvolume made outside sharemgr is taken over under its own
name (Ceph cannot rename it) with its data, size and snapshots working,
forgotten again with its data kept, reported by drift as an orphan, taken
over once more, and deleted. On SQLite + file locks and on PostgreSQL +
Redis."""

from __future__ import annotations

import pytest

from tests.functional import local_harness as lh
from tests.functional.harness import SETUPS
from tests.functional.local_harness import servers_for
from tests.functional.test_cephfs_kit import cephfs_options

pytestmark = pytest.mark.functional
GIB = 1 << 30


def _names_keys(ceph, group: str) -> list[str]:
    out = lh.run("rados", "--conf", str(ceph.conf), "--keyring", str(ceph.admin_keyring),
                 "-p", "cephfs.cephfs.meta", "-N", "sharemgr", "listomapkeys",
                 f"{group}.names")
    return out.stdout.split() if out.returncode == 0 else []


@pytest.mark.long(40)
@pytest.mark.parametrize("setup", SETUPS)
def test_manage_a_subvolume_made_outside(ceph_cluster, deployment, request, setup):
    options = cephfs_options(ceph_cluster)
    group = options["cephfs_subvolume_group"]
    d = deployment(backends={"cephfs": {"share_driver": "cephfs", **options}},
                   **servers_for(request, setup))
    d.sync()
    d.start()
    d.json("share", "list")  # the backend is up: its group exists
    ceph_cluster.ceph("fs", "subvolumegroup", "create", "cephfs", group)
    ceph_cluster.ceph("fs", "subvolume", "create", "cephfs", "legacy", "--group_name", group,
                      "--size", str(2 * GIB))
    path = ceph_cluster.ceph("fs", "subvolume", "getpath", "cephfs", "legacy",
                             "--group_name", group).strip()
    ceph_cluster.files("write", f"{path}/old.txt", b"from before\n")

    def info() -> dict:
        return ceph_cluster.subvolume(group, "legacy")

    adopted = d.json("share", "manage", path, "--proto", "CEPHFS", "--backend", "cephfs",
                     "--name", "adopted", "--wait")
    assert (adopted["status"], adopted["size"], adopted["name"]) == ("available", 2, "adopted")
    inst = adopted["instance_id"]
    [location] = adopted["export_locations"]
    assert location["path"].endswith(":" + path), location
    # The same path again: refused up front, nothing written.
    out = d.sharectl("share", "manage", location["path"], "--proto", "CEPHFS", "--backend",
                     "cephfs", check=False)
    assert out.returncode == 2 and "already managed" in out.stderr, out.stderr

    # The share works as any other: a client through a cephx rule, extend,
    # snapshots; the calls reach the subvolume by its own name.
    rule = d.json("access", "allow", adopted["id"], "--type", "cephx", "--to", "adopter",
                  "--wait")
    [listed] = d.json("access", "list", adopted["id"])
    assert rule["state"] == "active" and listed["access_key"]
    assert ceph_cluster.files("read", "/old.txt", auth_id="adopter", key=listed["access_key"],
                              root=path) == b"from before\n"
    assert d.json("share", "extend", adopted["id"], "3", "--wait")["size"] == 3
    assert info()["bytes_quota"] == 3 * GIB
    snap = d.json("snapshot", "create", adopted["id"], "--wait")
    assert [s["name"] for s in ceph_cluster.json(
        "fs", "subvolume", "snapshot", "ls", "cephfs", "legacy", "--group_name", group)] \
        == [snap["instance_id"]]
    d.sharectl("snapshot", "delete", snap["id"], "--wait")
    assert not [i for i in d.json("reconcile", "drift") if i["kind"] == "orphan"]

    # Unmanage: forgotten, the subvolume and its data kept; drift reports it.
    d.sharectl("share", "unmanage", adopted["id"], "--wait")
    assert d.json("share", "list") == []
    assert info()["bytes_quota"] == 3 * GIB
    orphans = [i for i in d.json("reconcile", "drift") if i["kind"] == "orphan"]
    assert [o["instance_id"] for o in orphans] == ["legacy"], orphans

    # Taken over again under a new id, then deleted: nothing left.
    again = d.json("share", "manage", path, "--proto", "CEPHFS", "--backend", "cephfs",
                   "--wait")
    assert (again["status"], again["size"]) == ("available", 3)
    assert again["instance_id"] != inst
    assert ceph_cluster.files("read", f"{path}/old.txt") == b"from before\n"
    d.sharectl("share", "delete", again["id"], "--wait")
    assert ceph_cluster.subvolumes(group) == set()
    assert _names_keys(ceph_cluster, group) == []
