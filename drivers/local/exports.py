"""What the local driver's servers export: both servers' share files
rewritten from the records (NFS-Ganesha's exports, Samba's shares), what a
running server serves of a share, export ids and export locations."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from sharemgr.drivers import base
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.drivers.local import images, serving, validation
from sharemgr.drivers.local.fencing import file_lock
from sharemgr.drivers.local.ganesha import GaneshaServer, NfsExport, pseudo_path
from sharemgr.drivers.local.records import AVAILABLE, Record, Records
from sharemgr.drivers.local.samba import CifsShare, SambaServer

LOG = logging.getLogger(__name__)

MAX_EXPORT_ID = 65535  # Ganesha's export ids are 16 bits; 0 is its pseudo root


class Exports:
    """The exports of one backend's shares, from its records."""

    def __init__(self, ip: str, records: Records, ganesha: GaneshaServer, samba: SambaServer,
                 locks: Path, mount: Callable[[str], Path]) -> None:
        self.ip = ip
        self.records = records
        self.ganesha = ganesha
        self.samba = samba
        self.locks = locks
        self._mount = mount

    @contextlib.contextmanager
    def backend_lock(self) -> Iterator[None]:
        # '_' cannot start an object id: this lock never collides with one.
        with file_lock(self.locks / "_backend.lock"):
            yield

    def locations(self, record: Record) -> list[base.ExportLocation]:
        if record["proto"] == "NFS":
            path = f"{self.ip}:{pseudo_path(record['id'])}"
        else:
            path = f"\\\\{self.ip}\\{record['id']}"
        return [{"path": path, "is_admin_only": False, "preferred": True}]

    def publish(self) -> dict[str, str]:
        """Rewrite both servers' share files from the records: every
        available, mounted share with its rules (an unmounted one is never
        exported: the server would serve the empty folder under it).

        A rule is served or left out on its own: one a record holds that
        the checks refuse now, or that NFS-Ganesha rejects, is left out (and
        marked so in its record) while every other rule and share is
        served. Returns the rules left out by this call, with the reason."""
        with self.backend_lock():
            nfs: list[NfsExport] = []
            cifs: list[CifsShare] = []
            records: dict[str, Record] = {}
            for record in self._one_id_each(self.records.all("share")):
                oid = record["id"]
                if record.get("state") != AVAILABLE or not images.is_mounted(self._mount(oid)):
                    continue
                records[oid] = record
                applied = validation.servable(record)
                if record["proto"] == "NFS":
                    nfs.append(NfsExport(
                        oid, record["export_id"], self._mount(oid),
                        tuple((r["access_to"], r["access_level"]) for r in applied),
                        tuple(r["id"] for r in applied)))
                else:
                    cifs.append(_cifs_share(oid, self._mount(oid), applied))
            left_out = self.ganesha.write_exports(nfs)
            self.samba.write_shares(cifs)
            for record in records.values():
                marked = [r for r in record.get("rules", []) if r.get("id") in left_out]
                for r in marked:
                    r["error"], r["reason"] = True, left_out[r["id"]]
                if marked:
                    self.records.put(record)
            return left_out

    def _one_id_each(self, shares: list[Record]) -> list[Record]:
        """``shares`` with no export id held twice: the records of a release
        before ``put_new`` took the backend's lock may hold one id for two
        shares, and NFS-Ganesha refuses the whole exports file then. The
        first in id order keeps it; each other is given a free id, written
        to its record (under the backend's lock, which the caller holds)."""
        used = {r.get("export_id") for r in shares}
        kept: dict[object, str] = {}
        for record in shares:
            held = record.get("export_id")
            if held is None or held not in kept:
                kept[held] = record["id"]
                continue
            free = _free_id(used)
            used.add(free)
            record["export_id"] = free
            self.records.put(record)
            LOG.warning("local driver: shares %s and %s held NFS export id %s: %s now has "
                        "export id %s", kept[held], record["id"], held, record["id"], free)
        return shares

    def serving(self, record: Record, rules: list[object] | None = None) -> serving.Serving:
        """What the running server serves of the share (asked of it), with
        ``rules`` (else the record's) as what it should let in."""
        if record["proto"] == "NFS":
            return serving.nfs(self.ganesha, record, self._mount(record["id"]), rules)
        return serving.cifs(self.samba, record, rules)

    def put_new(self, record: Record) -> None:
        """Write a new share's ``record`` with a free export id, chosen and
        written under the backend's lock: two creates at once each chose the
        same free id before either wrote it, and NFS-Ganesha, holding that id
        for one share's path, refused every later exports file (the backend
        never came up again)."""
        with self.backend_lock():
            used = {r.get("export_id") for r in self.records.all("share")}
            record["export_id"] = _free_id(used)
            self.records.put(record)


def _free_id(used: set[object]) -> int:
    free = next((c for c in range(1, MAX_EXPORT_ID + 1) if c not in used), None)
    if free is None:
        raise ShareBackendException(f"local driver: no free NFS export id ({MAX_EXPORT_ID} "
                                    "shares)")
    return free


# Shares -------------------------------------------------------------------------

def _cifs_share(name: str, path: Path, rules: list[validation.CheckedRule]) -> CifsShare:
    if not rules:
        return CifsShare(name, path, available=False)
    hosts = tuple(r["access_to"] for r in rules if r["access_type"] == "ip")
    users = tuple(r["access_to"] for r in rules if r["access_type"] == "user")
    read_users = tuple(r["access_to"] for r in rules
                       if r["access_type"] == "user" and r["access_level"] == "ro")
    return CifsShare(name, path, hosts=hosts, users=users, read_users=read_users,
                     read_only=all(r["access_level"] == "ro" for r in rules))


