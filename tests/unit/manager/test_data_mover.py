"""The engine's data copy (manager/data_mover.py) on real files: what rsync
keeps (modes, owners, times, xattrs, hard links, symlinks, sparse files,
deletions), what the comparison finds, the flock that keeps a second copy
off a destination, and a copy stopped part-way."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sharemgr.manager import data_mover

from tests.conftest import need_program


@pytest.fixture(autouse=True)
def _rsync() -> None:
    need_program("rsync", "rsync")


def _tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    for i in range(200):
        (root / "a" / f"f{i}").write_bytes(os.urandom(100 + i))
    (root / "a" / "b" / "mode").write_text("x")
    os.chmod(root / "a" / "b" / "mode", 0o741)
    os.chown(root / "a" / "b" / "mode", 1234, 4321)
    os.utime(root / "a" / "b" / "mode", ns=(1_000_000_000, 1_500_000_000_123))
    os.link(root / "a" / "f1", root / "hard")
    os.symlink("a/f2", root / "link")
    os.setxattr(root / "a" / "f3", "user.colour", b"green")
    with open(root / "sparse", "wb") as f:
        f.seek(64 << 20)
        f.write(b"end")
    (root / "lost+found").mkdir()


def test_a_copy_keeps_everything_and_compares_equal(tmp_path):
    source, dest = tmp_path / "s", tmp_path / "d"
    source.mkdir()
    dest.mkdir()
    _tree(source)
    (dest / "stale").write_text("left by a copy cut short")
    seen: list[int] = []
    data_mover.copy(source, dest, stop=lambda: None, progress=seen.append)
    assert seen[-1] == 100
    assert data_mover.differences(source, dest) == []
    assert not (dest / "stale").exists()  # the destination ends equal
    assert not (dest / "lost+found").exists()  # each filesystem has its own
    assert os.stat(dest / "hard").st_ino == os.stat(dest / "a" / "f1").st_ino
    assert os.readlink(dest / "link") == "a/f2"
    assert os.getxattr(dest / "a" / "f3", "user.colour") == b"green"
    st = os.stat(dest / "a" / "b" / "mode")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_mtime_ns) == (
        0o741, 1234, 4321, 1_500_000_000_123)
    assert os.stat(dest / "sparse").st_blocks * 512 < 1 << 20  # still sparse


def _same_time(path: Path, data: bytes) -> None:
    """Other bytes of the same size and time: only the content tells."""
    st = os.stat(path)
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("change, words", [
    (lambda d: _same_time(d / "a" / "f5", b"x" * 105), "a/f5: content"),
    (lambda d: os.chmod(d / "a" / "f6", 0o600), "a/f6: mode or owner"),
    (lambda d: (d / "a" / "f7").unlink(), "a/f7: missing on the destination"),
    (lambda d: (d / "extra").write_text("x"), "extra: not on the source"),
    (lambda d: os.setxattr(d / "a" / "f3", "user.colour", b"red"), "a/f3: xattrs"),
    (lambda d: os.utime(d / "a" / "f8", ns=(1, 2)), "a/f8: modification time"),
    (lambda d: ((d / "hard").unlink(), shutil.copy2(d / "a" / "f1", d / "hard")),
     "hard links to it not kept"),
])
def test_the_comparison_finds_each_kind_of_difference(tmp_path, change, words):
    source, dest = tmp_path / "s", tmp_path / "d"
    source.mkdir()
    dest.mkdir()
    _tree(source)
    data_mover.copy(source, dest, stop=lambda: None, progress=lambda p: None)
    change(dest)
    found = data_mover.differences(source, dest)
    assert any(words in f for f in found), found


def test_a_second_copy_to_a_held_destination_is_busy(tmp_path):
    source, dest = tmp_path / "s", tmp_path / "d"
    source.mkdir()
    dest.mkdir()
    with data_mover.holding(dest):
        with pytest.raises(data_mover.CopyBusy):
            data_mover.copy(source, dest, stop=lambda: None, progress=lambda p: None)
        assert not data_mover.wait_free(dest, 0.3)
    assert data_mover.wait_free(dest, 0.3)


def test_a_stopped_copy_leaves_no_rsync_running(tmp_path):
    source, dest = tmp_path / "s", tmp_path / "d"
    source.mkdir()
    dest.mkdir()
    (source / "big").write_bytes(os.urandom(8 << 20))
    asked: list[int] = []
    ours: list[list[str]] = []

    def stop() -> str | None:
        asked.append(1)
        # The flock is rsync's alone: this process keeps no descriptor of
        # the destination while rsync runs (a paused engine would hold it).
        ours.append([f for f in os.listdir("/proc/self/fd")
                     if os.path.realpath(f"/proc/self/fd/{f}") == str(dest)])
        return "cancelled" if len(asked) > 2 else None

    with pytest.raises(data_mover.CopyStopped, match="cancelled"):
        # 256 KiB/s: 8 MiB takes half a minute, so the stop comes first.
        data_mover.copy(source, dest, stop=stop, progress=lambda p: None, bwlimit_kib=256,
                        poll=0.2)
    # Asked once with the flock taken, before rsync starts (this process
    # holds it then), then twice while rsync runs.
    assert len(ours) == 3 and ours[1:] == [[], []], ours
    running = subprocess.run(["pgrep", "-f", f"rsync .*{dest}"], capture_output=True)
    assert running.returncode == 1, running.stdout
    assert data_mover.wait_free(dest, 1.0)  # the flock went with it


def test_a_failed_copy_says_why(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    with pytest.raises(data_mover.CopyFailed, match="rsync exited"):
        data_mover.copy(tmp_path / "absent", dest, stop=lambda: None, progress=lambda p: None)
