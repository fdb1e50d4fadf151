"""Host-assisted migration between two local backends of one host (issue
46), through share-manager and sharectl with the real NFS servers and
client, on SQLite + file locks and on PostgreSQL + Redis: thousands of
files, a sparse file, xattrs, hard links and a symlink arrive equal
(checked here by a manifest of the source taken before), the NFS client
reads the new export and the old one is gone; clients are read-only
while the copy runs; a cancel while copying and one after the copy leave
the share as it was, writable again, with nothing on the destination."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from tests.functional import local_harness as lh
from tests.functional.conftest import LOCAL_OPTIONS
from tests.functional.harness import SETUPS, wait_until

pytestmark = pytest.mark.functional


@pytest.fixture
def two_locals(deployment):
    """A factory: (Deployment, source options, destination options), two
    [local] backends ``local`` and ``local2`` on ports of their own."""
    lh.require_local()
    made = []

    def factory(extra: dict[str, str], **kw):
        src, dst = lh.backend_options(), lh.backend_options()
        d = deployment(backends={"local": src, "local2": dst},
                       extra={"DEFAULT": {**LOCAL_OPTIONS["DEFAULT"],
                                          "migration_continue_interval": "1",
                                          "backend_stats_interval": "1", **extra}}, **kw)
        d.sync()
        made.append(d)
        return d, src, dst

    yield factory
    for d in made:
        d.stop_all()
        for backend in ("local", "local2"):
            lh.cleanup(lh.local_root(d.state, backend))


def _location(d, share_id: str) -> str:
    first = d.json("share", "show", share_id)["export_locations"][0]
    return first["path"] if isinstance(first, dict) else first


def _manifest(root: Path) -> dict[str, tuple]:
    """Every entry's type, mode, owner, mtime, content hash, xattrs and
    link target, and which entries share an inode: what must arrive."""
    out: dict[str, tuple] = {}
    inodes: dict[int, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if rel == "lost+found":
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest() \
                if stat.S_ISREG(st.st_mode) else None
            xattrs = {n: os.getxattr(path, n) for n in os.listxattr(path)}
            first = inodes.setdefault(st.st_ino, rel) if st.st_nlink > 1 and \
                stat.S_ISREG(st.st_mode) else rel
            out[rel] = (st.st_mode, st.st_uid, st.st_gid,
                        None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns,
                        digest, xattrs, first)
    return out


def _populate(mount_point: Path) -> None:
    data = mount_point / "data"
    for i in range(40):
        sub = data / f"d{i:02}"
        sub.mkdir(parents=True)
        for j in range(50):  # 2,000 files
            (sub / f"f{j:02}").write_bytes(os.urandom(64 + j))
    os.link(data / "d00" / "f00", mount_point / "hard")
    os.symlink("data/d01/f01", mount_point / "link")
    os.setxattr(data / "d02" / "f02", "user.origin", b"source")
    os.chown(data / "d03" / "f03", 1234, 4321)
    os.chmod(data / "d03" / "f03", 0o640)
    with open(mount_point / "sparse", "wb") as f:
        f.seek(1 << 30)  # 1 GiB apparent, on a 32 MiB filesystem
        f.write(b"end")
    (mount_point / "hello.txt").write_text("hello from the source\n")


def _started(d, size: str, name: str) -> tuple[str, str, Path]:
    """The engine up with both backends reported, and an NFS share on
    ``local``: its id, its instance's id and where its image is mounted."""
    d.start()
    wait_until(lambda: {b["backend"] for b in d.json("backend", "list")} >= {"local",
                                                                          "local2"},
               timeout=30, what="both backends' reports")
    share = d.json("share", "create", size, "--proto", "NFS", "--name", name,
                   "--backend", "local", "--wait")
    return share["id"], share["instance_id"], \
        lh.local_root(d.state) / "mnt" / share["instance_id"]


def _task(d, sid: str) -> str:
    return d.json("share", "migration", "show", sid)["task_state"]


