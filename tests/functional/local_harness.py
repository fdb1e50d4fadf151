"""Helpers for the local driver's functional tests: the requirement check
(skip with the reason, or fail under CI=true), free ports, the real NFS
and SMB clients, and a clean-up that leaves no server, mount or loop
device behind, even after a failed test."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sharemgr.drivers.local.samba import runtime_dir

from tests.conftest import IN_CI

PROGRAMS = ("ganesha.nfsd", "smbd", "pdbedit", "nfs-cp", "nfs-cat", "nfs-ls", "smbclient",
            "mkfs.ext4", "losetup", "resize2fs", "fsfreeze")
SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
# A small size unit (MiB per size "GiB") keeps writes past a share's size quick.
UNIT_MIB = 16


def require_local() -> None:
    """Skip (fail under CI=true) unless this runs as root with the packages
    the local driver and its clients need (``make test`` installs them)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    missing = [p for p in PROGRAMS if shutil.which(p, path=SEARCH) is None]
    if missing:
        problems.append("missing " + ", ".join(missing) + " (Debian packages nfs-ganesha "
                        "nfs-ganesha-vfs samba smbclient libnfs-utils)")
    if not Path("/dev/loop-control").exists():
        problems.append("no loop devices (/dev/loop-control)")
    if not problems:
        return
    msg = "local driver tests need root, loop devices and the NFS/SMB packages: " + \
        "; ".join(problems)
    if IN_CI:
        pytest.fail(msg + " (CI=true: they are required)")
    pytest.skip(msg)


CAP_SYS_RESOURCE = 24  # linux/capability.h
PR_CAPBSET_DROP = 24  # linux/prctl.h


def without_online_resize() -> None:
    """A ``preexec_fn``: the engine started with it (and every program it
    runs) lacks CAP_SYS_RESOURCE, which ext4's online resize needs, so an
    extend always takes the offline path, whatever the machine allows."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the kernel's
    ephemeral range: ``free_port() + 1`` may be the port another test's
    ``free_port()`` was just given."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        base = random.randrange(10000, low - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base


def backend_options(**extra: str) -> dict[str, str]:
    """Options of a [local] backend group on ports of its own."""
    return {"share_driver": "local", "local_nfs_port": str(free_port()),
            "local_smb_port": str(free_port()), "local_size_unit_mib": str(UNIT_MIB),
            **extra}


def local_root(state: Path, backend: str = "local") -> Path:
    return state / "local" / backend


def run(*argv: str, timeout: float = 60, input_text: str | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          input=input_text)


class Client:
    """The standard userspace clients against one backend's servers."""

    def __init__(self, options: dict[str, str]) -> None:
        self.nfs_port = int(options["local_nfs_port"])
        self.smb_port = int(options["local_smb_port"])

    def _nfs_url(self, location: str, name: str = "") -> str:
        host, path = location.split(":", 1)
        return f"nfs://{host}{path}/{name}?version=4&nfsport={self.nfs_port}"

    def _smb_share(self, location: str) -> str:
        return "//" + location.lstrip("\\").replace("\\", "/")

    def put(self, proto: str, location: str, local: Path, name: str,
            user: str | None = None) -> subprocess.CompletedProcess:
        if proto == "NFS":
            return run("nfs-cp", str(local), self._nfs_url(location, name))
        return self._smb(location, f"put {local} {name}", user)

    def get(self, proto: str, location: str, name: str, target: Path,
            user: str | None = None) -> subprocess.CompletedProcess:
        if proto == "NFS":
            out = run("nfs-cat", self._nfs_url(location, name))
            if out.returncode == 0:
                target.write_text(out.stdout)
            return out
        return self._smb(location, f"get {name} {target}", user)

    def ls(self, proto: str, location: str, user: str | None = None
           ) -> subprocess.CompletedProcess:
        if proto == "NFS":
            return run("nfs-ls", self._nfs_url(location))
        return self._smb(location, "ls", user)

    def _smb(self, location: str, command: str, user: str | None) -> subprocess.CompletedProcess:
        auth = ["-U", user] if user else ["-N"]
        return run("smbclient", "-p", str(self.smb_port), self._smb_share(location), *auth,
                   "-c", command)


def _pids(root: Path) -> list[tuple[Path, str]]:
    # Ganesha before its private bus (drivers/local/bus.py).
    return [(root / "ganesha" / "ganesha.pid", "ganesha.nfsd"),
            (runtime_dir(root / "samba") / "pid" / "smbd.pid", "smbd"),
            (root / "ganesha" / "bus.pid", "dbus-daemon")]


