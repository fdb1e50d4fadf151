"""Whether the running servers serve a share as its record says: asked of
the servers themselves, not read back from the files the driver wrote (a
file can say one thing while the server, after a failed or partial
re-read, an export removed over its admin interface or a reload of an
edited file, serves another).

NFS: ganesha's export list and the export's clients over D-Bus (bus.py);
where no bus answers (a ganesha started without one, a system ganesha
without the system bus) the exports file is read instead, with one
WARNING. CIFS: a tree connect as a client makes it (``samba.served``); a
share with no rule is served to nobody either way, so it is not asked."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sharemgr.drivers.local import ganesha, samba, validation
from sharemgr.drivers.local.bus import BusUnavailable
from sharemgr.drivers.local.records import Record

LOG = logging.getLogger(__name__)
_warned: set[Path] = set()  # servers whose missing bus was logged once


@dataclass(frozen=True)
class Serving:
    exported: bool  # the server has the share (its export or section)
    problem: str | None  # how it differs from the record; None: as recorded


def applied_rules(record: Record, rules: list[object] | None = None
                  ) -> Sequence[Mapping[str, object]]:
    """The rules to serve: ``rules`` when given (the manager's active
    ones), else those the record holds that the driver serves
    (``validation.servable``)."""
    if rules is not None:
        return [r for r in rules if isinstance(r, dict)]
    return validation.servable(record)


def _nfs_clients(rules: Sequence[Mapping[str, object]]) -> set[tuple[str, str]]:
    clients = set()
    for r in rules:
        if r.get("access_type") != "ip":
            continue
        try:
            net = ipaddress.ip_network(str(r.get("access_to")), strict=False)
        except ValueError:
            continue  # never served: the driver refuses it
        clients.add((str(net), "ro" if r.get("access_level") == "ro" else "rw"))
    return clients


def collapsed(clients: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The clients as the fewest networks per level, so that one network
    written as several (a /0 as its two halves, which Ganesha can read)
    compares equal to itself."""
    out = set()
    for level in {lvl for _, lvl in clients}:
        nets = [ipaddress.ip_network(n, strict=False) for n, lvl in clients if lvl == level]
        v4 = [n for n in nets if isinstance(n, ipaddress.IPv4Network)]
        v6 = [n for n in nets if isinstance(n, ipaddress.IPv6Network)]
        out |= {(str(n), level) for n in ipaddress.collapse_addresses(v4)}
        out |= {(str(n), level) for n in ipaddress.collapse_addresses(v6)}
    return out


def nfs(server: ganesha.GaneshaServer, record: Record, mount_point: Path,
        rules: list[object] | None = None) -> Serving:
    if not server.running():
        return Serving(False, "ganesha.nfsd is not running")
    try:
        clients = ganesha.served(server.bus_address, mount_point)
    except BusUnavailable as exc:
        if server.root not in _warned:
            _warned.add(server.root)
            LOG.warning("local driver: ganesha.nfsd of %s cannot be asked what it exports "
                        "(%s); reading %s instead (restart the server to give it a bus)",
                        server.root, exc, server.exports_file)
        if record["id"] in ganesha.exported_ids(server.exports_file):
            return Serving(True, None)
        return Serving(False, "not in ganesha's exports file")
    if clients is None:
        return Serving(False, "ganesha.nfsd does not export it")
    wanted = _nfs_clients(applied_rules(record, rules))
    if collapsed(clients) != collapsed(wanted):
        return Serving(True, f"ganesha.nfsd lets in {_shown(clients)}; its rules say "
                             f"{_shown(wanted)}")
    return Serving(True, None)


def cifs(server: samba.SambaServer, record: Record, rules: list[object] | None = None) -> Serving:
    if not server.running():
        return Serving(False, "smbd is not running")
    if not applied_rules(record, rules):
        # Served to nobody (available = no) and not served look alike to a
        # client, and are alike to every client: the file says which.
        return Serving(record["id"] in samba.shared_names(server.shares_file), None)
    answer = samba.served(server.ip, server.port, record["id"])
    if answer is None:  # no answer: what the file says, as before
        if record["id"] in samba.shared_names(server.shares_file):
            return Serving(True, None)
        return Serving(False, "not in smbd's shares file")
    return Serving(True, None) if answer else Serving(False, "smbd does not serve it")


def _shown(clients: set[tuple[str, str]]) -> str:
    return ", ".join(f"{net} {level}" for net, level in sorted(clients)) or "no client"
