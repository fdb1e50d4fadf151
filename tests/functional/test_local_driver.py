"""The local driver through share-manager and sharectl, with the real NFS
and SMB clients: an NFS share and a CIFS share refused before any rule,
written and read once allowed, full at their size, extended, read-only,
denied again; a snapshot and a share made from it; deletes that leave no
mount, export, image or loop device. On SQLite + file locks and on
PostgreSQL + Redis. Needs root and the packages (local_harness)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.functional import local_harness as lh
from tests.functional.harness import SETUPS

pytestmark = pytest.mark.functional

def _location(d, share_id: str) -> str:
    locations = d.json("share", "show", share_id)["export_locations"]
    first = locations[0]
    return first["path"] if isinstance(first, dict) else first


def _fill(mount_point: Path, leave: int) -> None:
    """Take all but ``leave`` bytes of a share's free room with one file."""
    st = os.statvfs(mount_point)
    size = st.f_bavail * st.f_frsize - leave
    lh.run("fallocate", "-l", str(size), str(mount_point / "filler"))


def _refused(out) -> bool:
    return out.returncode != 0


def _rule(d, sid, *args):
    return d.json("access", "allow", sid, *args, "--wait")


def _deny_all(d, sid):
    for r in d.json("access", "list", sid):
        d.sharectl("access", "deny", sid, r["id"], "--wait")


@pytest.mark.long(40)
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("proto", ["NFS", "CIFS"])
def test_walk_through(local, request, tmp_path, setup, proto):
    d, options = local(**lh.servers_for(request, setup))
    client = lh.Client(options)
    d.start()
    root = lh.local_root(d.state)
    small, big = tmp_path / "small.txt", tmp_path / "big.bin"
    small.write_text("version one\n")
    big.write_bytes(os.urandom((lh.UNIT_MIB + 4) * 1024 * 1024))  # more than one unit
    back = tmp_path / "back.txt"

    share = d.json("share", "create", "1", "--proto", proto, "--name", "walk",
                   "--backend", "local", "--wait")
    sid = share["id"]
    loc = _location(d, sid)
    assert loc.startswith("127.0.0.1:/shares/" if proto == "NFS" else "\\\\127.0.0.1\\"), loc

    # The backend reports replication_type None: intake refuses replicas.
    out = d.sharectl("replica", "create", sid, check=False)
    assert out.returncode == 2, out.stdout + out.stderr

    # No rule: the client is refused.
    assert _refused(client.put(proto, loc, small, "before.txt"))

    assert _rule(d, sid, "--type", "ip", "--to", "127.0.0.1")["state"] == "active"
    out = client.put(proto, loc, small, "one.txt")
    assert out.returncode == 0, out.stderr
    out = client.get(proto, loc, "one.txt", back)
    assert out.returncode == 0 and back.read_text() == "version one\n", out.stderr

    # A file larger than the share does not fit; after an extend it does.
    if proto == "NFS":
        # nfs-cp (libnfs 5.0, NFSv4) cannot write a file over ~3.8 KB to any
        # server (it fails before sending a WRITE): fill the share on the
        # host, leaving less room than the file, then write through NFS.
        _fill(root / "mnt" / share["instance_id"], leave=1024)
        big = tmp_path / "three_k.bin"
        big.write_bytes(os.urandom(3000))
    assert _refused(client.put(proto, loc, big, "big1.bin"))
    assert d.json("share", "extend", sid, "3", "--wait")["size"] == 3
    out = client.put(proto, loc, big, "big2.bin")
    assert out.returncode == 0, out.stderr

    # A snapshot keeps the content of its moment.
    snap = d.json("snapshot", "create", sid, "--name", "before", "--wait")
    assert snap["status"] == "available", snap
    later = tmp_path / "later.txt"
    later.write_text("written after the snapshot\n")
    assert client.put(proto, loc, later, "later.txt").returncode == 0

    # Read-only: reads work, writes are refused.
    _deny_all(d, sid)
    _rule(d, sid, "--type", "ip", "--to", "127.0.0.1", "--level", "ro")
    assert client.get(proto, loc, "one.txt", back).returncode == 0
    assert _refused(client.put(proto, loc, small, "ro.txt"))

    # Denied again: refused.
    _deny_all(d, sid)
    assert _refused(client.ls(proto, loc))
    assert _refused(client.get(proto, loc, "one.txt", back))

    # A share from the snapshot holds what the share held then.
    copy = d.json("share", "create", "3", "--proto", proto, "--name", "copy",
                  "--backend", "local", "--snapshot", snap["id"], "--wait")
    assert copy["status"] == "available", copy
    _rule(d, copy["id"], "--type", "ip", "--to", "127.0.0.1")
    copy_loc = _location(d, copy["id"])
    listing = client.ls(proto, copy_loc)
    assert listing.returncode == 0 and "one.txt" in listing.stdout, listing
    assert "later.txt" not in listing.stdout, listing.stdout
    out = client.get(proto, copy_loc, "one.txt", back)
    assert out.returncode == 0 and back.read_text() == "version one\n"

    # Reverted to the snapshot, the share holds what it held then, served
    # with its rules as before.
    assert d.json("share", "revert", snap["id"], "--wait")["status"] == "available"
    _rule(d, sid, "--type", "ip", "--to", "127.0.0.1")
    listing = client.ls(proto, loc)
    assert listing.returncode == 0 and "one.txt" in listing.stdout, listing
    assert "later.txt" not in listing.stdout, listing.stdout

    # Deleting everything leaves no mount, export, image or loop device.
    d.sharectl("share", "delete", copy["id"], "--wait")
    d.sharectl("snapshot", "delete", snap["id"], "--wait")
    d.sharectl("share", "delete", sid, "--wait")
    assert lh.mounts_under(root) == [] and lh.loops_under(root) == []
    assert not list((root / "images").iterdir()) and not list((root / "snapshots").iterdir())
    assert "EXPORT" not in (root / "ganesha" / "exports.conf").read_text()
    assert "[" not in (root / "samba" / "shares.conf").read_text()