def _alive(pid_file: Path, program: str) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError, IndexError):
        return None
    return pid if os.path.basename(argv0) == program else None


def servers_running(root: Path) -> dict[str, bool]:
    return {program: _alive(pid_file, program) is not None for pid_file, program in _pids(root)}


def stop_servers(root: Path) -> None:
    for pid_file, program in _pids(root):
        stop_pid_file(pid_file, program)


def stop_pid_file(pid_file: Path, program: str) -> None:
    """SIGTERM the ``program`` ``pid_file`` names, SIGKILL after 10 s."""
    pid = _alive(pid_file, program)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid_file, program) == pid:
        time.sleep(0.1)
    if _alive(pid_file, program) == pid:
        os.kill(pid, signal.SIGKILL)


def mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            point = line.split()[1].replace("\\040", " ")
            if point.startswith(prefix):
                found.append(point)
    return found


def loops_under(root: Path) -> list[str]:
    out = run("losetup", "-n", "-O", "NAME,BACK-FILE", "-l")
    prefix = str(root.resolve()) + "/"
    return [line.split()[0] for line in out.stdout.splitlines()
            if len(line.split()) > 1 and line.split(None, 1)[1].startswith(prefix)]


def simulate_reboot(root: Path) -> None:
    """What a reboot leaves: no server running, nothing mounted, no loop device."""
    stop_servers(root)
    for point in sorted(mounts_under(root), reverse=True):
        for _ in range(25):
            if run("umount", point).returncode == 0:
                break
            time.sleep(0.2)
    for device in loops_under(root):
        run("losetup", "-d", device)


def cleanup(root: Path) -> None:
    if root.exists():
        simulate_reboot(root)
    shutil.rmtree(runtime_dir(root / "samba"), ignore_errors=True)
    shutil.rmtree(runtime_dir(root / "ganesha"), ignore_errors=True)


def servers_for(request: pytest.FixtureRequest, setup: str) -> dict:
    """``Deployment`` keywords for one of harness.SETUPS (as harness.servers,
    for a test parametrized by name rather than by fixture param)."""
    if setup == "embedded":
        return {}
    return {"db_url": request.getfixturevalue("pg_url"),
            "coordination_url": request.getfixturevalue("redis_url")}


def reload_ganesha(root: Path) -> None:
    """SIGHUP the backend's ganesha.nfsd and wait until it has re-read its
    exports (its log says so)."""
    pid = int((root / "ganesha" / "ganesha.pid").read_text().split()[0])
    done = "Reread exports complete"
    log = root / "ganesha" / "ganesha.log"
    before = log.read_text(errors="replace").count(done)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while log.read_text(errors="replace").count(done) <= before:
        if time.monotonic() > deadline:
            raise AssertionError("ganesha.nfsd did not re-read its exports in 30 s")
        time.sleep(0.05)


@contextlib.contextmanager
def small_filesystem(folder: Path, size_mib: int, free_mib: int) -> Iterator[Path]:
    """An ext4 filesystem of ``size_mib`` mounted on ``folder`` (a sparse
    image beside it, loop-mounted) with all but about ``free_mib`` taken by
    another file: a place whose free space is much less than its size, as
    on a disk that holds more than the shares. Unmounted (its loop device
    detached by the kernel) and removed afterwards; stop what uses it
    first."""
    image = folder.with_name(folder.name + ".img")
    assert run("truncate", "-s", f"{size_mib}M", str(image)).returncode == 0
    out = run("mkfs.ext4", "-q", "-F", "-m", "0", "-E",
              "nodiscard,lazy_itable_init=1,lazy_journal_init=1", str(image))
    assert out.returncode == 0, out.stderr
    folder.mkdir(parents=True, exist_ok=True)
    out = run("mount", "-o", "loop", str(image), str(folder))
    assert out.returncode == 0, out.stderr
    try:
        st = os.statvfs(folder)
        fill = st.f_bavail * st.f_frsize - free_mib * 1024 * 1024
        out = run("fallocate", "-l", str(fill), str(folder / "other-data"))
        assert out.returncode == 0, out.stderr
        yield folder
    finally:
        for _ in range(25):
            if run("umount", str(folder)).returncode == 0:
                break
            time.sleep(0.2)
        image.unlink(missing_ok=True)
