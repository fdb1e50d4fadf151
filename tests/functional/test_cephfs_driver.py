"""The cephfs driver through share-manager and sharectl on the run's Ceph
cluster, with a libcephfs client writing and reading the shares: a share
whose quota is its size and follows an extend and a shrink, a shrink below
the data refused with the share left usable, a snapshot and a share made
from it holding its content, a cephx rule whose key mounts the share (and
only it) until it is denied, deletes that leave no subvolume or snapshot.
On SQLite + file locks and on PostgreSQL + Redis."""

from __future__ import annotations

import time

import pytest

from tests.functional.ceph_cluster import CephError
from tests.functional.harness import SETUPS
from tests.functional.local_harness import servers_for
from tests.functional.test_cephfs_kit import cephfs_options

pytestmark = pytest.mark.functional
GIB = 1 << 30


def _path(d, share_id: str) -> str:
    location = d.json("share", "show", share_id)["export_locations"][0]
    return (location["path"] if isinstance(location, dict) else location).split(":", 2)[-1]


@pytest.mark.long(40)
@pytest.mark.parametrize("setup", SETUPS)
def test_walk_through(ceph_cluster, deployment, request, setup):
    options = cephfs_options(ceph_cluster)
    group = options["cephfs_subvolume_group"]
    d = deployment(backends={"cephfs": {"share_driver": "cephfs", **options}},
                   **servers_for(request, setup))
    d.sync()
    d.start()

    def info(share_id: str) -> dict:
        return ceph_cluster.subvolume(group, share_id)

    def subvolumes() -> set[str]:
        return ceph_cluster.subvolumes(group)

    share = d.json("share", "create", "1", "--proto", "CEPHFS", "--name", "walk",
                   "--backend", "cephfs", "--wait")
    sid = share["status"] == "available" and share["id"]
    inst = d.json("share", "show", sid)["instance_id"]
    assert info(inst)["bytes_quota"] == GIB
    path = _path(d, sid)
    assert path.startswith(f"/volumes/{group}/{inst}/"), path
    ceph_cluster.files("write", f"{path}/one.txt", b"version one\n")
    assert ceph_cluster.files("read", f"{path}/one.txt") == b"version one\n"

    # A cephx rule: the client mounts the share with the rule's key, and
    # only the share; an ip rule is refused up front.
    client = f"c{inst[:8]}"
    rule = d.json("access", "allow", sid, "--type", "cephx", "--to", client, "--wait")
    assert rule["state"] == "active", rule
    [listed] = d.json("access", "list", sid)
    key = listed["access_key"]
    assert key and listed["access_to"] == client, listed
    ceph_cluster.files("write", "/mine.txt", b"from the client\n", auth_id=client, key=key,
                       root=path)
    assert ceph_cluster.files("read", f"{path}/mine.txt") == b"from the client\n"
    with pytest.raises(CephError):
        ceph_cluster.files("read", f"{path}/one.txt", auth_id=client)  # not at the root
    out = d.sharectl("access", "allow", sid, "--type", "ip", "--to", "127.0.0.1",
                     check=False)
    assert out.returncode == 2 and "cephx" in out.stderr, out.stderr
    d.sharectl("access", "deny", sid, rule["id"], "--wait")
    with pytest.raises(CephError):
        ceph_cluster.files("read", "/mine.txt", auth_id=client, root=path)
    assert client not in ceph_cluster.ceph("auth", "ls")

    # NFS and CIFS are not served here: refused, nothing left behind.
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--backend", "cephfs",
                     "--wait", check=False)
    assert out.returncode != 0

    assert d.json("share", "extend", sid, "3", "--wait")["size"] == 3
    assert info(inst)["bytes_quota"] == 3 * GIB

    # 2.5 GiB of (sparse) data: a shrink to 2 would put the quota below it.
    ceph_cluster.files("truncate", f"{path}/big.img", size=5 * GIB // 2)
    out = d.sharectl("share", "shrink", sid, "2", "--wait", check=False)
    assert out.returncode != 0
    shown = d.json("share", "show", sid)
    assert (shown["status"], shown["size"]) == ("available", 3), shown
    assert info(inst)["bytes_quota"] == 3 * GIB
    ceph_cluster.files("truncate", f"{path}/big.img", size=0)
    assert d.json("share", "shrink", sid, "2", "--wait")["size"] == 2
    assert info(inst)["bytes_quota"] == 2 * GIB

    snap = d.json("snapshot", "create", sid, "--name", "s1", "--wait")
    ceph_cluster.files("write", f"{path}/one.txt", b"version two\n")
    clone = d.json("share", "create", "2", "--proto", "CEPHFS", "--backend", "cephfs",
                   "--snapshot", snap["id"], "--wait")
    assert clone["status"] == "available"
    assert ceph_cluster.files("read", f"{_path(d, clone['id'])}/one.txt") == b"version one\n"
    assert ceph_cluster.files("read", f"{path}/one.txt") == b"version two\n"

    d.sharectl("share", "delete", clone["id"], "--wait")
    d.sharectl("snapshot", "delete", snap["id"], "--wait")
    assert ceph_cluster.json("fs", "subvolume", "snapshot", "ls", "cephfs", inst,
                             "--group_name", group) == []
    d.sharectl("share", "delete", sid, "--wait")
    assert subvolumes() == set()
    assert d.json("share", "list") == []


@pytest.mark.long(60)
@pytest.mark.parametrize("setup", SETUPS)
def test_a_clone_outlives_its_engine(ceph_cluster, deployment, request, setup):
    """share-manager is SIGKILLed once its create from a snapshot has started
    the clone (usually while the call waits for it); the next start settles
    it (the pass finds the clone still copying or done, the status poll
    ends it): the share is available with
    the snapshot's content, and the killed call's fencing lock only delayed
    that by its duration."""
    options = {**cephfs_options(ceph_cluster), "cephfs_fence_lock_seconds": "10"}
    group = options["cephfs_subvolume_group"]
    d = deployment(backends={"cephfs": {"share_driver": "cephfs", **options}},
                   **servers_for(request, setup))
    d.sync()
    engine = d.start()
    share = d.json("share", "create", "1", "--proto", "CEPHFS", "--backend", "cephfs",
                   "--wait")
    path = _path(d, share["id"])
    ceph_cluster.files("write", f"{path}/kept.txt", b"before the crash\n")
    snap = d.json("snapshot", "create", share["id"], "--wait")
    clone = d.json("share", "create", "1", "--proto", "CEPHFS", "--backend", "cephfs",
                   "--snapshot", snap["id"])
    inst = d.json("share", "show", clone["id"])["instance_id"]
    deadline = time.monotonic() + 60
    while True:  # the driver has started the clone: its call now waits for it
        try:
            ceph_cluster.json("fs", "clone", "status", "cephfs", inst, "--group_name", group)
            break
        except CephError:
            assert time.monotonic() < deadline, "the clone never started"
            time.sleep(0.1)
    engine.kill()
    # The kill may land while the call waits for the clone, after it handed
    # the copy to the poll, or (a fast clone) after the create ended.
    killed = d.json("share", "show", clone["id"])["status"]
    assert killed in ("creating_from_snapshot", "available"), killed

    d.start()
    shown = d.json("share", "show", clone["id"])
    deadline = time.monotonic() + 120
    while shown["status"] == "creating_from_snapshot" and time.monotonic() < deadline:
        time.sleep(0.5)
        shown = d.json("share", "show", clone["id"])
    assert shown["status"] == "available", shown
    assert ceph_cluster.files("read", f"{_path(d, clone['id'])}/kept.txt") == \
        b"before the crash\n"
    d.sharectl("share", "delete", clone["id"], "--wait")
    d.sharectl("snapshot", "delete", snap["id"], "--wait")
    d.sharectl("share", "delete", share["id"], "--wait")