def test_cifs_user_rules(local, tmp_path):
    """A ``user`` rule admits that Samba account (an administrator adds it
    with pdbedit, doc/local_driver.rst), at rw or ro; guests and other
    accounts stay out."""
    d, options = local()
    client = lh.Client(options)
    d.start()
    root = lh.local_root(d.state)
    share = d.json("share", "create", "1", "--proto", "CIFS", "--name", "team",
                   "--backend", "local", "--wait")
    sid = share["id"]
    loc = _location(d, sid)
    # Existing Unix accounts without a login, given Samba passwords.
    for user in ("daemon", "bin"):
        out = lh.run("pdbedit", "-s", str(root / "samba" / "smb.conf"), "-a", "-t", "-u", user,
                     input_text="secret\nsecret\n")
        assert out.returncode == 0, out.stderr
    note = tmp_path / "note.txt"
    note.write_text("for daemon\n")

    _rule(d, sid, "--type", "user", "--to", "daemon")
    out = client.put("CIFS", loc, note, "note.txt", user="daemon%secret")
    assert out.returncode == 0, out.stdout + out.stderr
    assert _refused(client.ls("CIFS", loc))                       # a guest
    assert _refused(client.ls("CIFS", loc, user="bin%secret"))    # another account
    assert _refused(client.ls("CIFS", loc, user="daemon%wrong"))  # a wrong password

    _deny_all(d, sid)
    _rule(d, sid, "--type", "user", "--to", "daemon", "--level", "ro")
    back = tmp_path / "back.txt"
    assert client.get("CIFS", loc, "note.txt", back, user="daemon%secret").returncode == 0
    assert back.read_text() == "for daemon\n"
    assert _refused(client.put("CIFS", loc, note, "again.txt", user="daemon%secret"))


def test_manage_and_unmanage_keep_the_data(local, tmp_path):
    """An NFS and a CIFS share unmanaged stay served with their data; drift
    reports them; managed again by their export paths they are renamed to
    their new shares (new export paths), start with no rule, and hold what
    was written before."""
    d, options = local()
    client = lh.Client(options)
    d.start()
    note, back = tmp_path / "note.txt", tmp_path / "back.txt"
    note.write_text("kept across manage\n")
    old = {}
    for proto in ("NFS", "CIFS"):
        share = d.json("share", "create", "1", "--proto", proto, "--backend", "local",
                       "--wait")
        _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
        assert client.put(proto, _location(d, share["id"]), note, "note.txt").returncode == 0
        d.sharectl("share", "unmanage", share["id"], "--wait")
        old[proto] = share
    orphans = {i["instance_id"]: i for i in d.json("reconcile", "drift")
               if i["kind"] == "orphan"}
    assert set(orphans) == {s["instance_id"] for s in old.values()}
    for proto, share in old.items():
        path = share["export_locations"][0]["path"]
        assert path in orphans[share["instance_id"]]["backend"]["export_paths"]
        # Still served as it was while unmanaged: the backend forgot nothing.
        assert client.get(proto, path, "note.txt", back).returncode == 0
        wrong = "CIFS" if proto == "NFS" else "NFS"
        out = d.sharectl("share", "manage", path, "--proto", wrong, "--backend", "local",
                         "--wait", check=False)
        assert out.returncode == 1 and "manage_error" in out.stderr
        managed = d.json("share", "manage", path, "--proto", proto, "--backend", "local",
                         "--name", f"managed-{proto}", "--wait")
        assert (managed["status"], managed["size"]) == ("available", 1)
        new_path = _location(d, managed["id"])
        assert managed["instance_id"] in new_path and new_path != path
        assert _refused(client.ls(proto, new_path))  # no rule yet
        _rule(d, managed["id"], "--type", "ip", "--to", "127.0.0.1")
        out = client.get(proto, new_path, "note.txt", back)
        assert out.returncode == 0 and back.read_text() == "kept across manage\n", out.stderr
    assert [i for i in d.json("reconcile", "drift") if i["kind"] == "orphan"] == []
