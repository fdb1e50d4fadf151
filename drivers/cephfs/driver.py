"""The ``cephfs`` share driver: each share a CephFS subvolume.

A share is a subvolume named by its instance id in the backend's subvolume
group, its quota the share's size; snapshots are subvolume snapshots and a
share from a snapshot is a clone. The mgr's ``volumes`` module does the
work (asked through librados, ``client.CephClient``); clients mount the
subvolume's path natively. doc/cephfs_driver.rst describes the mapping.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar, cast

from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.drivers import base, shapes
from sharemgr.drivers.cephfs import manage, nfs, statuses
from sharemgr.drivers.cephfs.client import CephCallFailed, CephClient, PoolUsage, SubvolumeInfo
from sharemgr.drivers.cephfs.fencing import ClusterFence
from sharemgr.drivers.cephfs.names import Names
from sharemgr.drivers.cephfs.options import cephfs_opts
from sharemgr.drivers.exceptions import (
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
    ShareShrinkingPossibleDataLoss,
)

VERSION = "1.0"
GIB = 1 << 30
# A clone's states (``fs clone status``) and what they mean for its share.
CLONE_STATUS = {"pending": "creating_from_snapshot", "in-progress": "creating_from_snapshot",
                "complete": "available", "failed": "error", "canceled": "error"}
CLONE_POLL = 0.5
# How long a create from a snapshot waits for its clone before it answers
# creating_from_snapshot (a small clone then ends within the call).
CLONE_MOMENT = 5.0


def _dict(value: object) -> dict[str, object]:
    """A JSON answer's object, or {} for anything else (a reply's shape is
    the cluster's, not ours)."""
    return value if isinstance(value, dict) else {}


def _items(value: object) -> list[object]:
    """A JSON answer's array, or [] for anything else."""
    return value if isinstance(value, list) else []


R = TypeVar("R")


