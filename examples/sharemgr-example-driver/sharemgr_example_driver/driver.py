"""A share driver whose "backend" is one JSON file, locked with flock. It implements
shares, snapshots, their status methods, IP access rules and stats; every other
operation is inherited from ShareDriver and raises OperationNotSupported."""

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

from oslo_config import cfg
from sharemgr.drivers.base import ShareDriver, ShareStats, StatusReport
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound

example_opts = [
    cfg.StrOpt("example_export_host", default="nas.example.org",
               help="Host name used in the export locations of shares."),
    cfg.IntOpt("example_capacity_gb", default=100, min=1,
               help="Capacity of the backend's one pool, in GiB."),
]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """For oslo-config-generator (entry point in oslo.config.opts)."""
    return [("backend", example_opts)]


class ExampleDriver(ShareDriver):
    driver_opts = example_opts  # registered on the backend's group by the loader

    def do_setup(self) -> None:
        self.path = Path(self.state_path, "example", f"{self.backend_name}.json")
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _backend(self) -> Iterator[dict[str, dict]]:
        # flock on a side file serialises threads and processes alike.
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = json.loads(self.path.read_text()) if self.path.exists() else {}
            yield data
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(self.path)  # atomic: a crash leaves the old or the new file

    def _get(self, data: dict, obj_id: str, kind: str) -> dict:
        if data.get(obj_id, {}).get("kind") != kind:
            raise ShareResourceNotFound(f"no {kind} {obj_id}")
        return data[obj_id]

    def _delete(self, obj_id: str, kind: str) -> None:
        with self._backend() as data:  # already gone counts as deleted
            if data.get(obj_id, {}).get("kind") == kind:
                del data[obj_id]

    def create_share(self, share: dict, share_server: dict | None = None) -> list[dict]:
        location = {"path": f"{self.configuration.example_export_host}:/{share['id']}",
                    "is_admin_only": False, "preferred": True}
        with self._backend() as data:
            data.setdefault(share["id"], {"kind": "share", "size": share["size"],
                                          "export_locations": [location]})
            return data[share["id"]]["export_locations"]

    def create_share_from_snapshot(self, share: dict, snapshot: dict,
                                   share_server: dict | None = None) -> list[dict]:
        with self._backend() as data:
            self._get(data, snapshot["id"], "snapshot")
        return self.create_share(share)

    def delete_share(self, share: dict, share_server: dict | None = None) -> None:
        self._delete(share["id"], "share")

    def _resize(self, share: dict, new_size: int, grow: bool) -> None:
        with self._backend() as data:
            obj = self._get(data, share["id"], "share")
            if (new_size < obj["size"]) if grow else (new_size > obj["size"]):
                raise InvalidShareRequest(f"cannot resize {obj['size']} GiB to {new_size}")
            obj["size"] = new_size

    def extend_share(self, share: dict, new_size: int, share_server: dict | None = None) -> None:
        self._resize(share, new_size, grow=True)

    def shrink_share(self, share: dict, new_size: int, share_server: dict | None = None) -> None:
        self._resize(share, new_size, grow=False)

    def create_snapshot(self, snapshot: dict, share_server: dict | None = None) -> None:
        with self._backend() as data:
            share = self._get(data, snapshot["share_instance_id"], "share")
            data.setdefault(snapshot["id"], {"kind": "snapshot", "size": share["size"]})

    def delete_snapshot(self, snapshot: dict, share_server: dict | None = None) -> None:
        self._delete(snapshot["id"], "snapshot")

    def get_share_status(self, share: dict, share_server: dict | None = None) -> StatusReport:
        with self._backend() as data:
            obj = self._get(data, share["id"], "share")
        return {"status": "available", "size": obj["size"],
                "export_locations": obj["export_locations"]}

    def get_snapshot_status(self, snapshot: dict,
                            share_server: dict | None = None) -> StatusReport:
        with self._backend() as data:
            obj = self._get(data, snapshot["id"], "snapshot")
        return {"status": "available", "size": obj["size"]}

    def update_access(self, share: dict, access_rules: list[dict], add_rules: list[dict],
                      delete_rules: list[dict], share_server: dict | None = None
                      ) -> dict[str, dict] | None:
        # The full set is authoritative, so add/delete are not needed: idempotent.
        refused = {r["id"]: {"state": "error"} for r in access_rules if r["access_type"] != "ip"}
        with self._backend() as data:
            self._get(data, share["id"], "share")["rules"] = {
                r["access_to"]: r["access_level"] for r in access_rules if r["id"] not in refused}
        return refused or None

    def get_share_stats(self, refresh: bool = False) -> ShareStats:
        with self._backend() as data:
            used = sum(o["size"] for o in data.values() if o["kind"] == "share")
        total = self.configuration.example_capacity_gb
        return {"share_backend_name": self.share_backend_name, "vendor_name": "Example",
                "driver_version": "0.1.0", "storage_protocol": "NFS",
                "driver_handles_share_servers": self.driver_handles_share_servers,
                "snapshot_support": True, "create_share_from_snapshot_support": True,
                "replication_type": None, "share_group_support": False,
                "pools": [{"pool_name": self.backend_name, "total_capacity_gb": total,
                           "free_capacity_gb": max(0, total - used)}]}
