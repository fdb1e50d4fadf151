"""NFS shares of a ``cephfs`` backend through share-manager and sharectl:
the driver runs NFS-Ganesha with FSAL CEPH, its exports kept in the
cluster; libnfs's nfs-cp writes and nfs-cat reads through an ip rule, the
data lands in the share's subvolume, a deny refuses the client, a share
from a snapshot is exported with the snapshot's content, and a delete
leaves no export, subvolume or cephx id. On SQLite + file locks and on
PostgreSQL + Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.functional import local_harness as lh
from tests.functional.ceph_cluster import CephError
from tests.functional.ceph_shared import _unavailable
from tests.functional.harness import SETUPS, wait_until
from tests.functional.local_harness import servers_for
from tests.functional.test_cephfs_kit import cephfs_options

pytestmark = pytest.mark.functional
FSAL_CEPH = Path("/usr/lib/x86_64-linux-gnu/ganesha/libfsalceph.so")


def nfs_options(ceph, port: int) -> dict[str, str]:
    return {**cephfs_options(ceph), "cephfs_protocol_helper_type": "NFS",
            "cephfs_ganesha_server_ip": "127.0.0.1", "cephfs_ganesha_nfs_port": str(port)}


def stop_ganesha(root, ceph, group: str, d) -> None:
    """Stop the engines (which start ganesha again when they find it
    stopped), the driver's ganesha, and evict its CephFS sessions of
    ``group`` (a stopped ganesha leaves them to the MDS's timeout, and the
    run's cluster is shared)."""
    d.stop_all()
    lh.stop_pid_file(root / "ganesha.pid", "ganesha.nfsd")
    for mds in ceph.json("fs", "status", "cephfs")["mdsmap"]:
        sessions = json.loads(ceph.ceph("tell", f"mds.{mds['name']}", "client", "ls") or "[]")
        for s in sessions:
            meta = s.get("client_metadata", {})
            if str(meta.get("entity_id", "")).startswith("ganesha-") and \
                    f"/volumes/{group}/" in str(meta.get("root", "")):
                ceph.ceph("tell", f"mds.{mds['name']}", "client", "evict", f"id={s['id']}")


def _rados_ls(ceph) -> list[str]:
    out = lh.run("rados", "--conf", str(ceph.conf), "--keyring", str(ceph.admin_keyring),
                 "-p", "cephfs.cephfs.meta", "-N", "sharemgr", "ls")
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _location(d, share_id: str) -> str:
    location = d.json("share", "show", share_id)["export_locations"][0]
    return location["path"] if isinstance(location, dict) else location


@pytest.mark.long(60)
@pytest.mark.parametrize("setup", SETUPS)
def test_nfs_through_ganesha(ceph_cluster, deployment, request, setup, tmp_path):
    lh.require_local()
    if not FSAL_CEPH.exists():
        _unavailable(f"no {FSAL_CEPH} (Debian package nfs-ganesha-ceph)")
    port = lh.free_port()
    options = nfs_options(ceph_cluster, port)
    group = options["cephfs_subvolume_group"]
    d = deployment(backends={"cephfs": {"share_driver": "cephfs", **options}},
                   **servers_for(request, setup))
    ganesha = d.state / "cephfs" / "cephfs" / "ganesha"
    request.addfinalizer(lambda: stop_ganesha(ganesha, ceph_cluster, group, d))
    d.sync()
    d.start()
    client = lh.Client({"local_nfs_port": str(port), "local_smb_port": "0"})

    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "n1",
                   "--backend", "cephfs", "--wait")
    sid = share["id"]
    inst = d.json("share", "show", sid)["instance_id"]
    loc = _location(d, sid)
    assert loc == f"127.0.0.1:/shares/{inst}", loc
    payload = tmp_path / "hello.txt"
    payload.write_text("through ganesha\n")
    # Exported to nobody until a rule lets the client in.
    assert client.put("NFS", loc, payload, "hello.txt").returncode != 0

    # Only ip rules: refused up front, nothing written.
    out = d.sharectl("access", "allow", sid, "--type", "cephx", "--to", "alice", check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert d.json("access", "list", sid) == []

    rule = d.json("access", "allow", sid, "--type", "ip", "--to", "127.0.0.1", "--wait")
    assert rule["state"] == "active", rule
    put = client.put("NFS", loc, payload, "hello.txt")
    assert put.returncode == 0, put.stderr
    got = client.get("NFS", loc, "hello.txt", tmp_path / "back.txt")
    assert got.returncode == 0 and got.stdout == "through ganesha\n", got.stderr
    path = ceph_cluster.ceph("fs", "subvolume", "getpath", "cephfs", inst,
                             "--group_name", group).strip()
    assert ceph_cluster.files("read", f"{path}/hello.txt") == b"through ganesha\n"

    # A rule beside it for another network changes nothing here.
    d.json("access", "allow", sid, "--type", "ip", "--to", "10.9.9.0/24", "--wait")
    assert client.ls("NFS", loc).returncode == 0

    snap = d.json("snapshot", "create", sid, "--name", "s1", "--wait")
    clone = d.json("share", "create", "1", "--proto", "NFS", "--backend", "cephfs",
                   "--snapshot", snap["id"], "--wait")
    assert clone["status"] == "available", clone
    # Read-only: the client reads the snapshot's content and cannot write.
    d.json("access", "allow", clone["id"], "--type", "ip", "--to", "127.0.0.0/8",
           "--level", "ro", "--wait")
    clone_loc = _location(d, clone["id"])
    got = client.get("NFS", clone_loc, "hello.txt", tmp_path / "clone.txt")
    assert got.returncode == 0 and got.stdout == "through ganesha\n", got.stderr
    assert client.put("NFS", clone_loc, payload, "new.txt").returncode != 0

    # Deny: the client is refused once the call returns.
    d.sharectl("access", "deny", sid, rule["id"], "--wait")
    assert client.put("NFS", loc, payload, "again.txt").returncode != 0
    assert client.get("NFS", loc, "hello.txt", tmp_path / "no.txt").returncode != 0
    # The other share's export is untouched.
    assert client.ls("NFS", clone_loc).returncode == 0

    clone_inst = d.json("share", "show", clone["id"])["instance_id"]
    d.sharectl("share", "delete", clone["id"], "--wait")
    d.sharectl("snapshot", "delete", snap["id"], "--wait")
    d.sharectl("share", "delete", sid, "--wait")
    assert ceph_cluster.subvolumes(group) == set()
    users = json.dumps(ceph_cluster.json("auth", "ls"))
    assert "ganesha-" + inst not in users and "ganesha-" + clone_inst not in users
    index = f"{group}.nfs-index"
    objects = _rados_ls(ceph_cluster)
    assert not [o for o in objects if o.startswith(f"{group}.nfs-export.")], objects
    wait_until(lambda: client.ls("NFS", loc).returncode != 0, timeout=10, what="unexported")
    assert index in objects
    with pytest.raises(CephError):
        ceph_cluster.files("read", f"{path}/hello.txt")


@pytest.mark.long(30)
def test_two_servers_of_one_host_keep_their_sessions(ceph_cluster, deployment, request,
                                                     tmp_path):
    """Two NFS backends of one host, each with its ganesha: their first
    exports have the same export id, and FSAL CEPH names a CephFS session
    by host name and export id; each server's own host name keeps the
    second from evicting the first's session (which then fails every call)."""
    lh.require_local()
    if not FSAL_CEPH.exists():
        _unavailable(f"no {FSAL_CEPH} (Debian package nfs-ganesha-ceph)")
    ports = {name: lh.free_port() for name in ("nfs1", "nfs2")}
    backends = {name: {"share_driver": "cephfs", **nfs_options(ceph_cluster, port)}
                for name, port in ports.items()}
    d = deployment(backends=backends)
    for name, opts in backends.items():
        group = opts["cephfs_subvolume_group"]
        root = d.state / "cephfs" / name / "ganesha"
        # Bound now: the loop variables change.
        request.addfinalizer(lambda r=root, g=group: stop_ganesha(r, ceph_cluster, g, d))
    d.sync()
    d.start()
    payload = tmp_path / "p.txt"
    payload.write_text("kept\n")
    locations = {}
    for name, port in ports.items():
        sid = d.json("share", "create", "1", "--proto", "NFS", "--backend", name,
                     "--wait")["id"]
        d.json("access", "allow", sid, "--type", "ip", "--to", "127.0.0.1", "--wait")
        client = lh.Client({"local_nfs_port": str(port), "local_smb_port": "0"})
        locations[name] = (client, _location(d, sid))
        put = client.put("NFS", locations[name][1], payload, f"{name}.txt")
        assert put.returncode == 0, put.stderr
    for name, (client, loc) in locations.items():
        got = client.get("NFS", loc, f"{name}.txt", tmp_path / f"{name}.back")
        assert got.returncode == 0 and got.stdout == "kept\n", (name, got.stderr)
