"""NFS for a ``cephfs`` backend: NFS-Ganesha with FSAL CEPH exports each
share's subvolume to the clients of its ip rules.

The exports live in the cluster, beside the fencing objects (metadata
pool, namespace ``sharemgr``): one RADOS object per export and an index
object of ``%url`` lines that ganesha's config includes and watches
(``rados_bridge.Exports``). Any engine of the backend, on any host,
changes an export and notifies the index; every ganesha watching it
re-reads its exports. When the driver runs the server
(``cephfs_ganesha_manage_server``), it is a ganesha.nfsd of this host
with its files under the engine's state path, reading the exports as the
driver's cephx id; the driver then also waits, after a change, until that
server has re-read them, so a denied client is refused when the call
returns. Each export reaches CephFS as a cephx id of its own
(``ganesha-<share id>``), authorized on that subvolume alone.
doc/cephfs_driver.rst, "NFS", has the set-up and the lines an existing
ganesha needs."""

from __future__ import annotations

import hashlib
import logging
import re
import shlex
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sharemgr.drivers import shapes
from sharemgr.drivers.cephfs.client import CephCallFailed, CephClient
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareBackendException
from sharemgr.drivers.local import commands, ganesha_reload, process
from sharemgr.drivers.local.fencing import write_atomic
from sharemgr.drivers.local.ganesha import (
    client_forms,
    most_specific_first,
    pseudo_path,
    server_settings,
)
from sharemgr.drivers.local.validation import config_token

LOG = logging.getLogger(__name__)

PROGRAM = "ganesha.nfsd"
NAMESPACE = "sharemgr"
# What intake refuses before a rule reaches the driver (as the local
# driver's NFS: ganesha reads an IPv6 prefix of at most two digits).
ACCESS_LIMITS: dict[str, dict[str, dict[str, object]]] = {
    "NFS": {"ip": {"ipv6_max_prefix": 99}}}
# How long every ganesha watching the index may take to answer a notify.
NOTIFY_MS = 10000
AUTH_PREFIX = "ganesha-"


def auth_id(share_id: str) -> str:
    """The cephx id through which ganesha reaches one share."""
    return f"{AUTH_PREFIX}{share_id}"


_KEY = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _quoted(value: str) -> str:
    return '"' + config_token(value) + '"'


def _key(value: str) -> str:
    """A cephx key (base64, so '=' may end it) as a quoted value."""
    if not _KEY.fullmatch(value):
        raise ShareBackendException("cephfs driver: the cluster gave a cephx key that is "
                                    "not base64")
    return f'"{value}"'


def render_export(share_id: str, path: str, volume: str, user: str, key: str,
                  rules: list[shapes.AccessRule]) -> tuple[str, dict[str, str]]:
    """One export block (its id left as ``@EXPORT_ID@`` for the store to
    fill) and the rules left out, by id, with the reason."""
    lines = [
        "EXPORT {",
        "  Export_Id = @EXPORT_ID@;",
        f"  Path = {_quoted(path)};",
        f"  Pseudo = {_quoted(pseudo_path(share_id))};",
        "  Access_Type = None;",
        "  Squash = No_Root_Squash;",
        "  Protocols = 4;",
        "  Transports = TCP;",
        "  SecType = sys;",
        f"  FSAL {{ Name = CEPH; Filesystem = {_quoted(volume)}; User_Id = {_quoted(user)}; "
        f"Secret_Access_Key = {_key(key)}; }}",
    ]
    refused: dict[str, str] = {}
    for rule in [rules[i] for i in most_specific_first([str(r["access_to"]) for r in rules])]:
        if rule.get("access_type") != "ip":
            refused[rule["id"]] = (f"an NFS share of a cephfs backend takes ip rules, not "
                                   f"{rule.get('access_type')}")
            continue
        try:
            forms = client_forms(str(rule["access_to"]))
        except InvalidShareRequest as exc:
            refused[rule["id"]] = str(exc).replace("local driver", "cephfs driver")
            continue
        access = "RO" if rule.get("access_level") == "ro" else "RW"
        lines.append(f"  CLIENT {{ Clients = {', '.join(forms)}; Access_Type = {access}; }}")
    lines.append("}")
    return "\n".join(lines) + "\n", refused


@dataclass(frozen=True)
class Store:
    """Where the exports are: pool, namespace and object names."""

    pool: str
    group: str

    @property
    def index(self) -> str:
        return f"{self.group}.nfs-index"

    @property
    def prefix(self) -> str:
        return f"{self.group}.nfs-export."

    def url(self, obj: str) -> str:
        return f"rados://{self.pool}/{NAMESPACE}/{obj}"

    def fields(self) -> dict[str, object]:
        return {"pool": self.pool, "namespace": NAMESPACE, "index": self.index,
                "prefix": self.prefix}


