"""NFS-Ganesha: the configuration the driver writes, and its server.

The main file holds the server's settings and includes the exports file,
which the driver rewrites whole from its share records on every change and
makes Ganesha re-read with SIGHUP. A share without rules keeps its export
with no client: Ganesha refuses every client and the export stays
invisible to them. What the running server exports is asked over D-Bus
(``served``): a private bus per server when the driver runs it (bus.py)."""

from __future__ import annotations

import ipaddress
import logging
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from sharemgr.drivers.exceptions import InvalidShareRequest, ShareBackendException
from sharemgr.drivers.local import bus, ganesha_reload, process
from sharemgr.drivers.local.fencing import write_atomic
from sharemgr.drivers.local.samba import runtime_dir
from sharemgr.drivers.local.validation import config_token

LOG = logging.getLogger(__name__)

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
    rule_ids: tuple[str, ...] = ()  # the rule of each client, when known


# Ganesha 4's lexer reads an IPv6 network's prefix as one or two digits and no
# network of prefix 0 (both a syntax error that drops the export).
V6_MAX_PREFIX = 99


def client_forms(target: str) -> list[str]:
    """What Ganesha's ``Clients`` takes for one stored ip rule target: the
    target itself, or for /0 (every IPv4 or every IPv6 client) its two
    halves, which Ganesha reads and which admit exactly the same clients.

    :raises InvalidShareRequest: a form Ganesha cannot read (intake refuses
        them: validation.ACCESS_LIMITS)."""
    try:
        net = ipaddress.ip_network(config_token(target), strict=True)
    except ValueError:
        raise InvalidShareRequest(f"local driver: {target!r} is not an address or network "
                                  "NFS-Ganesha reads") from None
    if net.prefixlen == 0:
        return [str(half) for half in net.subnets(prefixlen_diff=1)]
    if net.prefixlen == net.max_prefixlen:
        return [str(net.network_address)]
    if net.version == 6 and net.prefixlen > V6_MAX_PREFIX:
        raise InvalidShareRequest(f"local driver: NFS-Ganesha cannot read the IPv6 network "
                                  f"{net}: its prefix is longer than /{V6_MAX_PREFIX}")
    return [str(net)]


def most_specific_first(targets: list[str]) -> list[int]:
    """The indexes of ip rule targets, the narrowest network first (ties
    in their order). Ganesha lets a client in by the first ``CLIENT`` that
    names it, so written in the rules' order an older ``10.0.0.0/24 ro``
    would overrule a newer ``10.0.0.5 rw`` for 10.0.0.5: the rule that names
    a client most precisely decides for it, whatever the order."""
    def width(i: int) -> int:
        try:
            net = ipaddress.ip_network(targets[i], strict=False)
        except ValueError:
            return 0  # refused when it is written
        return net.max_prefixlen - net.prefixlen
    return sorted(range(len(targets)), key=width)


@dataclass
class Rendered:
    text: str
    rule_lines: dict[int, str] = field(default_factory=dict)  # line number -> rule id
    refused: dict[str, str] = field(default_factory=dict)  # rule id -> why not written


def pseudo_path(share_id: str) -> str:
    return f"{PSEUDO_ROOT}/{share_id}"


def _quoted(value: str) -> str:
    return '"' + config_token(value) + '"'


def render_exports(exports: list[NfsExport]) -> str:
    """The exports file; a client that cannot be written raises."""
    rendered = render(exports)
    if rendered.refused:
        raise InvalidShareRequest(next(iter(rendered.refused.values())))
    return rendered.text


def render(exports: list[NfsExport]) -> Rendered:
    """The exports file, where each rule's CLIENT block is on its own line
    (so Ganesha's errors name the rule) and a rule that cannot be written is
    left out alone, with the reason."""
    out = Rendered("")
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
        for i in most_specific_first([target for target, _level in exp.clients]):
            target, level = exp.clients[i]
            rule_id = exp.rule_ids[i] if i < len(exp.rule_ids) else f"{exp.share_id}:{i}"
            try:
                forms = client_forms(target)
            except InvalidShareRequest as exc:
                out.refused[rule_id] = str(exc)
                continue
            access = "RW" if level == "rw" else "RO"
            lines.append(f"  CLIENT {{ Clients = {', '.join(forms)}; "
                         f"Access_Type = {access}; }}")
            out.rule_lines[len(lines)] = rule_id
        lines.append("}")
    out.text = "\n".join(lines) + "\n"
    return out