def _fenced(what: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """The method runs holding the fencing lock of its first argument (the
    share or snapshot it is about), its token accepted by the cluster."""

    def wrap(method: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(method)
        def call(self: CephFSDriver, resource: Mapping[str, object], *args: object,
                 **kw: object) -> R:
            with self.fence.guard(resource, what):
                return method(self, resource, *args, **kw)
        return call
    return wrap


class CephFSDriver(base.ShareDriver):
    """Shares as CephFS subvolumes of one subvolume group."""

    driver_opts = cephfs_opts
    supported_dhss_modes = (False,)
    # Checked and advanced in the cluster (fencing.py).
    honours_fencing = True

    def __init__(self, configuration: cfg.ConfigOpts.GroupAttr, *, backend_name: str, host: str,
                 engine_id: str, state_path: str) -> None:
        super().__init__(configuration, backend_name=backend_name, host=host,
                         engine_id=engine_id, state_path=state_path)
        conf = configuration
        self.ceph = CephClient(conf.cephfs_python, conf.cephfs_conf_path,
                               conf.cephfs_cluster_name, conf.cephfs_auth_id,
                               conf.cephfs_command_timeout)
        self.group = conf.cephfs_subvolume_group or f"sharemgr_{backend_name}"
        self.mode = conf.cephfs_volume_mode.lstrip("0") or "0"
        self.volume: str = conf.cephfs_filesystem_name or ""
        self.over_subscription = float(conf.cephfs_max_over_subscription_ratio)
        self.fence = ClusterFence(self.ceph, self.group, conf.cephfs_fence_lock_seconds)
        self.names = Names(self.ceph, self.group)
        self.protocol = conf.cephfs_protocol_helper_type
        self.nfs: nfs.Nfs | None = None
        if self.protocol == "NFS":
            self.nfs = nfs.Nfs(self.ceph, conf.cephfs_conf_path, conf.cephfs_auth_id, self.group,
                           conf.cephfs_ganesha_server_ip or "",
                           list(conf.cephfs_ganesha_export_ips), conf.cephfs_ganesha_nfs_port,
                           conf.cephfs_ganesha_manage_server,
                           Path(os.path.join(state_path, "cephfs", backend_name, "ganesha")))

    # Set-up ----------------------------------------------------------------

    def do_setup(self) -> None:
        if self.ceph.python_missing():
            raise ShareBackendException(
                f"cephfs driver: no {self.ceph.python}: set cephfs_python to the Python of "
                "the Debian package python3-rados (doc/cephfs_driver.rst)")
        listed = cast("list[dict[str, str]]", _items(self.ceph.mgr("fs volume ls")))
        volumes = [v["name"] for v in listed]
        if self.volume and self.volume not in volumes:
            raise ShareBackendException(
                f"cephfs driver: the cluster has no file system {self.volume!r} "
                f"(it has: {', '.join(volumes) or 'none'})")
        if not self.volume:
            if len(volumes) != 1:
                raise ShareBackendException(
                    "cephfs driver: set cephfs_filesystem_name: the cluster has "
                    f"{len(volumes)} file systems ({', '.join(volumes) or 'none'})")
            self.volume = volumes[0]
        self.ceph.mgr("fs subvolumegroup create", vol_name=self.volume, group_name=self.group)
        pools = [_dict(f).get("metadata_pool") for f in _items(self.ceph.mon("fs ls"))
                 if _dict(f).get("name") == self.volume]
        if not pools or not isinstance(pools[0], str):
            raise ShareBackendException(f"cephfs driver: no metadata pool of {self.volume}")
        self.fence.setup(pools[0])
        self.names.setup(pools[0])
        if self.nfs is not None:
            if not self.nfs.server_ip:
                raise ShareBackendException(
                    "cephfs driver: set cephfs_ganesha_server_ip (the NFS server's address): "
                    "cephfs_protocol_helper_type is NFS")
            self.nfs.setup(pools[0])

    def check_for_setup_error(self) -> None:
        self.ceph.mgr("fs subvolumegroup getpath", vol_name=self.volume,
                      group_name=self.group)

    def get_backend_info(self) -> shapes.JSONDict:
        return {"driver": "cephfs", "version": VERSION, "volume": self.volume,
                "group": self.group}

    # Calls -------------------------------------------------------------------

    def _sub(self, verb: str, name: str | None = None, **args: object) -> object:
        """``fs subvolume <verb>`` in this backend's volume and group, of
        the subvolume of share instance ``name``."""
        if name is not None:
            args["sub_name"] = self.names.of(name)
        return self.ceph.mgr(f"fs subvolume {verb}", vol_name=self.volume,
                             group_name=self.group, **args)

    def _info(self, name: str) -> SubvolumeInfo:
        try:
            answer = self._sub("info", name)
        except CephCallFailed as exc:
            if exc.missing:
                raise ShareResourceNotFound(f"cephfs: no subvolume {name} in group "
                                            f"{self.group}") from exc
            raise
        if not isinstance(answer, dict):
            raise ShareBackendException(f"cephfs: subvolume info {name}: {answer!r}")
        return cast(SubvolumeInfo, answer)

    def _ready_info(self, name: str) -> SubvolumeInfo | None:
        """``_info``, or None for a subvolume not ready (a clone copying,
        or one that failed: EAGAIN)."""
        try:
            return self._info(name)
        except CephCallFailed as exc:
            if exc.code == errno.EAGAIN:
                return None
            raise

    def _locations(self, share_id: str, info: Mapping[str, object]
                   ) -> list[shapes.ExportLocation]:
        if self.nfs is not None:
            return self.nfs.locations(share_id)
        addrs = info.get("mon_addrs")
        mons = ",".join(str(m) for m in addrs) if isinstance(addrs, list) else ""
        return [{"path": f"{mons}:{info['path']}", "is_admin_only": False, "preferred": True}]

    def _proto(self, share: shapes.Share) -> None:
        proto = str(share.get("share_proto", "")).upper()
        if proto != self.protocol:
            raise InvalidShareRequest(f"cephfs driver: protocol {proto or 'none'} is not "
                                      f"served ({self.protocol} only)")

    def _serve(self, share: shapes.Share, info: Mapping[str, object]
               ) -> list[shapes.ExportLocation]:
        """A new share's export locations; on NFS its export, to no client
        until its rules come (a create retried after a crash writes the
        same)."""
        if self.nfs is not None:
            self.nfs.export(share["id"], str(info["path"]), self.volume,
                            functools.partial(self._authorize, share), [])
        return self._locations(share["id"], info)

    def _authorize(self, share: shapes.Share, auth_id: str, level: str = "rw") -> str:
        """Authorize ``auth_id`` on the share's subvolume; its key."""
        key = self._sub("authorize", share["id"], auth_id=auth_id, access_level=level,
                        tenant_id=str(share.get("project_id") or "sharemgr"))
        if not isinstance(key, str) or not key.strip():
            raise ShareBackendException(f"cephfs: authorize {auth_id} gave no key")
        return key.strip()

    # Shares ----------------------------------------------------------------------

    @_fenced("share")
    def create_share(self, share: shapes.Share, share_server: shapes.ShareServer | None = None
                     ) -> list[shapes.ExportLocation]:
        self._proto(share)
        # Creating an existing subvolume sets its size: a create retried
        # after a crash ends as the first one would have.
        self._sub("create", share["id"], size=int(share["size"]) * GIB, mode=self.mode,
                  namespace_isolated=True)
        return self._serve(share, self._info(share["id"]))

    @_fenced("share")
    def create_share_from_snapshot(self, share: shapes.Share, snapshot: shapes.Snapshot,
                                   share_server: shapes.ShareServer | None = None
                                   ) -> dict[str, object]:
        """A clone of the snapshot, which the mgr copies in the background:
        ``creating_from_snapshot`` until it ends (the manager then asks
        ``get_share_status``), unless it ended within a moment."""
        self._proto(share)
        target = share["id"]
        try:
            self._clone_state(target)
        except ShareResourceNotFound:
            try:
                self._sub("snapshot clone", snapshot["share_instance_id"],
                          snap_name=snapshot["id"], target_sub_name=target,
                          target_group_name=self.group)
            except CephCallFailed as exc:
                if exc.missing:
                    raise ShareResourceNotFound(
                        f"cephfs: no snapshot {snapshot['id']} of subvolume "
                        f"{snapshot['share_instance_id']}") from exc
                raise
        deadline = time.monotonic() + CLONE_MOMENT
        while (state := self._clone_state(target)) == vocab.CREATING_FROM_SNAPSHOT and \
                time.monotonic() < deadline:
            time.sleep(CLONE_POLL)
        if state == vocab.CREATING_FROM_SNAPSHOT:
            return {"status": state, "export_locations": []}
        if state != vocab.AVAILABLE:
            raise ShareBackendException(f"cephfs: the clone of snapshot {snapshot['id']} "
                                        f"into {target} failed")
        return {"status": vocab.AVAILABLE, "export_locations": self._finish_clone(share)}

    def _finish_clone(self, share: shapes.Share) -> list[shapes.ExportLocation]:
        """A finished clone's quota is its source's: raised to the share's
        size (a share from a snapshot may be larger than its source)."""
        info = self._info(share["id"])
        if int(info.get("bytes_quota") or 0) < int(share["size"]) * GIB:
            self._sub("resize", share["id"], new_size=str(int(share["size"]) * GIB),
                      no_shrink=True)
            info = self._info(share["id"])
        return self._serve(share, info)

    def _clone_state(self, name: str) -> str:
        """The share status a clone's state means; ``available`` for a
        subvolume that is no clone (or whose clone finished long ago)."""
        try:
            answer = self.ceph.mgr("fs clone status", vol_name=self.volume,
                                   clone_name=self.names.of(name), group_name=self.group)
        except CephCallFailed as exc:
            if exc.missing:
                raise ShareResourceNotFound(f"cephfs: no subvolume {name}") from exc
            if "not allowed on subvolume" in str(exc) or exc.code == 95:  # not a clone
                return "available"
            raise
        state = cast(str, _dict(_dict(answer).get("status")).get("state", ""))
        return CLONE_STATUS.get(state, "error")

    @_fenced("share")
    def delete_share(self, share: shapes.Share, share_server: shapes.ShareServer | None = None
                     ) -> None:
        if self.nfs is not None:
            self.nfs.unexport(share["id"])
            self._deauthorize(share["id"], nfs.auth_id(share["id"]))
        # --force: a subvolume already gone counts as deleted.
        self._sub("rm", share["id"], force=True)
        self.names.forget(share["id"])

    @_fenced("share")
    def extend_share(self, share: shapes.Share, new_size: int,
                     share_server: shapes.ShareServer | None = None) -> None:
        if new_size < int(share["size"]):
            raise InvalidShareRequest(f"cephfs: extend to {new_size} below the size "
                                      f"{share['size']}")
        self._info(share["id"])
        self._sub("resize", share["id"], new_size=str(new_size * GIB), no_shrink=True)

    @_fenced("share")
    def shrink_share(self, share: shapes.Share, new_size: int,
                     share_server: shapes.ShareServer | None = None) -> None:
        if new_size > int(share["size"]):
            raise InvalidShareRequest(f"cephfs: shrink to {new_size} above the size "
                                      f"{share['size']}")
        used = int(self._info(share["id"]).get("bytes_used") or 0)
        if used > new_size * GIB:
            # Ceph would set a quota below the data (clients then fail every
            # write): refused, the share left as it was.
            raise ShareShrinkingPossibleDataLoss(
                f"cephfs: share {share['id']} holds {used} bytes, more than {new_size} GiB")
        self._sub("resize", share["id"], new_size=str(new_size * GIB), no_shrink=False)

    def ensure_shares(self, shares: list[shapes.Share]) -> dict[str, shapes.ShareUpdate]:
        present = {s["name"] for s in self._ls()}
        if self.nfs is not None:
            self.nfs.ensure_running()
        return {s["id"]: {"status": vocab.ERROR} for s in shares if s["id"] not in present}

    # Access ------------------------------------------------------------------------

    @_fenced("share")
    def update_access(self, share: shapes.Share, access_rules: list[shapes.AccessRule],
                      add_rules: list[shapes.AccessRule], delete_rules: list[shapes.AccessRule],
                      share_server: shapes.ShareServer | None = None
                      ) -> dict[str, shapes.RuleError | shapes.RuleKey] | None:
        """cephx rules: each id authorized on the subvolume (its key the
        rule's ``access_key``); a denied one deauthorized and its sessions
        evicted. With no changes given, the subvolume's ids are made to
        match ``access_rules`` exactly."""
        name = share["id"]
        info = self._info(name)
        if self.nfs is not None:  # the export's clients: the whole rule set
            gone = {r["id"] for r in delete_rules}
            refused = self.nfs.export(name, str(info["path"]), self.volume,
                                      functools.partial(self._authorize, share),
                                      [r for r in access_rules if r["id"] not in gone])
            return {rid: {"state": vocab.ACCESS_ERROR, "reason": why}
                    for rid, why in refused.items()} or None
        if not add_rules and not delete_rules:
            wanted = {r["access_to"] for r in access_rules if self._refusal(r) is None}
            for auth_id in set(self._authorized(name)) - wanted:
                self._deauthorize(name, auth_id)
            add_rules = access_rules
        for rule in delete_rules:
            if self._refusal(rule) is None:
                self._deauthorize(name, rule["access_to"])
        answers: dict[str, shapes.RuleError | shapes.RuleKey] = {}
        tenant = str(share.get("project_id") or "sharemgr")
        for rule in add_rules:
            refusal = self._refusal(rule)
            if refusal is not None:
                answers[rule["id"]] = {"state": vocab.ACCESS_ERROR, "reason": refusal}
                continue
            key = self._sub("authorize", name, auth_id=rule["access_to"],
                            access_level=rule["access_level"], tenant_id=tenant)
            if isinstance(key, str) and key.strip():
                answers[rule["id"]] = {"access_key": key.strip()}
        return answers or None

    def _refusal(self, rule: shapes.AccessRule) -> str | None:
        if str(rule.get("access_to", "")).startswith(nfs.AUTH_PREFIX):
            return f"cephx ids {nfs.AUTH_PREFIX}* are reserved (NFS-Ganesha's)"
        if rule.get("access_type") != "cephx":
            return f"a CephFS share takes cephx rules, not {rule.get('access_type')}"
        if rule.get("access_to") in (self.configuration.cephfs_auth_id, "admin"):
            return f"cephx id {rule.get('access_to')} is reserved (the driver's or the admin's)"
        return None

    def _authorized(self, name: str) -> dict[str, str]:
        answer = self._sub("authorized_list", name)
        return {k: str(v) for entry in _items(answer)
                for k, v in _dict(entry).items()}

    def _deauthorize(self, name: str, auth_id: str) -> None:
        for verb in ("deauthorize", "evict"):
            try:
                self._sub(verb, name, auth_id=auth_id)
            except CephCallFailed as exc:
                if not exc.missing:
                    raise

    # Snapshots -------------------------------------------------------------------

    @_fenced("snapshot")
    def create_snapshot(self, snapshot: shapes.Snapshot,
                        share_server: shapes.ShareServer | None = None
                        ) -> shapes.ModelUpdate | None:
        try:
            self._sub("snapshot create", snapshot["share_instance_id"],
                      snap_name=snapshot["id"])
        except CephCallFailed as exc:
            if exc.missing:
                raise ShareResourceNotFound(
                    f"cephfs: no subvolume {snapshot['share_instance_id']}") from exc
            if exc.code != 17:  # EEXIST: a create retried after a crash
                raise
        return None

    @_fenced("snapshot")
    def delete_snapshot(self, snapshot: shapes.Snapshot,
                        share_server: shapes.ShareServer | None = None) -> None:
        self._sub("snapshot rm", snapshot["share_instance_id"], snap_name=snapshot["id"],
                  force=True)

    # Capacity --------------------------------------------------------------------

    def get_share_stats(self, refresh: bool = False) -> shapes.ShareStats:
        status = self.ceph.mgr("fs status", fs=self.volume)
        pools = _dict(status).get("pools")
        data = cast("list[PoolUsage]", [_dict(p) for p in (pools if isinstance(pools, list) else [])
                                        if _dict(p).get("type") == "data"])
        used = sum(int(p.get("used", 0)) for p in data)
        avail = min((int(p.get("avail", 0)) for p in data), default=0)
        return {
            "share_backend_name": self.share_backend_name,
            "vendor_name": "Ceph",
            "driver_version": VERSION,
            "storage_protocol": self.protocol,
            "driver_handles_share_servers": False,
            "snapshot_support": True,
            "create_share_from_snapshot_support": True,
            "replication_type": None,
            "share_group_support": False,
            # What intake refuses before a rule reaches update_access.
            "access_rule_limits": nfs.ACCESS_LIMITS if self.nfs is not None
            else {"CEPHFS": {"cephx": {}}},
            "pools": [{"pool_name": self.volume,
                       "total_capacity_gb": round((used + avail) / GIB, 2),
                       "free_capacity_gb": round(avail / GIB, 2),
                       "thin_provisioning": True,
                       "max_over_subscription_ratio": self.over_subscription}],
        }

    # Status ------------------------------------------------------------------------

    @_fenced("share")
    def get_share_status(self, share: shapes.Share,
                         share_server: shapes.ShareServer | None = None) -> shapes.StatusReport:
        info = self._ready_info(share["id"])
        status = vocab.AVAILABLE
        if info is None:  # a clone not complete: its clone state says why
            status = self._clone_state(share["id"])
            if status != vocab.AVAILABLE:
                return {"status": status}
            info = self._info(share["id"])  # it completed meanwhile
        if share.get("snapshot_id") and \
                int(info.get("bytes_quota") or 0) < int(share["size"]) * GIB:
            # A clone that ended after its create returned: its create ends
            # here (the manager asks until then), the quota raised to the size.
            self._finish_clone(share)
            info = self._info(share["id"])
        quota = info.get("bytes_quota")
        report: shapes.StatusReport = {"status": status,
                                       "export_locations": self._locations(share["id"], info)}
        if isinstance(quota, int):
            report["size"] = -(-quota // GIB)
        return report

    def get_share_statuses(self, shares: list[tuple[shapes.Share, shapes.ShareServer | None]]
                           ) -> dict[str, shapes.StatusAnswer]:
        return statuses.shares(self, [s for s, _ in shares])

    def get_snapshot_statuses(
            self, snapshots: list[tuple[shapes.Snapshot, shapes.ShareServer | None]]
    ) -> dict[str, shapes.StatusAnswer]:
        return statuses.snapshots(self, [s for s, _ in snapshots])

    @_fenced("snapshot")
    def get_snapshot_status(self, snapshot: shapes.Snapshot,
                            share_server: shapes.ShareServer | None = None) -> shapes.StatusReport:
        names = {s["name"] for s in self._snapshots(snapshot["share_instance_id"])}
        if snapshot["id"] not in names:
            raise ShareResourceNotFound(f"cephfs: no snapshot {snapshot['id']}")
        return {"status": vocab.AVAILABLE}

    def _snapshots(self, share_id: str) -> list[dict[str, str]]:
        try:
            answer = self._sub("snapshot ls", share_id)
        except CephCallFailed as exc:
            if exc.missing:
                return []
            raise
        return cast("list[dict[str, str]]", _items(answer))

    def list_shares(self) -> list[shapes.ListedShare]:
        return [{"id": s["name"], "name": s["name"]} for s in self._ls()]

    def _ls(self) -> list[dict[str, str]]:
        """The group's subvolumes, each named by its share instance's id."""
        answer = _items(self._sub("ls"))
        ids = self.names.ids_by_name() if answer else {}
        listed = [_dict(s) for s in answer]
        return cast("list[dict[str, str]]",
                    [{**s, "name": ids.get(str(s.get("name")), s.get("name"))} for s in listed])

    # Manage --------------------------------------------------------------------------

    # Manage (drivers/cephfs/manage.py); unmanage leaves the subvolume as it is.
    manage_existing = _fenced("share")(manage.take_over)
    unmanage = _fenced("share")(lambda self, share: self.names.release(share["id"]))
