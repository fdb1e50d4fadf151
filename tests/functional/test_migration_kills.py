"""SIGKILL at each boundary of a host-assisted migration (issue 46) between
two dummy backends, whose shares lend folders of files: inside the start
(the destination made), while the engine copies, once the copy is checked
(phase 1 done), and inside the complete (the source deleted). On SQLite
with the engine restarted, and on PostgreSQL + Redis with two engines
settling what the killed one left. After each: the share available on
exactly one backend with its files, no object the database does not know,
and never two copies into one destination at once."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from sharemgr.manager import data_mover

from tests.functional.harness import SETUPS, assert_backend_agrees, servers, wait_until

pytestmark = pytest.mark.functional

BACKENDS = {"alpha": {"share_driver": "dummy"}, "beta": {"share_driver": "dummy"}}
# 2 MiB/s: the 8 MiB file below keeps a copy going for about four seconds.
FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2",
                    "migration_continue_interval": "1", "backend_stats_interval": "1",
                    "migration_copy_bwlimit": "2048"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(backends=BACKENDS, extra=FAST, **servers(request))
    d.sync()
    d.servers = request.param != "embedded"
    return d


class Copies:
    """Samples the rsync copies running into a folder; the most seen at once.
    A copy is a process group: the data mover starts rsync in a group of its
    own, and rsync's receiver, its child, stays in it. (Counting the
    processes whose parent is not an rsync counted one copy twice when a
    sample read the sender alive and then its receiver already orphaned by
    the sender's death: /proc is not read at one instant.)"""

    def __init__(self, folder: Path) -> None:
        self.folder, self.most, self._stop = str(folder), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def running(self) -> int:
        groups = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                pgid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
            except (OSError, IndexError, ValueError):
                continue
            cmd = " ".join(a.decode(errors="replace") for a in argv)
            if cmd.startswith("rsync ") and self.folder in cmd:
                groups.add(pgid)
        return len(groups)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, self.running())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def _data(d, backend: str, inst_id: str) -> Path:
    return d.state / "dummy" / backend / "data" / inst_id


def _share(d) -> tuple[str, str, Path]:
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "moving",
                   "--backend", "alpha", "--wait")
    d.sharectl("access", "allow", share["id"], "--type", "ip", "--to", "10.0.0.1", "--wait")
    folder = _data(d, "alpha", share["instance_id"])
    (folder / "tree").mkdir(parents=True)
    for i in range(300):
        (folder / "tree" / f"f{i}").write_bytes(os.urandom(100 + i))
    os.link(folder / "tree" / "f0", folder / "hard")
    os.setxattr(folder / "tree" / "f1", "user.k", b"v")
    (folder / "big").write_bytes(os.urandom(8 << 20))
    return share["id"], share["instance_id"], folder


def _engines(d, name: str, config: Path | None = None) -> list:
    """One engine on SQLite; two on PostgreSQL + Redis."""
    return [d.start(config=config, name=f"{name}{i}") for i in range(2 if d.servers else 1)]


def _ready(d) -> None:
    wait_until(lambda: {b["backend"] for b in d.json("backend", "list")} >= {"alpha", "beta"},
               timeout=30, what="both backends' reports")


def _task(d, sid: str) -> str:
    return d.json("share", "migration", "show", sid)["task_state"]


def _settled(d, sid: str, task: str, reference: Path) -> None:
    """The migration ended in ``task``; the share available where that puts
    it, with the files of ``reference``; nothing else on either backend."""
    wait_until(lambda: _task(d, sid) == task, timeout=90, what=f"the migration in {task}")
    shown = d.json("share", "migration", "show", sid)
    row = d.json("share", "show", sid)
    assert row["status"] == "available", row
    here = "beta" if task == "migration_success" else "alpha"
    assert row["host"].partition("#")[0] == f"{d.host}@{here}", row
    assert data_mover.differences(reference, _data(d, here, row["instance_id"])) == []
    other = "alpha" if here == "beta" else "beta"
    gone = shown["source_instance_id"] if here == "beta" else shown["destination_instance_id"]
    assert not _data(d, other, gone).exists()
    assert_backend_agrees(d)
    assert d.json("share", "extend", sid, "2", "--wait")["status"] == "available"


def _reference(folder: Path, tmp_path: Path) -> Path:
    """A copy of the source's files made by other means (cp -a) to compare
    the end with."""
    ref = tmp_path / "reference"
    subprocess.run(["cp", "-a", str(folder), str(ref)], check=True)
    return ref


@pytest.mark.long(45)
@pytest.mark.parametrize("crash, backend, ends", [
    ("create_share", "beta", "migration_error"),
    ("delete_share", "alpha", "migration_success"),
])
def test_a_kill_inside_the_start_or_the_complete_is_settled(setup, tmp_path, crash, backend,
                                                            ends):
    d = setup
    first = d.start(name="maker")
    _ready(d)
    sid, src, folder = _share(d)
    reference = _reference(folder, tmp_path)
    crashing = d.write_config(tmp_path / "crash.conf", **{backend: {"dummy_crash_after": crash}})
    copies = Copies(d.state / "dummy" / "beta" / "data")
    if crash == "delete_share":
        d.json("share", "migration", "start", sid, f"{d.host}@beta", "--force-host-assisted",
               "--wait", "--timeout", "90")
    first.terminate()
    engine = d.start(config=crashing, name="crashing")
    verb = ["complete"] if crash == "delete_share" else [
        "start", f"{d.host}@beta", "--force-host-assisted"]
    d.sharectl("share", "migration", *verb[:1], sid, *verb[1:])
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    _engines(d, "after")
    _settled(d, sid, ends, reference)
    assert copies.stop() <= 1
    del src


@pytest.mark.long(60)
def test_a_kill_while_copying_and_once_copied_is_settled(setup, tmp_path):
    d = setup
    killed = d.start(name="copier")
    _ready(d)
    sid, _src, folder = _share(d)
    reference = _reference(folder, tmp_path)
    copies = Copies(d.state / "dummy" / "beta" / "data")
    d.sharectl("share", "migration", "start", sid, f"{d.host}@beta", "--force-host-assisted")
    wait_until(lambda: _task(d, sid) == "data_copying_in_progress", timeout=30,
               what="the engine's copy under way")
    wait_until(lambda: copies.running() == 1, timeout=30, what="the copy running")
    killed.kill()
    # The copy died with its engine: no copy runs while no engine does.
    wait_until(lambda: copies.running() == 0, timeout=10, what="the copy to die")
    survivors = _engines(d, "after")
    wait_until(lambda: _task(d, sid) == "data_copying_completed", timeout=90,
               what="the copy done by the next engine")
    for engine in survivors:
        engine.kill()
    _engines(d, "last")
    d.json("share", "migration", "complete", sid, "--wait", "--timeout", "90")
    _settled(d, sid, "migration_success", reference)
    assert copies.stop() <= 1