def render_main(ip: str, port: int, exports_file: Path, recovery: Path) -> str:
    return "\n".join([
        "# Written by the sharemgr local driver.",
        *server_settings(ip, port, recovery),
        f"%include {_quoted(str(exports_file))}",
        "",
    ])


def server_settings(ip: str, port: int, recovery: Path) -> list[str]:
    """The lines of a driver-run server's config before its exports."""
    return [
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
    ]


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
    # busctl gives a struct as the list of its fields: an export's id and
    # path first; a client's network first, its options word ninth.
    listing = bus.call(address, DEST, OBJECT, INTERFACE, "ShowExports")
    exports = cast("list[list[int | str]]", listing[1])
    ids = [int(e[0]) for e in exports if str(e[1]) == str(path)]
    if not ids:
        return None
    shown = bus.call(address, DEST, OBJECT, INTERFACE, "DisplayExport", "q", str(ids[0]))
    clients = set()
    for client in cast("list[list[int | str]]", shown[4]):
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

    def write_exports(self, exports: list[NfsExport]) -> dict[str, str]:
        """Write the exports and make the server read them. Returns the rules
        left out, by id, with the reason: those that cannot be written and
        those the server rejected (the file is then written again without
        them, so every other export is served).

        :raises ShareBackendException: the server rejected something that is
            no rule; the last exports file it took is put back and re-read.
        """
        left_out: dict[str, str] = {}
        for _ in range(3):  # a rejected rule is left out, then once more
            rendered = render(exports)
            left_out.update(rendered.refused)
            write_atomic(self.exports_file, rendered.text)
            pid = process.pid_of(self.pid_file, PROGRAM)
            if pid is None:
                self.ensure_running()
                return left_out
            errors = self._reload(pid)
            ours = [e for e in errors if Path(e.path) == self.exports_file]
            if not ours:
                write_atomic(self.last_good, rendered.text)
                return left_out
            rejected = {rendered.rule_lines[e.line]: e.text for e in ours
                        if e.line in rendered.rule_lines}
            if not rejected:
                break
            for rule_id, text in rejected.items():
                LOG.error("local driver: NFS-Ganesha rejected rule %s: %s", rule_id, text)
                left_out.setdefault(rule_id, f"local driver: NFS-Ganesha rejected it: {text}")
            exports = [_without(exp, set(rejected)) for exp in exports]
        self._roll_back()
        raise ShareBackendException(
            f"local driver: NFS-Ganesha rejected {self.exports_file} "
            f"({'; '.join(f'line {e.line}: {e.text}' for e in ours[:3])}); the last exports "
            "it took are back")

    @property
    def last_good(self) -> Path:
        return self.root / "exports.last-good"

    def _roll_back(self) -> None:
        pid = process.pid_of(self.pid_file, PROGRAM)
        if self.last_good.exists() and pid is not None:
            shutil.copyfile(self.last_good, self.exports_file)
            self._reload(pid)

    def _reload(self, pid: int) -> list[ganesha_reload.ConfigError]:
        """SIGHUP, then wait for the re-read to finish so the caller's change
        is in force when it returns; the errors it logged."""
        if not self.manage:  # the system's server logs elsewhere: give it a moment
            process.signal_pid(pid, signal.SIGHUP)
            time.sleep(0.5)
            return []
        return ganesha_reload.reload(pid, self.log_file)

    def stop(self) -> None:
        if self.manage:
            process.stop(self.pid_file, PROGRAM)
            if self.bus is not None:
                self.bus.stop()


def _without(exp: NfsExport, rule_ids: set[str]) -> NfsExport:
    keep = [i for i in range(len(exp.clients))
            if (exp.rule_ids[i] if i < len(exp.rule_ids) else f"{exp.share_id}:{i}")
            not in rule_ids]
    return NfsExport(exp.share_id, exp.export_id, exp.path,
                     tuple(exp.clients[i] for i in keep),
                     tuple(exp.rule_ids[i] for i in keep if i < len(exp.rule_ids)))