@pytest.mark.long(60)
@pytest.mark.parametrize("setup", SETUPS)
def test_local_to_local_moves_the_data(two_locals, request, tmp_path, setup):
    d, src, dst = two_locals({}, **lh.servers_for(request, setup))
    sid, source_id, source_mount = _started(d, "2", "moving")
    _populate(source_mount)
    before = _manifest(source_mount)
    d.sharectl("access", "allow", sid, "--type", "ip", "--to", "127.0.0.1", "--wait")
    old_loc = _location(d, sid)
    old_client, new_client = lh.Client(src), lh.Client(dst)
    assert old_client.ls("NFS", old_loc).returncode == 0

    shown = d.json("share", "migration", "start", sid, f"{d.host}@local2", "--wait")
    assert (shown["task_state"], shown["total_progress"]) == ("data_copying_completed",
                                                              "100%"), shown
    dest_id = shown["destination_instance_id"]
    done = d.json("share", "migration", "complete", sid, "--wait")
    assert done["task_state"] == "migration_success", done
    after = d.json("share", "show", sid)
    assert (after["status"], after["instance_id"], after["host"].partition("#")[0]) == (
        "available", dest_id, f"{d.host}@local2"), after

    dest_mount = lh.local_root(d.state, "local2") / "mnt" / dest_id
    assert _manifest(dest_mount) == before
    assert os.stat(dest_mount / "sparse").st_blocks * 512 < 1 << 20  # still sparse
    # The source is gone from its backend: no image, no mount, no export.
    assert not (lh.local_root(d.state) / "images" / f"{source_id}.img").exists()
    assert not source_mount.exists()
    assert old_client.ls("NFS", old_loc).returncode != 0
    # The rule was applied on the destination: the client reads the new export.
    new_loc = _location(d, sid)
    assert new_loc != old_loc
    wait_until(lambda: new_client.ls("NFS", new_loc).returncode == 0, timeout=30,
               what="the new export to serve the client")
    back = tmp_path / "back.txt"
    out = new_client.get("NFS", new_loc, "hello.txt", back)
    assert out.returncode == 0 and back.read_text() == "hello from the source\n", out.stderr
    assert new_client.put("NFS", new_loc, back, "written.txt").returncode == 0


@pytest.mark.long(60)
@pytest.mark.parametrize("setup", SETUPS)
def test_clients_are_read_only_while_copied_and_cancel_restores_them(two_locals, request,
                                                                     tmp_path, setup):
    # 1 MiB/s: the 12 MiB below take about twelve seconds to copy.
    d, src, _dst = two_locals({"migration_copy_bwlimit": "1024"},
                              **lh.servers_for(request, setup))
    sid, source_id, source_mount = _started(d, "1", "held")
    (source_mount / "big").write_bytes(os.urandom(12 << 20))
    (source_mount / "hello.txt").write_text("still here\n")
    d.sharectl("access", "allow", sid, "--type", "ip", "--to", "127.0.0.1", "--wait")
    loc, client = _location(d, sid), lh.Client(src)
    note = tmp_path / "note.txt"
    note.write_text("a write\n")
    assert client.put("NFS", loc, note, "before.txt").returncode == 0

    # Cancel while the copy runs: clients read but cannot write meanwhile.
    d.sharectl("share", "migration", "start", sid, f"{d.host}@local2")
    wait_until(lambda: _task(d, sid) == "data_copying_in_progress", timeout=30,
               what="the copy to start")
    dest_id = d.json("share", "migration", "show", sid)["destination_instance_id"]
    wait_until(lambda: client.put("NFS", loc, note, "during.txt").returncode != 0,
               timeout=10, what="the export to turn read-only")
    back = tmp_path / "back.txt"
    assert client.get("NFS", loc, "hello.txt", back).returncode == 0
    assert back.read_text() == "still here\n"
    assert _task(d, sid) == "data_copying_in_progress"  # the copy still runs
    out = d.json("share", "migration", "cancel", sid, "--wait")
    assert out["task_state"] == "migration_cancelled", out
    assert d.json("share", "show", sid)["status"] == "available"
    wait_until(lambda: client.put("NFS", loc, note, "after.txt").returncode == 0,
               timeout=10, what="writes to be allowed again")
    dest_root = lh.local_root(d.state, "local2")
    assert not (dest_root / "images" / f"{dest_id}.img").exists()
    assert not (dest_root / "mnt" / dest_id).exists()

    # Cancel once copied: the same.
    shown = d.json("share", "migration", "start", sid, f"{d.host}@local2", "--wait",
                   "--timeout", "120")
    assert shown["task_state"] == "data_copying_completed", shown
    dest_id = shown["destination_instance_id"]
    assert (dest_root / "mnt" / dest_id / "hello.txt").read_text() == "still here\n"
    assert client.put("NFS", loc, note, "copied.txt").returncode != 0
    out = d.json("share", "migration", "cancel", sid, "--wait")
    assert out["task_state"] == "migration_cancelled", out
    assert not (dest_root / "images" / f"{dest_id}.img").exists()
    wait_until(lambda: client.put("NFS", loc, note, "last.txt").returncode == 0,
               timeout=10, what="writes to be allowed again")
