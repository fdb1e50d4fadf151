"""Samba: the configuration the driver writes, and its smbd.

The main file holds the server's settings (its own pid, lock, state, cache
and private folders, so several instances run on one host) and includes
the shares file, which the driver rewrites whole on every change and makes
smbd re-read with SIGHUP."""

from __future__ import annotations

import hashlib
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sharemgr.drivers.local import commands, process
from sharemgr.drivers.local.fencing import write_atomic
from sharemgr.drivers.local.validation import config_token

PROGRAM = "smbd"
FOLDERS = ("state", "cache", "private", "log")
# smbd makes Unix sockets in its lock folder (msg.sock/<pid>, ncalrpc): a
# socket path has at most 107 bytes, too few for a deep state path, so
# those folders live under a short one named for the state path.
RUNTIME_ROOT = Path("/run/sharemgr-local")
RUNTIME_FOLDERS = ("pid", "lock", "ncalrpc")


def runtime_dir(root: Path) -> Path:
    """The short folder of the sockets and pid file of the smbd whose
    files are under ``root``."""
    return RUNTIME_ROOT / hashlib.sha256(str(root).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CifsShare:
    name: str
    path: Path
    hosts: tuple[str, ...] = ()       # empty: any address
    users: tuple[str, ...] = ()       # empty: guests (only when hosts are set)
    read_users: tuple[str, ...] = ()  # users limited to reading
    read_only: bool = False
    available: bool = True


def render_shares(shares: list[CifsShare]) -> str:
    lines = ["# Written by the sharemgr local driver; rewritten on every change."]
    for share in sorted(shares, key=lambda s: s.name):
        lines += [f"[{config_token(share.name)}]",
                  f"  path = {config_token(str(share.path))}",
                  "  browseable = no",
                  # Whoever the rules let in works as root inside the share
                  # (as NFS's no_root_squash): the share's folder may sit
                  # under a state path others cannot traverse, and the rules,
                  # not file modes, decide access. No link leads out of it.
                  "  force user = root",
                  "  wide links = no",
                  f"  read only = {'yes' if share.read_only else 'no'}"]
        if not share.available:
            # No rule: the share exists (status reads see it) but nobody may connect.
            lines += ["  available = no", "  hosts allow = 127.255.255.254/32",
                      "  hosts deny = ALL", "  guest ok = no"]
            continue
        if share.hosts:
            lines += ["  hosts allow = " + " ".join(config_token(h) for h in share.hosts),
                      "  hosts deny = ALL"]
        if share.users:
            lines += ["  guest ok = no",
                      "  valid users = " + " ".join(config_token(u) for u in share.users)]
            if share.read_users:
                lines.append("  read list = " + " ".join(config_token(u)
                                                         for u in share.read_users))
        else:
            lines += ["  guest ok = yes", "  guest only = yes"]
    return "\n".join(lines) + "\n"


def render_main(root: Path, ip: str, port: int, shares_file: Path, netbios: str) -> str:
    d = {name: root / name for name in FOLDERS}
    d.update({name: runtime_dir(root) / name for name in RUNTIME_FOLDERS})
    return "\n".join([
        "# Written by the sharemgr local driver.",
        "[global]",
        f"  netbios name = {config_token(netbios)}",
        "  workgroup = WORKGROUP",
        "  server role = standalone server",
        f"  interfaces = {config_token(ip)}",
        "  bind interfaces only = yes",
        f"  smb ports = {int(port)}",
        "  disable netbios = yes",
        f"  pid directory = {d['pid']}",
        f"  lock directory = {d['lock']}",
        f"  ncalrpc dir = {d['ncalrpc']}",
        f"  state directory = {d['state']}",
        f"  cache directory = {d['cache']}",
        f"  private dir = {d['private']}",
        f"  passdb backend = tdbsam:{d['private'] / 'passdb.tdb'}",
        f"  log file = {d['log'] / 'smbd.log'}",
        "  max log size = 1000",
        "  load printers = no",
        "  printing = bsd",
        "  printcap name = /dev/null",
        "  disable spoolss = yes",
        # An ip-only rule lets in guests, who run as 'nobody'.
        "  map to guest = bad user",
        "  guest account = nobody",
        "  server min protocol = SMB2",
        f"  include = {config_token(str(shares_file))}",
        "",
    ])


def shared_names(shares_file: Path) -> set[str]:
    """Share names the shares file holds (read back)."""
    try:
        text = shares_file.read_text()
    except FileNotFoundError:
        return set()
    return {line.strip()[1:-1] for line in text.splitlines()
            if line.startswith("[") and line.strip().endswith("]")}


class SambaServer:
    """One smbd with its files under ``root``."""

    def __init__(self, root: Path, ip: str, port: int, manage: bool, netbios: str,
                 shares_file: Path | None = None, pid_file: Path | None = None) -> None:
        self.root = root
        self.ip, self.port, self.manage, self.netbios = ip, port, manage, netbios
        self.config = root / "smb.conf"
        self.shares_file = shares_file or root / "shares.conf"
        self.pid_file = pid_file or runtime_dir(root) / "pid" / "smbd.pid"
        self.log_file = root / "log" / "smbd.log"

    def setup(self) -> None:
        self.shares_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.shares_file.exists():
            write_atomic(self.shares_file, render_shares([]))
        if self.manage:
            for name in FOLDERS:
                (self.root / name).mkdir(parents=True, exist_ok=True)
            for name in RUNTIME_FOLDERS:
                (runtime_dir(self.root) / name).mkdir(parents=True, exist_ok=True)
            write_atomic(self.config, render_main(self.root, self.ip, self.port,
                                                  self.shares_file, self.netbios))

    def running(self) -> bool:
        return process.pid_of(self.pid_file, PROGRAM) is not None

    def ensure_running(self) -> None:
        if self.running() or not self.manage:
            return
        process.start([PROGRAM, "-s", str(self.config), "-D"], self.pid_file, PROGRAM,
                      self.ip, self.port, self.log_file)

    def write_shares(self, shares: list[CifsShare]) -> None:
        write_atomic(self.shares_file, render_shares(shares))
        pid = process.pid_of(self.pid_file, PROGRAM)
        if pid is None:
            self.ensure_running()
        else:
            process.signal_pid(pid, signal.SIGHUP)
            time.sleep(0.3)  # smbd re-reads asynchronously; new connections then see it

    def stop(self) -> None:
        if self.manage:
            process.stop(self.pid_file, PROGRAM)


def served(ip: str, port: int, name: str) -> bool | None:
    """Whether the running smbd serves share ``name``, asked as a client
    does (a tree connect with ``smbclient``; no rule needed: a share that
    refuses this client answers differently from one it does not have).
    None when it cannot tell (no smbclient, no answer)."""
    try:
        out = commands.run(["smbclient", "-p", str(int(port)), f"//{ip}/{name}", "-N",
                            "-c", "exit"], timeout=30, check=False)
    except commands.CommandFailed:
        return None
    said = out.stdout + out.stderr
    if out.returncode == 0 or "NT_STATUS_ACCESS_DENIED" in said \
            or "NT_STATUS_LOGON_FAILURE" in said:
        return True
    if "NT_STATUS_BAD_NETWORK_NAME" in said:
        return False
    return None
