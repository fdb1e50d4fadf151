"""The dummy driver: a real driver over a fake backend kept on disk.

Its backend state (objects and a log of every call) lives in a SQLite file
under ``dummy_state_path`` (see ``dummy_state``), so it survives a killed
manager and can be driven by several engines on one host at once.
Reconciliation asks it for ground truth; tests steer it with the knobs in
``dummy_opts`` and look at it (or change it behind the manager's back) with
the ``sharemgr-dummy-backend`` command.

Every call goes through ``_op``: log the call, wait at a gate, sleep the
configured delay, fail if told to, crash-before, change the backend in one
transaction, crash-after.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from oslo_config import cfg, types
from sharemgr.drivers import base
from sharemgr.drivers.dummy_knobs import Knobs
from sharemgr.drivers.dummy_state import BackendState, Tx
from sharemgr.drivers.exceptions import (
    FencedCall,
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
)

dummy_opts = [
    cfg.StrOpt(
        "dummy_state_path",
        sample_default="$state_path/dummy/<backend>",
        help="Folder of the dummy backend's state (objects and call log). "
        "Default: '<state_path>/dummy/<backend group name>'.",
    ),
    cfg.Opt(
        "dummy_method_delays",
        type=types.Dict(value_type=types.Float(min=0)),
        default={},
        help="Seconds each driver method sleeps before changing the backend, as "
        "'method:seconds,...', e.g. 'create_share:0.5,delete_share:0.2'. A key "
        "'method.prefix' applies only to resources whose name starts with prefix.",
    ),
    cfg.ListOpt(
        "dummy_fail_methods",
        default=[],
        help="Driver methods ('method' or 'method.prefix') that raise a driver "
        "error instead of changing the backend.",
    ),
    cfg.ListOpt(
        "dummy_crash_before",
        default=[],
        help="Driver methods ('method' or 'method.prefix') at which the whole "
        "process exits at once (os._exit(137)) before the backend changes.",
    ),
    cfg.ListOpt(
        "dummy_crash_after",
        default=[],
        help="Driver methods ('method' or 'method.prefix') at which the whole "
        "process exits at once (os._exit(137)) after the backend change is on disk.",
    ),
    cfg.StrOpt(
        "dummy_unreachable_file",
        help="While this file exists, do_setup fails with 'cannot reach array' "
        "and the file's first line, as a driver whose array is not reachable yet "
        "(share-manager retries the set-up with back-off).",
    ),
    cfg.StrOpt(
        "dummy_gate_dir",
        help="Folder of gate files. Before changing the backend, a call waits "
        "while a file '<method>' exists there, or '<method>.<prefix>' where the "
        "resource's name starts with prefix. The call is in the call log before it "
        "waits.",
    ),
    cfg.FloatOpt(
        "dummy_gate_poll_interval",
        default=0.05,
        min=0.001,
        max=10.0,
        help="Seconds between looks at the gate folder while a call waits.",
    ),
    cfg.BoolOpt(
        "dummy_honours_fencing",
        default=True,
        help="Honour fencing tokens (doc/drivers.rst, 'Fencing'): refuse, with "
        "FencedCall and no change, a call whose token is older than one already "
        "accepted for the same object. False: a backend that cannot fence.",
    ),
    cfg.ListOpt(
        "dummy_status_methods",
        item_type=types.String(
            choices=base.STATUS_METHODS + tuple(base.BATCH_STATUS_METHODS.values())),
        default=list(base.STATUS_METHODS) + list(base.BATCH_STATUS_METHODS.values()),
        help="Optional status methods (single and batch) the dummy driver "
        "implements; the others raise NotImplementedError. A batch method "
        "answers only while its single method is enabled too.",
    ),
    # What get_share_stats() reports; the defaults support everything.
    cfg.BoolOpt(
        "dummy_snapshot_support",
        default=True,
        help="Report snapshot_support: false makes intake refuse snapshots of "
        "this backend's shares.",
    ),
    cfg.BoolOpt(
        "dummy_create_share_from_snapshot_support",
        default=True,
        help="Report create_share_from_snapshot_support: false makes intake "
        "refuse shares made from this backend's snapshots.",
    ),
    cfg.StrOpt(
        "dummy_replication_type",
        default="readable",
        choices=("readable", "writable", "dr", "none"),
        help="Report replication_type; 'none' reports None, and intake refuses "
        "replicas on this backend.",
    ),
    cfg.BoolOpt(
        "dummy_share_group_support",
        default=True,
        help="Report share_group_support: false makes intake refuse share groups "
        "on this backend.",
    ),
    cfg.Opt(
        "dummy_pools",
        type=types.Dict(value_type=types.Integer(min=0)),
        default={},
        help="Pools the backend reports, as 'name:total GiB,...', e.g. "
        "'fast:100,slow:1000'. A pool's free capacity is its total minus the "
        "sizes of the shares and replicas the backend holds in it. Empty (the "
        "default): no pools, unlimited capacity ('infinite'); shares go to the "
        "backend as a whole ('host@backend', no '#pool').",
    ),
]

SHARE_KINDS = ("share", "replica")
# What the dummy backend can export each protocol to, as a real one would
# (NFS by address, CIFS by user or address, CephFS by cephx identity): a
# rule of another type is refused, the others applied.
ACCESS_TYPES_BY_PROTO = {"NFS": ("ip",), "CIFS": ("user", "ip"), "CEPHFS": ("cert",),
                         "GLUSTERFS": ("ip", "cert"), "HDFS": ("user",), "MAPRFS": ("user",)}
_CREATED = "available"


def _pool(resource: dict) -> dict[str, str]:
    """The pool of a share or replica ('host@backend#pool'), kept in the
    object's details so get_share_stats can count what each pool holds."""
    host = resource.get("host") or ""
    return {"pool": host.split("#", 1)[1]} if "#" in host else {}