def render_main(ip: str, port: int, recovery: Path, conf_path: str, user: str,
                store: Store) -> str:
    """The managed server's configuration: its exports are the store's."""
    index = _quoted(store.url(store.index))
    return "\n".join([
        "# Written by the sharemgr cephfs driver; the exports are in RADOS.",
        *server_settings(ip, port, recovery),
        f"CEPH {{ Ceph_Conf = {_quoted(conf_path)}; }}",
        f"RADOS_URLS {{ Ceph_Conf = {_quoted(conf_path)}; UserId = {_quoted(user)};",
        f"  watch_url = {index}; }}",
        f"%url {index}",
        "",
    ])


class Nfs:
    """The NFS side of one cephfs backend."""

    def __init__(self, ceph: CephClient, conf_path: str, user: str, group: str,
                 server_ip: str, export_ips: list[str], port: int, manage: bool,
                 root: Path) -> None:
        self.ceph = ceph
        self.conf_path = conf_path
        self.user = user
        self.group = group
        self.server_ip, self.port = server_ip, port
        self.export_ips = export_ips or [server_ip]
        self.manage = manage
        self.root = root
        self.config = root / "ganesha.conf"
        self.pid_file = root / "ganesha.pid"
        self.log_file = root / "ganesha.log"
        self.recovery = root / "recovery"
        self.store: Store | None = None

    # Set-up ------------------------------------------------------------------

    def setup(self, pool: str) -> None:
        self.store = Store(pool, self.group)
        self._exports("sync")
        if self.manage:
            self.root.mkdir(parents=True, exist_ok=True)
            self.recovery.mkdir(parents=True, exist_ok=True)
            write_atomic(self.config, render_main(self.server_ip, self.port, self.recovery,
                                                  self.conf_path, self.user, self.store))
            self.ensure_running()

    def running(self) -> bool:
        return process.pid_of(self.pid_file, PROGRAM) is not None

    def ensure_running(self) -> None:
        if not self.manage or self.running():
            return
        # FSAL CEPH names its CephFS session of an export by host name and
        # export id, and a new session of that name evicts the old one: two
        # servers of one host (two backends, or two engines) would evict
        # each other's. So each runs under a host name of its own (a UTS
        # namespace), the same at every start of it, so that a restart
        # reclaims the sessions its predecessor left (it does not wait for
        # the MDS to time them out).
        command = " ".join(shlex.quote(a) for a in (
            commands.resolve(PROGRAM), "-f", str(self.config), "-L", str(self.log_file), "-p",
            str(self.pid_file), "-N", "NIV_EVENT"))
        process.start(["unshare", "--uts", "sh", "-c",
                       f"hostname {self.node_name()} && exec {command}"],
                      self.pid_file, PROGRAM, self.server_ip, self.port, self.log_file,
                      timeout=60)

    def node_name(self) -> str:
        """This server's host name: this host's and its folder's."""
        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:10]
        host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40].strip("-")
        return f"{host or 'host'}-{digest}"

    # Exports -------------------------------------------------------------------

    def locations(self, share_id: str) -> list[shapes.ExportLocation]:
        return [{"path": f"{ip}:{pseudo_path(share_id)}", "is_admin_only": False,
                 "preferred": i == 0} for i, ip in enumerate(self.export_ips)]

    def export(self, share_id: str, path: str, volume: str,
               authorize: Callable[[str], str], rules: list[shapes.AccessRule]
               ) -> dict[str, str]:
        """Export the share to its rules' clients (none: served to nobody)
        and wait for the servers to read it. ``authorize(id)`` authorizes a
        cephx id on the subvolume and returns its key. Returns the rules
        left out, by id, with the reason."""
        user = auth_id(share_id)
        key = authorize(user)
        text, refused = render_export(share_id, path, volume, user, key, rules)
        self._exports("put", share=share_id, text=text)
        self.ensure_running()  # a server found stopped reads every export as it starts
        self._reread()
        return refused

    def unexport(self, share_id: str) -> None:
        self._exports("remove", share=share_id)
        self._reread()

    def exported(self) -> dict[str, int]:
        """Export ids by share id, as the store has them."""
        answer = self._exports("list")
        return {str(k): int(v) for k, v in answer.items()} if isinstance(answer, dict) else {}

    def _exports(self, op: str, **fields: object) -> object:
        if self.store is None:
            raise ShareBackendException("cephfs driver: NFS used before its set-up")
        return self.ceph.exports(op, {**self.store.fields(), **fields})

    def _reread(self) -> None:
        """Tell every ganesha watching the index; when this host's server
        is the driver's, wait until it re-read the exports."""
        offset = self.log_file.stat().st_size if self.manage and self.log_file.exists() else 0
        # librados's notify waits for every watcher's answer (or its
        # timeout) but does not say how many there were.
        try:
            self._exports("notify", notify_ms=NOTIFY_MS)
        except CephCallFailed as exc:  # every server reads the store when it starts
            LOG.warning("cephfs: the NFS servers were not told of a change: %s", exc)
            return
        if self.manage and self.running():
            errors = ganesha_reload.reread(self.log_file, offset)
            if errors:
                raise ShareBackendException(
                    "cephfs driver: NFS-Ganesha rejected an export: "
                    + "; ".join(f"{e.path}:{e.line}: {e.text}" for e in errors[:3]))

    def stop(self) -> None:
        if self.manage:
            process.stop(self.pid_file, PROGRAM)
