"""A one-node Ceph cluster of the tests' own: one mon, one mgr, one OSD
(bluestore on a sparse file), one MDS and a CephFS volume, every file under
one folder, on loopback ports of its own, cephx on. Debian's Ceph 16.2
packages (``make test`` installs them as root); without them a test skips,
or fails under CI=true.

Run by hand::

    python -m tests.functional.ceph_cluster up /tmp/ceph     # prints its ceph.conf
    python -m tests.functional.ceph_cluster down /tmp/ceph

Pitfalls it keeps clear of (ARCHITECTURE §10): ceph-mgr runs in the
foreground (daemonized it closes stderr and ``fs subvolume authorize``
fails), ``bluestore block path`` stays unset, pg autoscaling is off, every
path (the cluster log's too) is under the folder, and mgr ``fs`` commands
get a timeout (they block while no MDS is active)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.functional.harness import Loaded

PACKAGES = "ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common ceph-fuse"
DAEMONS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds")
VOLUME = "cephfs"
OSD_BYTES = 4 << 30  # sparse: only what is written takes room


def missing() -> list[str]:
    return [d for d in (*DAEMONS, "ceph", "ceph-authtool", "monmaptool", "ceph-fuse")
            if shutil.which(d) is None]


def _free_port(ip: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


class CephError(RuntimeError):
    pass


class Cluster:
    """``up()`` builds and starts it (about 15 s), ``down()`` stops every
    daemon; ``ceph(...)`` runs the CLI as client.admin."""

    def __init__(self, root: Path, ip: str = "127.0.0.1") -> None:
        """``ip``: the address every daemon binds (a bridge's, for engines
        in network namespaces)."""
        self.root = root.resolve()
        self.ip = ip
        self.conf = self.root / "ceph.conf"
        self.admin_keyring = self.root / "keyring" / "client.admin.keyring"
        self.procs: dict[str, subprocess.Popen] = {}

    # The CLI ---------------------------------------------------------------

    def ceph(self, *args: str, timeout: float = 30, name: str = "client.admin",
             keyring: Path | None = None, check: bool = True) -> str:
        cmd = ["ceph", "--conf", str(self.conf), "--name", name,
               "--keyring", str(keyring or self.admin_keyring), "--connect-timeout",
               str(int(timeout)), *args]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CephError(f"ceph {' '.join(args)}: no answer in {timeout}s") from exc
        if check and out.returncode != 0:
            raise CephError(f"ceph {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def json(self, *args: str, timeout: float = 30) -> Loaded:
        return json.loads(self.ceph(*args, "--format", "json", timeout=timeout) or "null")

    def subvolumes(self, group: str, volume: str = "cephfs") -> set[str]:
        """The names of the subvolumes of ``group``."""
        return {s["name"] for s in self.json("fs", "subvolume", "ls", volume,
                                             "--group_name", group)}

    def subvolume(self, group: str, name: str, volume: str = "cephfs") -> dict:
        """``fs subvolume info`` of one subvolume (its quota: ``bytes_quota``)."""
        return self.json("fs", "subvolume", "info", volume, name, "--group_name", group)

    # Set-up ----------------------------------------------------------------

    def _write_conf(self, port: int, fsid: str) -> None:
        r = self.root
        self.conf.write_text(f"""[global]
fsid = {fsid}
mon host = v2:{self.ip}:{port}
public addr = {self.ip}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {r}/keyring/$name.keyring
run dir = {r}/run
admin socket = {r}/run/$name.asok
pid file = {r}/run/$name.pid
log file = {r}/log/$name.log
mon cluster log file = {r}/log/cluster.log
crash dir = {r}/crash
exporter sock dir = {r}/run
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon data avail warn = 1
mon data avail crit = 0
mon warn on pool no redundancy = false
ms bind msgr1 = false

