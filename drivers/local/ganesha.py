"""NFS-Ganesha: the configuration the driver writes, and its server.

The main file holds the server's settings and includes the exports file,
which the driver rewrites whole from its share records on every change and
makes Ganesha re-read with SIGHUP. A share without rules keeps its export
with no client: Ganesha refuses every client and the export stays
invisible to them. What the running server exports is asked over D-Bus
(``served``): a private bus per server when the driver runs it (bus.py)."""

from __future__ import annotations

import ipaddress
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sharemgr.drivers.local import bus, process
from sharemgr.drivers.local.fencing import write_atomic
from sharemgr.drivers.local.samba import runtime_dir
from sharemgr.drivers.local.validation import config_token

PROGRAM = "ganesha.nfsd"
PSEUDO_ROOT = "/shares"
DEST, OBJECT = "org.ganesha.nfsd", "/org/ganesha/nfsd/ExportMgr"
INTERFACE = "org.ganesha.nfsd.exportmgr"
# A client's options word as ganesha 4 reports it (DisplayExport): RW sets
# these write bits (0x1e0 of the 0x1e0 access mask), RO leaves them out (0x0a0).
WRITE_BITS = 0x140


@dataclass(frozen=True)
class NfsExport:
    share_id: str
    export_id: int
    path: Path
    clients: tuple[tuple[str, str], ...]  # (address or CIDR, "rw" | "ro")


def pseudo_path(share_id: str) -> str:
    return f"{PSEUDO_ROOT}/{share_id}"


def _quoted(value: str) -> str:
    return '"' + config_token(value) + '"'


def render_exports(exports: list[NfsExport]) -> str:
    lines = ["# Written by the sharemgr local driver; rewritten on every change."]
    for exp in sorted(exports, key=lambda e: e.export_id):
        lines += [
            "EXPORT {",
            f"  Export_Id = {int(exp.export_id)};",
            f"  Path = {_quoted(str(exp.path))};",
            f"  Pseudo = {_quoted(pseudo_path(exp.share_id))};",
            "  Access_Type = None;",
            "  Squash = No_Root_Squash;",
            "  Protocols = 4;",
            "  SecType = sys;",
            "  FSAL { Name = VFS; }",
        ]
        for target, level in exp.clients:
            access = "RW" if level == "rw" else "RO"
            lines.append(f"  CLIENT {{ Clients = {config_token(target)}; "
                         f"Access_Type = {access}; }}")
        lines.append("}")
    return "\n".join(lines) + "\n"


def render_main(ip: str, port: int, exports_file: Path, recovery: Path) -> str:
    return "\n".join([
        "# Written by the sharemgr local driver.",
        "NFS_CORE_PARAM {",
        f"  NFS_Port = {int(port)};",
        f"  Bind_addr = {config_token(ip)};",
        "  Protocols = 4;",
        "  Enable_NLM = false;",
        "  Enable_RQUOTA = false;",
        "}",
        # No grace period after a restart: the driver's clients are stateless
        # copies, and a reboot must serve again at once.
        "NFSV4 { Graceless = true; RecoveryBackend = fs;",
        f"  RecoveryRoot = {_quoted(str(recovery))}; }}",
        "NFS_KRB5 { Active_krb5 = false; }",
        "EXPORT_DEFAULTS { Access_Type = None; }",
        f"%include {_quoted(str(exports_file))}",
        "",
    ])


def exported_ids(exports_file: Path) -> set[str]:
    """Share ids the exports file exports (read back, so a change made
    behind the driver's back shows)."""
    try:
        text = exports_file.read_text()
    except FileNotFoundError:
        return set()
    prefix = f'Pseudo = "{PSEUDO_ROOT}/'
    found = set()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(prefix) and line.endswith('";'):
            found.add(line[len(prefix):-2])
    return found


def served(address: str | None, path: Path) -> set[tuple[str, str]] | None:
    """The clients (network, "rw" | "ro") the running server lets into its
    export of ``path``; None when it does not export ``path``.

    :raises bus.BusUnavailable: the server cannot be asked.
    """
    listing = bus.call(address, DEST, OBJECT, INTERFACE, "ShowExports")
    ids = [int(e[0]) for e in listing[1] if str(e[1]) == str(path)]
    if not ids:
        return None
    shown = bus.call(address, DEST, OBJECT, INTERFACE, "DisplayExport", "q", str(ids[0]))
    clients = set()
    for client in shown[4]:
        network = str(ipaddress.ip_network(str(client[0]), strict=False))
        clients.add((network, "rw" if int(client[8]) & WRITE_BITS == WRITE_BITS else "ro"))
    return clients


class GaneshaServer:
    """One ganesha.nfsd with its files under ``root``."""

    def __init__(self, root: Path, ip: str, port: int, manage: bool,
                 exports_file: Path | None = None, pid_file: Path | None = None) -> None:
        self.root = root
        self.ip, self.port, self.manage = ip, port, manage
        self.config = root / "ganesha.conf"
        self.exports_file = exports_file or root / "exports.conf"
        self.pid_file = pid_file or root / "ganesha.pid"
        self.log_file = root / "ganesha.log"
        self.recovery = root / "recovery"
        # Its own bus when the driver runs it (and the tools are there);
        # the system's ganesha is asked on the system bus.
        self.bus = (bus.PrivateBus(root, runtime_dir(root))
                    if manage and bus.tools_present() else None)

    @property
    def bus_address(self) -> str | None:
        return self.bus.address if self.bus is not None else None

    def setup(self) -> None:
        self.exports_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.exports_file.exists():
            write_atomic(self.exports_file, render_exports([]))
        if self.manage:
            self.root.mkdir(parents=True, exist_ok=True)
            self.recovery.mkdir(parents=True, exist_ok=True)
            write_atomic(self.config, render_main(self.ip, self.port, self.exports_file,
                                                  self.recovery))
            if self.bus is not None:
                self.bus.setup()

    def running(self) -> bool:
        return process.pid_of(self.pid_file, PROGRAM) is not None

    def ensure_running(self) -> None:
        if self.running() or not self.manage:
            return
        env = None
        if self.bus is not None:
            self.bus.ensure_running()
            env = {"DBUS_SYSTEM_BUS_ADDRESS": self.bus.address}
        process.start([PROGRAM, "-f", str(self.config), "-L", str(self.log_file),
                       "-p", str(self.pid_file), "-N", "NIV_EVENT"],
                      self.pid_file, PROGRAM, self.ip, self.port, self.log_file, env=env)

    def write_exports(self, exports: list[NfsExport]) -> None:
        write_atomic(self.exports_file, render_exports(exports))
        pid = process.pid_of(self.pid_file, PROGRAM)
        if pid is None:
            self.ensure_running()
        else:
            self._reload(pid)

    def _reload(self, pid: int) -> None:
        """SIGHUP, then wait (briefly) for the re-read to finish so the
        caller's change is in force when it returns."""
        if not self.manage:  # the system's server logs elsewhere: give it a moment
            process.signal_pid(pid, signal.SIGHUP)
            time.sleep(0.5)
            return
        done = "Reread exports complete"
        before = self._log_text().count(done)
        process.signal_pid(pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self._log_text().count(done) <= before:
            time.sleep(0.05)

    def _log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.manage:
            process.stop(self.pid_file, PROGRAM)
            if self.bus is not None:
                self.bus.stop()
