"""What the dummy backend answers without changing anything: its
description, ensure-shares, capabilities and pools, the share listing and
the status methods (single and batch)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.dummy_calls import SHARE_KINDS, DummyCalls
from sharemgr.drivers.dummy_state import BackendObject
from sharemgr.drivers.exceptions import (
    FencedCall,
    ShareBackendException,
    ShareResourceNotFound,
)


class DummyReads(DummyCalls):
    """The dummy driver's reads of its backend."""

    def get_backend_info(self) -> base.JSONDict:
        with self._op("get_backend_info", None, write=False):
            return {
                "driver": "dummy",
                "version": "1",
                "driver_handles_share_servers": self.driver_handles_share_servers,
                "state": os.path.abspath(self.dummy_state_path),
            }

    def ensure_shares(self, shares: list[base.Share]) -> dict[str, base.ShareUpdate]:
        with self._op("ensure_shares", None, write=False) as tx:
            updates: dict[str, base.ShareUpdate] = {}
            for share in shares:
                obj = tx.get(share["id"], SHARE_KINDS)
                if obj is None:
                    updates[share["id"]] = {"status": vocab.ERROR, "export_locations": []}
                else:
                    updates[share["id"]] = {
                        "status": obj["status"],
                        "export_locations": obj["export_locations"],
                    }
            return updates

    def get_share_stats(self, refresh: bool = False) -> base.ShareStats:
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
        stats: base.ShareStats = {
            "share_backend_name": self.share_backend_name,
            "vendor_name": "sharemgr",
            "driver_version": "1.0",
            # Every protocol it exports (Manila's form: joined by '_').
            "storage_protocol": "_".join(vocab.PROTOCOLS),
            "driver_handles_share_servers": self.driver_handles_share_servers,
            "snapshot_support": conf.dummy_snapshot_support,
            "create_share_from_snapshot_support": conf.dummy_create_share_from_snapshot_support,
            "replication_type": None if replication == "none" else replication,
            "replication_domain": conf.dummy_replication_domain,
            "share_group_support": conf.dummy_share_group_support,
            # What migration_check_compatibility answers (dummy_migration.py).
            "migration_support": {"driver_assisted": not self.driver_handles_share_servers,
                                  "writable": True, "nondisruptive": False,
                                  "preserve_metadata": True, "preserve_snapshots": False},
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
            stats["free_capacity_gb"] = sum(total - used[name] for name, total in pools.items())
        return stats

    # Status methods -------------------------------------------------------------

    def _status(self, method: str, resource: Mapping[str, Any], kinds: tuple[str, ...],
                what: str) -> BackendObject:
        with self._op(method, resource, write=False) as tx:
            return self._need(tx, resource.get("id"), kinds, what)

    def _statuses(self, single: str,
                  items: Sequence[tuple[Mapping[str, Any], base.ShareServer | None]],
                  kinds: tuple[str, ...], what: str) -> dict[str, base.StatusAnswer]:
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
        answers: dict[str, base.StatusAnswer] = {}
        for rid in ids:
            obj = found.get(rid)
            answers[rid] = (_ANSWER[single](obj) if obj is not None else
                            ShareResourceNotFound(f"dummy backend has no {what} {rid}"))
        return answers

    def list_shares(self) -> list[base.ListedShare]:
        with self._op("list_shares", None, write=False) as tx:
            return [{"id": o["id"], "name": o["name"], "size": o["size"],
                     "status": o["status"], "export_locations": o["export_locations"]}
                    for kind in SHARE_KINDS for o in tx.objects(kind)]

    def get_share_status(self, share: base.Share, share_server: base.ShareServer | None = None
                         ) -> base.StatusReport:
        obj = self._status("get_share_status", share, SHARE_KINDS, "share")
        return _ANSWER["get_share_status"](obj)

    def get_share_statuses(self, shares: list[tuple[base.Share, base.ShareServer | None]]
                           ) -> dict[str, base.StatusAnswer]:
        return self._statuses("get_share_status", shares, SHARE_KINDS, "share")

    def get_snapshot_statuses(
        self, snapshots: list[tuple[base.Snapshot, base.ShareServer | None]]
    ) -> dict[str, base.StatusAnswer]:
        return self._statuses("get_snapshot_status", snapshots, ("snapshot",), "snapshot")

    def get_replica_statuses(self, replicas: list[tuple[base.Replica, base.ShareServer | None]]
                             ) -> dict[str, base.StatusAnswer]:
        return self._statuses("get_replica_status", replicas, SHARE_KINDS, "replica")

    def get_share_group_statuses(
        self, groups: list[tuple[base.ShareGroup, base.ShareServer | None]]
    ) -> dict[str, base.StatusAnswer]:
        return self._statuses("get_share_group_status", groups, ("share_group",),
                              "share group")

    def get_share_group_snapshot_statuses(
        self, group_snapshots: list[tuple[base.GroupSnapshot, base.ShareServer | None]]
    ) -> dict[str, base.StatusAnswer]:
        return self._statuses("get_share_group_snapshot_status", group_snapshots,
                              ("group_snapshot",), "group snapshot")

    def get_snapshot_status(
        self, snapshot: base.Snapshot, share_server: base.ShareServer | None = None
    ) -> base.StatusReport:
        obj = self._status("get_snapshot_status", snapshot, ("snapshot",), "snapshot")
        return _ANSWER["get_snapshot_status"](obj)

    def get_replica_status(
        self, replica: base.Replica, share_server: base.ShareServer | None = None
    ) -> base.StatusReport:
        obj = self._status("get_replica_status", replica, SHARE_KINDS, "replica")
        return _ANSWER["get_replica_status"](obj)

    def get_share_group_status(
        self, group: base.ShareGroup, share_server: base.ShareServer | None = None
    ) -> base.StatusReport:
        obj = self._status("get_share_group_status", group, ("share_group",), "share group")
        return _ANSWER["get_share_group_status"](obj)

    def get_share_group_snapshot_status(
        self, group_snapshot: base.GroupSnapshot, share_server: base.ShareServer | None = None
    ) -> base.StatusReport:
        obj = self._status("get_share_group_snapshot_status", group_snapshot,
                           ("group_snapshot",), "group snapshot")
        return _ANSWER["get_share_group_snapshot_status"](obj)


# What each status method answers for a backend object: one definition for
# the single and the batch form, so they cannot disagree.
def _share_answer(obj: BackendObject) -> base.StatusReport:
    return {"status": obj["status"], "size": obj["size"],
            "export_locations": obj["export_locations"]}


def _snapshot_answer(obj: BackendObject) -> base.StatusReport:
    return {"status": obj["status"], "size": obj["size"]}


def _replica_answer(obj: BackendObject) -> base.StatusReport:
    return {
        "status": obj["status"],
        "size": obj["size"],
        "replica_state": obj["replica_state"] or "active",
        "export_locations": obj["export_locations"],
    }


def _group_answer(obj: BackendObject) -> base.StatusReport:
    return {"status": obj["status"]}


_ANSWER: dict[str, Callable[[BackendObject], base.StatusReport]] = {
    "get_share_status": _share_answer,
    "get_snapshot_status": _snapshot_answer,
    "get_replica_status": _replica_answer,
    "get_share_group_status": _group_answer,
    "get_share_group_snapshot_status": _group_answer,
}