[mon]
mon data = {r}/mon/$cluster-$id
[mgr]
mgr data = {r}/mgr/$cluster-$id
[osd]
osd data = {r}/osd/$cluster-$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {OSD_BYTES}
osd fast shutdown = false
osd memory target = 1073741824
[mds]
mds cache memory limit = 268435456
mds data = {r}/mds/$cluster-$id
""")

    def _run(self, *cmd: str, stdin: str | None = None) -> str:
        out = subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=60)
        if out.returncode != 0:
            raise CephError(f"{' '.join(cmd)}: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def _start(self, name: str, *cmd: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the process keeps it)
        self.procs[name] = subprocess.Popen(
            [*cmd, "--conf", str(self.conf), "-f"], stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        (self.root / "run" / f"{name}.popen").write_text(str(self.procs[name].pid))

    def up(self, timeout: float = 120) -> None:
        if missing():
            raise CephError(f"missing {', '.join(missing())} (Debian packages {PACKAGES})")
        r = self.root
        for sub in ("keyring", "run", "log", "crash", "mon/ceph-a", "mgr/ceph-x",
                    "osd/ceph-0", "mds/ceph-a"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        port, fsid = _free_port(self.ip), str(uuid.uuid4())
        self._write_conf(port, fsid)
        mon_keyring = r / "keyring" / "mon..keyring"  # mkfs wants an empty mon data
        self._run("ceph-authtool", "--create-keyring", str(mon_keyring), "--gen-key",
                  "-n", "mon.", "--cap", "mon", "allow *")
        self._run("ceph-authtool", "--create-keyring", str(self.admin_keyring), "--gen-key",
                  "-n", "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
                  "--cap", "mds", "allow *", "--cap", "mgr", "allow *")
        self._run("ceph-authtool", str(mon_keyring), "--import-keyring", str(self.admin_keyring))
        monmap = r / "monmap"
        self._run("monmaptool", "--create", "--addv", "a", f"[v2:{self.ip}:{port}]",
                  "--fsid", fsid, str(monmap))
        self._run("ceph-mon", "--conf", str(self.conf), "--mkfs", "-i", "a",
                  "--monmap", str(monmap), "--keyring", str(mon_keyring))
        self._start("mon.a", "ceph-mon", "-i", "a", "--keyring", str(mon_keyring))
        self._wait(lambda: self.ceph("mon", "stat", timeout=5, check=False) != "", timeout,
                   "the mon answers")
        self.ceph("auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd",
                  "allow *", "mds", "allow *", "-o", str(r / "keyring" / "mgr.x.keyring"))
        self._start("mgr.x", "ceph-mgr", "-i", "x")
        self._osd()
        self.ceph("auth", "get-or-create", "mds.a", "mon", "allow profile mds", "osd",
                  "allow rwx", "mds", "allow", "mgr", "allow profile mds",
                  "-o", str(r / "keyring" / "mds.a.keyring"))
        self._start("mds.a", "ceph-mds", "-i", "a")
        self._wait(self._mgr_available, timeout, "the mgr is available")
        self._wait(lambda: self.json("osd", "stat").get("num_up_osds") == 1,
                   timeout, "the OSD is up")
        self.ceph("fs", "volume", "create", VOLUME, timeout=timeout)
        self._wait(self._mds_active, timeout, "the MDS is active")

    def client(self, name: str, caps: tuple[str, ...] = (
            "mgr", "allow rw", "mon", "allow r",
            "osd", f"allow rwx pool=cephfs.{VOLUME}.meta namespace=sharemgr")) -> Path:
        """A cephx client ``client.<name>`` (by default with the caps the
        cephfs driver needs); its keyring where ceph.conf looks for it."""
        keyring = self.root / "keyring" / f"client.{name}.keyring"
        self.ceph("auth", "get-or-create", f"client.{name}", *caps, "-o", str(keyring))
        return keyring

    def files(self, op: str, path: str, data: bytes = b"", size: int = 0,
              auth_id: str = "admin", key: str | None = None, root: str = "/") -> bytes:
        """A libcephfs client (Debian's Python and python3-cephfs) on the
        file system, mounted at ``root`` as ``client.<auth_id>`` (with
        ``key``, when given, as its keyring): ``write`` data to ``path``
        (under the root), ``read`` it, or ``truncate`` it to ``size`` (a
        sparse file: its size counts in a quota, its bytes are not
        written)."""
        if key is not None:
            (self.root / "keyring" / f"client.{auth_id}.keyring").write_text(
                f"[client.{auth_id}]\n\tkey = {key}\n")
        out = subprocess.run(["/usr/bin/python3", "-c", _FILES, str(self.conf), auth_id,
                              VOLUME, op, path, str(size), root], input=data,
                             capture_output=True, timeout=60)
        if out.returncode != 0:
            raise CephError(f"cephfs {op} {path}: {out.stderr.decode(errors='replace')[-500:]}")
        return out.stdout

    def _osd(self) -> None:
        osd_uuid = str(uuid.uuid4())
        secret = self._run("ceph-authtool", "--gen-print-key").strip()
        osd_id = self._osd_new(osd_uuid, secret)
        keyring = self.root / "keyring" / f"osd.{osd_id}.keyring"
        self._run("ceph-authtool", "--create-keyring", str(keyring), "--name", f"osd.{osd_id}",
                  "--add-key", secret)
        self._run("ceph-osd", "--conf", str(self.conf), "-i", osd_id, "--mkfs",
                  "--osd-uuid", osd_uuid)
        self._start(f"osd.{osd_id}", "ceph-osd", "-i", osd_id)

    def _osd_new(self, osd_uuid: str, secret: str) -> str:
        out = subprocess.run(
            ["ceph", "--conf", str(self.conf), "--name", "client.admin", "--keyring",
             str(self.admin_keyring), "osd", "new", osd_uuid, "-i", "-"],
            input=json.dumps({"cephx_secret": secret}), capture_output=True, text=True,
            timeout=30)
        if out.returncode != 0:
            raise CephError(f"ceph osd new: {out.stderr.strip()}")
        return out.stdout.strip()

    def _mgr_available(self) -> bool:
        return bool(self.json("mgr", "stat", timeout=10).get("available"))

    def _mds_active(self) -> bool:
        status = self.json("fs", "status", VOLUME, timeout=10)
        return any(m.get("state") == "active" for m in status.get("mdsmap", []))

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.root / "log" / f"{name}.out").read_text(errors="replace")
                raise CephError(f"{name} exited ({proc.returncode}): "
                                f"{tail.strip().splitlines()[-1:] or ''}")

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if predicate():
                    return
            except (CephError, json.JSONDecodeError, AttributeError) as exc:
                last = exc
            time.sleep(0.3)
        raise CephError(f"timed out after {timeout}s waiting until {what}"
                        + (f" (last: {last})" if last else ""))

    def down(self) -> None:
        """Stop every daemon this folder's cluster started (by this object
        or by an earlier ``up`` in another process)."""
        pids = {name: p.pid for name, p in self.procs.items()}
        for f in (self.root / "run").glob("*.popen"):
            pids.setdefault(f.stem, int(f.read_text()))
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 20
        for pid in pids.values():
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        for p in self.procs.values():
            p.wait(5)
        for f in (self.root / "run").glob("*.popen"):
            f.unlink()


_FILES = """
import sys, cephfs
conf, auth, volume, op, path, size, root = sys.argv[1:8]
fs = cephfs.LibCephFS(conffile=conf, auth_id=auth)
fs.conf_set("client_mount_timeout", "10")
fs.mount(mount_root=root.encode(), filesystem_name=volume.encode())
try:
    if op == "write":
        data = sys.stdin.buffer.read()
        fd = fs.open(path.encode(), "w", 0o644)
        fs.write(fd, data, 0)
        fs.close(fd)
    elif op == "truncate":
        fd = fs.open(path.encode(), "w", 0o644)
        fs.ftruncate(fd, int(size))
        fs.close(fd)
    else:
        fd = fs.open(path.encode(), "r", 0)
        sys.stdout.buffer.write(fs.read(fd, 0, fs.fstat(fd).st_size))
        fs.close(fd)
finally:
    fs.unmount()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    cluster = Cluster(args.folder)
    try:
        if args.action == "up":
            started = time.monotonic()
            cluster.up()
            print(f"{cluster.conf} (up in {time.monotonic() - started:.1f}s)")
        else:
            cluster.down()
    except CephError as exc:
        print(f"ceph_cluster {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