class DummyDriver(base.ShareDriver):
    """A share driver over a fake backend persisted in SQLite."""

    driver_opts = dummy_opts

    def __init__(
        self,
        configuration: Any,
        *,
        backend_name: str,
        host: str,
        engine_id: str,
        state_path: str,
    ) -> None:
        super().__init__(
            configuration,
            backend_name=backend_name,
            host=host,
            engine_id=engine_id,
            state_path=state_path,
        )
        conf = configuration
        methods = [m for m in dir(base.ShareDriver) if not m.startswith("_")]
        methods = [m for m in methods if callable(getattr(base.ShareDriver, m))]
        self.knobs = Knobs(
            methods,
            delays=conf.dummy_method_delays or {},
            fail=conf.dummy_fail_methods or [],
            crash_before=conf.dummy_crash_before or [],
            crash_after=conf.dummy_crash_after or [],
            gate_dir=conf.dummy_gate_dir,
            gate_poll_interval=conf.dummy_gate_poll_interval,
        )
        self.status_methods = frozenset(conf.dummy_status_methods or ())
        self.honours_fencing = bool(conf.dummy_honours_fencing)
        self.dummy_state_path = conf.dummy_state_path or os.path.join(
            state_path, "dummy", backend_name
        )
        self.state = BackendState(self.dummy_state_path, backend=backend_name)

    # The one path of every call ------------------------------------------

    @contextlib.contextmanager
    def _op(self, method: str, resource: dict | None, write: bool = True) -> Iterator[Tx]:
        resource = resource or {}
        rid = resource.get("id")
        name = str(resource.get("name") or rid or "")
        token = resource.get("fence_token") if self.honours_fencing and rid else None
        if token is None:
            seq = self.state.log_call(method, rid, self.engine_id)
        else:
            # Checked as the call arrives, and again with its change: a newer
            # owner's call that arrives first fences this one even while this
            # one is still at work (its slow part before the change).
            seq, newer = self.state.arrive(method, str(rid), self.engine_id, int(token))
            if newer is not None:
                raise FencedCall(f"dummy backend: {method} of {rid} carries fencing token "
                                 f"{token}, older than {newer}")
        if method in base.STATUS_METHODS and method not in self.status_methods:
            raise NotImplementedError(f"dummy driver: {method} is disabled by dummy_status_methods")
        self.knobs.wait_at_gate(method, name)
        self.knobs.delay(method, name)
        if self.knobs.should_fail(method, name):
            raise ShareBackendException(
                f"dummy driver: {method} of {rid or self.backend_name} failed "
                "(dummy_fail_methods)"
            )
        self.knobs.crash_if("before", method, name)
        try:
            # The token is checked in the transaction of the change: a call
            # fenced after its check cannot land (a read with a token writes
            # the highest token, so it takes the write lock too).
            with self.state.transaction() if write or token is not None \
                    else self.state.reading() as tx:
                if token is not None:
                    newer = tx.accept_token(str(rid), int(token))
                    if newer is not None:
                        raise FencedCall(f"dummy backend: {method} of {rid} carries fencing "
                                         f"token {token}, older than {newer}")
                yield tx
                if write:
                    tx.finish_call(seq)
        except FencedCall:
            self.state.mark_fenced(seq)
            raise
        self.knobs.crash_if("after", method, name)

    # Helpers ------------------------------------------------------------------

    def _export_locations(self, instance_id: str, server: dict | None) -> list[dict]:
        details = (server or {}).get("backend_details") or {}
        address = details.get("address") or f"{self.host}.{self.backend_name}.dummy"
        return [
            {"path": f"{address}:/shares/{instance_id}", "is_admin_only": False,
             "preferred": True},
            {"path": f"admin.{address}:/shares/{instance_id}", "is_admin_only": True,
             "preferred": False},
        ]

    def _check_server(self, tx: Tx, server: dict | None, what: str) -> str | None:
        if not self.driver_handles_share_servers:
            return None
        if not server:
            raise InvalidShareRequest(
                f"dummy backend {self.backend_name} handles share servers "
                f"(driver_handles_share_servers = True): {what} needs a share server"
            )
        if tx.get(server["id"], ("share_server",)) is None:
            raise ShareResourceNotFound(f"dummy backend has no share server {server['id']}")
        return server["id"]

    @staticmethod
    def _size(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidShareRequest(f"size must be a positive integer, not {value!r}")
        return value

    @staticmethod
    def _need(tx: Tx, obj_id: str | None, kinds: tuple[str, ...], what: str) -> dict:
        obj = tx.get(obj_id, kinds)
        if obj is None:
            raise ShareResourceNotFound(f"dummy backend has no {what} {obj_id}")
        return obj

    def _refuse_if_used(self, tx: Tx, column: str, obj_id: str, kinds: tuple[str, ...],
                        what: str) -> None:
        users = tx.find(column, obj_id, kinds)
        if users:
            ids = ", ".join(f"{u['kind']} {u['id']}" for u in users)
            raise InvalidShareRequest(f"dummy backend: {what} {obj_id} is in use by {ids}")

    # Set-up -----------------------------------------------------------------

    def do_setup(self) -> None:
        with self._op("do_setup", None):
            blocker = self.configuration.dummy_unreachable_file
            if blocker and os.path.exists(blocker):
                with open(blocker) as f:
                    why = f.readline().strip()
                raise ShareBackendException(f"cannot reach array: {why or blocker}")

    def check_for_setup_error(self) -> None:
        with self._op("check_for_setup_error", None, write=False):
            pass

    def get_backend_info(self) -> dict[str, Any]:
        with self._op("get_backend_info", None, write=False):
            return {
                "driver": "dummy",
                "version": "1",
                "driver_handles_share_servers": self.driver_handles_share_servers,
                "state": os.path.abspath(self.dummy_state_path),
            }

    def ensure_shares(self, shares: list[dict]) -> dict[str, dict[str, Any]]:
        with self._op("ensure_shares", None, write=False) as tx:
            updates = {}
            for share in shares:
                obj = tx.get(share["id"], SHARE_KINDS)
                if obj is None:
                    updates[share["id"]] = {"status": "error", "export_locations": []}
                else:
                    updates[share["id"]] = {
                        "status": obj["status"],
                        "export_locations": obj["export_locations"],
                    }
            return updates

    def get_share_stats(self, refresh: bool = False) -> dict[str, Any]:
        """Manila's shape, from the options above; a pool's free capacity is
        what the shares and replicas held in it leave. Not in the call log
        (the manager asks every backend_stats_interval); the knobs apply."""
        self.knobs.delay("get_share_stats", "")
        if self.knobs.should_fail("get_share_stats", ""):
            raise ShareBackendException(
                f"dummy driver: get_share_stats of {self.backend_name} failed "
                "(dummy_fail_methods)")
        conf = self.configuration
        replication = conf.dummy_replication_type
        stats: dict[str, Any] = {
            "share_backend_name": self.share_backend_name,
            "vendor_name": "sharemgr",
            "driver_version": "1.0",
            "storage_protocol": "NFS_CIFS",
            "driver_handles_share_servers": self.driver_handles_share_servers,
            "snapshot_support": conf.dummy_snapshot_support,
            "create_share_from_snapshot_support": conf.dummy_create_share_from_snapshot_support,
            "replication_type": None if replication == "none" else replication,
            "share_group_support": conf.dummy_share_group_support,
            "total_capacity_gb": "infinite",
            "free_capacity_gb": "infinite",
            "pools": [],
        }
        pools = conf.dummy_pools or {}
        if pools:
            used = dict.fromkeys(pools, 0)
            with self.state.reading() as tx:
                for obj in tx.objects():
                    pool = (obj["details"] or {}).get("pool")
                    if obj["kind"] in SHARE_KINDS and pool in used:
                        used[pool] += obj["size"] or 0
            stats["pools"] = [
                {"pool_name": name, "total_capacity_gb": total,
                 "free_capacity_gb": total - used[name], "allocated_capacity_gb": used[name],
                 "reserved_percentage": 0, "thin_provisioning": False}
                for name, total in sorted(pools.items())
            ]
            stats["total_capacity_gb"] = sum(pools.values())
            stats["free_capacity_gb"] = sum(p["free_capacity_gb"] for p in stats["pools"])
        return stats

    # Shares -------------------------------------------------------------------

    def _create_share(self, tx: Tx, share: dict, server: dict | None,
                      snapshot_id: str | None = None, size: int | None = None) -> list[dict]:
        server_id = self._check_server(tx, server, "a share")
        existing = tx.get(share["id"])
        if existing is not None:
            if existing["kind"] != "share":
                raise InvalidShareRequest(
                    f"dummy backend: id {share['id']} is a {existing['kind']}"
                )
            return existing["export_locations"]
        locations = self._export_locations(share["id"], server)
        tx.insert(
            id=share["id"], kind="share", share_id=share.get("share_id"),
            snapshot_id=snapshot_id, share_server_id=server_id, name=share.get("name"),
            size=size if size is not None else self._size(share.get("size")),
            status=_CREATED, export_locations=locations,
            details={"share_proto": share.get("share_proto"), **_pool(share)},
        )
        return locations

    def create_share(self, share: dict, share_server: dict | None = None) -> list[dict]:
        with self._op("create_share", share) as tx:
            return self._create_share(tx, share, share_server)

    def create_share_from_snapshot(
        self, share: dict, snapshot: dict, share_server: dict | None = None
    ) -> list[dict]:
        with self._op("create_share_from_snapshot", share) as tx:
            snap = self._need(tx, snapshot.get("id"), ("snapshot",), "snapshot")
            size = self._size(share.get("size"))
            if size < (snap["size"] or 0):
                raise InvalidShareRequest(
                    f"dummy backend: share of {size} GiB is smaller than snapshot "
                    f"{snap['id']} ({snap['size']} GiB)"
                )
            snapshot_id = share.get("snapshot_id") or snapshot.get("snapshot_id") or snap["id"]
            return self._create_share(tx, share, share_server, snapshot_id, size)

    def delete_share(self, share: dict, share_server: dict | None = None) -> None:
        with self._op("delete_share", share) as tx:
            if tx.get(share["id"], ("share",)) is not None:
                # A real backend cannot drop a volume that still has snapshots.
                self._refuse_if_used(tx, "share_instance_id", share["id"], ("snapshot",),
                                     "share")
                tx.delete(share["id"])

    def _resize(self, method: str, share: dict, new_size: int, grow: bool) -> None:
        with self._op(method, share) as tx:
            obj = self._need(tx, share["id"], SHARE_KINDS, "share")
            new_size = self._size(new_size)
            if (grow and new_size < obj["size"]) or (not grow and new_size > obj["size"]):
                verb = "extend" if grow else "shrink"
                raise InvalidShareRequest(
                    f"dummy backend: cannot {verb} share {obj['id']} of {obj['size']} GiB "
                    f"to {new_size} GiB"
                )
            tx.update(obj["id"], size=new_size)

    def extend_share(self, share: dict, new_size: int, share_server: dict | None = None) -> None:
        self._resize("extend_share", share, new_size, grow=True)

    def shrink_share(self, share: dict, new_size: int, share_server: dict | None = None) -> None:
        self._resize("shrink_share", share, new_size, grow=False)

    # Access rules ------------------------------------------------------------

    def update_access(self, share: dict, access_rules: list[dict], add_rules: list[dict],
                      delete_rules: list[dict], share_server: dict | None = None
                      ) -> dict[str, dict[str, Any]] | None:
        """The share's export allows exactly the rules of ``access_rules``
        it can serve (kept in the object's details, which
        ``sharemgr-dummy-backend list`` shows); ``add_rules`` and
        ``delete_rules`` are not needed: the full set is the truth."""
        with self._op("update_access", share) as tx:
            obj = self._need(tx, share["id"], SHARE_KINDS, "share")
            details = dict(obj["details"] or {})
            allowed = ACCESS_TYPES_BY_PROTO.get(
                str(details.get("share_proto") or share.get("share_proto") or "").upper(),
                ("ip", "user", "cert"))
            applied, refused = [], {}
            for rule in access_rules:
                if rule["access_type"] in allowed:
                    applied.append({k: rule[k] for k in ("id", "access_type", "access_to",
                                                         "access_level")})
                else:
                    refused[rule["id"]] = {"state": "error"}
            details["access_rules"] = sorted(applied, key=lambda r: (r["access_type"],
                                                                     r["access_to"]))
            tx.update(obj["id"], details=details)
            return refused or None

    # Snapshots -------------------------------------------------------------

    def create_snapshot(self, snapshot: dict, share_server: dict | None = None) -> None:
        with self._op("create_snapshot", snapshot) as tx:
            parent = self._need(tx, snapshot.get("share_instance_id"), SHARE_KINDS, "share")
            if tx.get(snapshot["id"], ("snapshot",)) is not None:
                return None
            tx.insert(
                id=snapshot["id"], kind="snapshot", snapshot_id=snapshot.get("snapshot_id"),
                share_id=snapshot.get("share_id") or parent["share_id"],
                share_instance_id=parent["id"], name=snapshot.get("name"),
                size=parent["size"], status=_CREATED,
            )
        return None

    def delete_snapshot(self, snapshot: dict, share_server: dict | None = None) -> None:
        with self._op("delete_snapshot", snapshot) as tx:
            if tx.get(snapshot["id"], ("snapshot",)) is not None:
                tx.delete(snapshot["id"])

    # Replicas ---------------------------------------------------------------

    def create_replica(
        self, replica: dict, active_replica: dict, share_server: dict | None = None
    ) -> dict[str, Any]:
        with self._op("create_replica", replica) as tx:
            server_id = self._check_server(tx, share_server, "a replica")
            active = self._need(tx, active_replica.get("id"), SHARE_KINDS, "active replica")
            existing = tx.get(replica["id"], ("replica",))
            if existing is None:
                existing = tx.insert(
                    id=replica["id"], kind="replica",
                    share_id=replica.get("share_id") or active["share_id"],
                    share_server_id=server_id, name=replica.get("name"),
                    size=active["size"], status=_CREATED, replica_state="in_sync",
                    export_locations=self._export_locations(replica["id"], share_server),
                    details=_pool(replica),
                )
            return {
                "export_locations": existing["export_locations"],
                "replica_state": existing["replica_state"],
            }

    def delete_replica(self, replica: dict, share_server: dict | None = None) -> None:
        with self._op("delete_replica", replica) as tx:
            if tx.get(replica["id"], ("replica",)) is not None:
                tx.delete(replica["id"])

    # Share groups ---------------------------------------------------------------

    def create_share_group(self, group: dict, share_server: dict | None = None) -> None:
        with self._op("create_share_group", group) as tx:
            server_id = share_server["id"] if share_server else None
            if tx.get(group["id"], ("share_group",)) is None:
                tx.insert(
                    id=group["id"], kind="share_group", share_group_id=group["id"],
                    share_server_id=server_id, name=group.get("name"), status=_CREATED,
                )
        return None

    def delete_share_group(self, group: dict, share_server: dict | None = None) -> None:
        with self._op("delete_share_group", group) as tx:
            if tx.get(group["id"], ("share_group",)) is not None:
                self._refuse_if_used(tx, "share_group_id", group["id"], ("group_snapshot",),
                                     "share group")
                tx.delete(group["id"])

    def create_share_group_snapshot(
        self, group_snapshot: dict, share_server: dict | None = None
    ) -> None:
        with self._op("create_share_group_snapshot", group_snapshot) as tx:
            group = self._need(
                tx, group_snapshot.get("share_group_id"), ("share_group",), "share group"
            )
            if tx.get(group_snapshot["id"], ("group_snapshot",)) is None:
                tx.insert(
                    id=group_snapshot["id"], kind="group_snapshot",
                    share_group_id=group["id"], name=group_snapshot.get("name"),
                    status=_CREATED,
                )
        return None

    def delete_share_group_snapshot(
        self, group_snapshot: dict, share_server: dict | None = None
    ) -> None:
        with self._op("delete_share_group_snapshot", group_snapshot) as tx:
            if tx.get(group_snapshot["id"], ("group_snapshot",)) is not None:
                tx.delete(group_snapshot["id"])

    # Share servers --------------------------------------------------------------

    def setup_server(self, server: dict, network_info: dict | None = None) -> dict[str, Any]:
        with self._op("setup_server", server) as tx:
            if not self.driver_handles_share_servers:
                raise InvalidShareRequest(
                    f"dummy backend {self.backend_name} does not handle share servers "
                    "(driver_handles_share_servers = False)"
                )
            existing = tx.get(server["id"], ("share_server",))
            if existing is not None:
                return existing["details"]
            details = {
                "server_name": f"dummy-server-{server['id']}",
                "address": f"{server['id'][:8]}.{self.backend_name}.dummy",
            }
            tx.insert(id=server["id"], kind="share_server", share_server_id=server["id"],
                      name=details["server_name"], status=_CREATED, details=details)
            return details

    def teardown_server(self, server: dict, backend_details: dict[str, Any]) -> None:
        with self._op("teardown_server", server) as tx:
            if tx.get(server["id"], ("share_server",)) is not None:
                self._refuse_if_used(tx, "share_server_id", server["id"],
                                     ("share", "replica", "share_group"), "share server")
                tx.delete(server["id"])

    # Backups ---------------------------------------------------------------------
    # Progress moves by half on every *_continue call, so a backup takes two
    # periodic runs: enough to see the transient status, no clocks involved.

    def create_backup(self, share: dict, backup: dict) -> None:
        with self._op("create_backup", backup) as tx:
            parent = self._need(tx, share.get("id"), SHARE_KINDS, "share")
            if tx.get(backup["id"], ("backup",)) is None:
                tx.insert(
                    id=backup["id"], kind="backup",
                    share_id=backup.get("share_id") or parent["share_id"],
                    share_instance_id=parent["id"], name=backup.get("name"),
                    size=parent["size"], status="creating", details={"progress": 0},
                )
        return None

    def _advance(self, method: str, backup: dict, key: str, done_status: str) -> dict[str, str]:
        with self._op(method, backup) as tx:
            obj = self._need(tx, backup.get("id"), ("backup",), "backup")
            details = dict(obj["details"])
            details[key] = min(100, int(details.get(key, 0)) + 50)
            status = done_status if details[key] == 100 else obj["status"]
            tx.update(obj["id"], details=details, status=status)
            return {"total_progress": str(details[key])}

    def create_backup_continue(self, share: dict, backup: dict) -> dict[str, str]:
        return self._advance("create_backup_continue", backup, "progress", _CREATED)

    def restore_backup(self, backup: dict, share: dict) -> None:
        with self._op("restore_backup", backup) as tx:
            obj = self._need(tx, backup.get("id"), ("backup",), "backup")
            self._need(tx, share.get("id"), SHARE_KINDS, "share")
            if obj["status"] not in (_CREATED, "restoring"):
                raise InvalidShareRequest(
                    f"dummy backend: backup {obj['id']} is {obj['status']}, not available"
                )
            details = {**obj["details"], "restore_progress": 0, "restore_to": share["id"]}
            tx.update(obj["id"], status="restoring", details=details)

    def restore_backup_continue(self, backup: dict, share: dict) -> dict[str, str]:
        return self._advance("restore_backup_continue", backup, "restore_progress", _CREATED)

    def delete_backup(self, backup: dict) -> None:
        with self._op("delete_backup", backup) as tx:
            if tx.get(backup["id"], ("backup",)) is not None:
                tx.delete(backup["id"])

    # Status methods -------------------------------------------------------------

    def _status(self, method: str, resource: dict, kinds: tuple[str, ...], what: str) -> dict:
        with self._op(method, resource, write=False) as tx:
            return self._need(tx, resource.get("id"), kinds, what)

    def _statuses(self, single: str, items: list[tuple[dict, dict | None]],
                  kinds: tuple[str, ...], what: str) -> dict[str, Any]:
        """The batch form of a status method: one call log transaction, one
        read; knobs apply once per call under the batch method's name."""
        method = base.BATCH_STATUS_METHODS[single]
        # The manager asks about rows it has: each has an id.
        ids = [str((resource or {}).get("id")) for resource, _ in items]
        given = [((r or {}).get("id"), (r or {}).get("fence_token")) for r, _ in items]
        tokens = {str(k): int(v) for k, v in given if k and v is not None} \
            if self.honours_fencing else {}
        self.state.log_calls(method, ids, self.engine_id, tokens)
        if method not in self.status_methods or single not in self.status_methods:
            raise NotImplementedError(f"dummy driver: {method} is disabled by dummy_status_methods")
        self.knobs.wait_at_gate(method, "")
        self.knobs.delay(method, "")
        if self.knobs.should_fail(method, ""):
            raise ShareBackendException(
                f"dummy driver: {method} of {self.backend_name} failed (dummy_fail_methods)")
        with self.state.transaction() if tokens else self.state.reading() as tx:
            if tokens:
                stale = [k for k, v in tokens.items() if tx.accept_token(k, v) is not None]
                if stale:
                    # Asked one by one instead, each refused on its own.
                    raise FencedCall(f"dummy backend: {method}: fenced for {', '.join(stale)}")
            found = tx.get_many(ids, kinds)
        answers: dict[str, Any] = {}
        for rid in ids:
            obj = found.get(rid)
            answers[rid] = (_ANSWER[single](obj) if obj is not None else
                            ShareResourceNotFound(f"dummy backend has no {what} {rid}"))
        return answers

    def list_shares(self) -> list[dict[str, Any]]:
        with self._op("list_shares", None, write=False) as tx:
            return [{"id": o["id"], "name": o["name"], "size": o["size"],
                     "status": o["status"], "export_locations": o["export_locations"]}
                    for kind in SHARE_KINDS for o in tx.objects(kind)]

    def get_share_status(self, share: dict, share_server: dict | None = None) -> dict[str, Any]:
        obj = self._status("get_share_status", share, SHARE_KINDS, "share")
        return _ANSWER["get_share_status"](obj)

    def get_share_statuses(self, shares: list[tuple[dict, dict | None]]) -> dict[str, Any]:
        return self._statuses("get_share_status", shares, SHARE_KINDS, "share")

    def get_snapshot_statuses(self, snapshots: list[tuple[dict, dict | None]]
                              ) -> dict[str, Any]:
        return self._statuses("get_snapshot_status", snapshots, ("snapshot",), "snapshot")

    def get_replica_statuses(self, replicas: list[tuple[dict, dict | None]]) -> dict[str, Any]:
        return self._statuses("get_replica_status", replicas, SHARE_KINDS, "replica")

    def get_share_group_statuses(self, groups: list[tuple[dict, dict | None]]
                                 ) -> dict[str, Any]:
        return self._statuses("get_share_group_status", groups, ("share_group",),
                              "share group")

    def get_share_group_snapshot_statuses(
        self, group_snapshots: list[tuple[dict, dict | None]]
    ) -> dict[str, Any]:
        return self._statuses("get_share_group_snapshot_status", group_snapshots,
                              ("group_snapshot",), "group snapshot")

    def get_snapshot_status(
        self, snapshot: dict, share_server: dict | None = None
    ) -> dict[str, Any]:
        obj = self._status("get_snapshot_status", snapshot, ("snapshot",), "snapshot")
        return _ANSWER["get_snapshot_status"](obj)

    def get_replica_status(
        self, replica: dict, share_server: dict | None = None
    ) -> dict[str, Any]:
        obj = self._status("get_replica_status", replica, SHARE_KINDS, "replica")
        return _ANSWER["get_replica_status"](obj)

    def get_share_group_status(
        self, group: dict, share_server: dict | None = None
    ) -> dict[str, Any]:
        obj = self._status("get_share_group_status", group, ("share_group",), "share group")
        return _ANSWER["get_share_group_status"](obj)

    def get_share_group_snapshot_status(
        self, group_snapshot: dict, share_server: dict | None = None
    ) -> dict[str, Any]:
        obj = self._status("get_share_group_snapshot_status", group_snapshot,
                           ("group_snapshot",), "group snapshot")
        return _ANSWER["get_share_group_snapshot_status"](obj)


# What each status method answers for a backend object: one definition for
# the single and the batch form, so they cannot disagree.
_ANSWER = {
    "get_share_status": lambda obj: {"status": obj["status"], "size": obj["size"],
                                     "export_locations": obj["export_locations"]},
    "get_snapshot_status": lambda obj: {"status": obj["status"], "size": obj["size"]},
    "get_replica_status": lambda obj: {
        "status": obj["status"],
        "size": obj["size"],
        "replica_state": obj["replica_state"] or "active",
        "export_locations": obj["export_locations"],
    },
    "get_share_group_status": lambda obj: {"status": obj["status"]},
    "get_share_group_snapshot_status": lambda obj: {"status": obj["status"]},
}
