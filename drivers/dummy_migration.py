"""The dummy driver's share migration, driver-assisted: it moves a share to
another dummy backend whose state folder it can reach (the destination
backend's folder beside its own, ``<state_path>/dummy/<backend>``, as every
dummy backend of a deployment keeps it), through the same call path as
every dummy call (``DummyCalls._op``: gates, failures, crash points,
fencing by the source's token).

``migration_start`` makes the destination object (status ``migrating_to``,
progress 0); each ``migration_continue`` moves its copy half of what is
left to 100 (so two calls end phase 1); ``migration_complete`` makes it
``available`` with its export locations and deletes the source object;
``migration_cancel`` deletes the destination object. Each is idempotent.

For a host-assisted migration (the engine copies) it lends each share a
folder of files, ``<state>/data/<share id>`` (``migration_data_path``; the
dummy keeps no data otherwise), which ``delete_share`` removes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import cast

from sharemgr.drivers import base
from sharemgr.drivers.dummy_calls import CREATED, SHARE_KINDS, DummyCalls
from sharemgr.drivers.dummy_state import DB_NAME, BackendObject, BackendState, Details, Tx
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound

MIGRATING_TO = "migrating_to"


def _backend_of(host: object) -> tuple[str, str]:
    """'host@backend#pool' → (host, backend)."""
    name, _, rest = str(host or "").partition("@")
    return name, rest.partition("#")[0]


class DummyMigration(DummyCalls):
    """Driver-assisted migration between dummy backends."""

    def _peer_folder(self, destination: base.Share) -> str | None:
        _host, backend = _backend_of(destination.get("host"))
        if not backend:
            return None
        if backend == self.backend_name:
            return self.dummy_state_path
        folder = os.path.join(os.path.dirname(self.dummy_state_path), backend)
        return folder if os.path.exists(os.path.join(folder, DB_NAME)) else None

    @contextlib.contextmanager
    def _peer(self, tx: Tx, destination: base.Share) -> Iterator[Tx]:
        """The destination backend's state, in a transaction (the source's
        own when both are this backend: its pools)."""
        folder = self._peer_folder(destination)
        if folder is None:
            raise ShareBackendException(f"dummy backend {self.backend_name}: cannot reach the "
                                        f"destination {destination.get('host')}")
        if folder == self.dummy_state_path:
            yield tx
            return
        _host, backend = _backend_of(destination.get("host"))
        with BackendState(folder, backend=backend).transaction() as peer:
            yield peer

    def migration_check_compatibility(
            self, source_share: base.Share, destination_share: base.Share,
            share_server: base.ShareServer | None = None,
            destination_share_server: base.ShareServer | None = None
    ) -> base.MigrationCompatibility:
        with self._op("migration_check_compatibility", source_share, write=False):
            reachable = self._peer_folder(destination_share) is not None
            return {"compatible": reachable and not self.driver_handles_share_servers,
                    "writable": True, "nondisruptive": False, "preserve_metadata": True,
                    "preserve_snapshots": False}

    def migration_start(self, source_share: base.Share, destination_share: base.Share,
                        source_snapshots: list[base.Snapshot], snapshot_mappings: dict[str, str],
                        share_server: base.ShareServer | None = None,
                        destination_share_server: base.ShareServer | None = None) -> None:
        with self._op("migration_start", source_share) as tx:
            src = self._need(tx, source_share["id"], SHARE_KINDS, "share")
            with self._peer(tx, destination_share) as peer:
                if peer.get(destination_share["id"]) is not None:
                    return  # started already
                # The destination's pool, as get_share_stats counts them.
                pool = str(destination_share.get("host") or "").partition("#")[2]
                details: Details = {"share_proto": src["details"].get("share_proto"),
                                    "migrating_from": src["id"], "progress": 0}
                if pool:
                    details["pool"] = pool
                peer.insert(id=destination_share["id"], kind="share",
                            share_id=src["share_id"], name=src["name"], size=src["size"],
                            status=MIGRATING_TO, details=details)

    def _destination(self, peer: Tx, destination: base.Share) -> BackendObject:
        obj = peer.get(destination["id"], ("share",))
        if obj is None:
            raise ShareResourceNotFound(f"dummy backend has no migration destination "
                                        f"{destination['id']}")
        return cast(BackendObject, dict(obj))

    def migration_continue(self, source_share: base.Share, destination_share: base.Share,
                           source_snapshots: list[base.Snapshot],
                           snapshot_mappings: dict[str, str],
                           share_server: base.ShareServer | None = None,
                           destination_share_server: base.ShareServer | None = None) -> bool:
        with self._op("migration_continue", source_share) as tx:
            self._need(tx, source_share["id"], SHARE_KINDS, "share")
            with self._peer(tx, destination_share) as peer:
                obj = self._destination(peer, destination_share)
                if obj["status"] != MIGRATING_TO:
                    return True
                details = cast(Details, dict(obj["details"] or {}))
                progress = int(details.get("progress") or 0)
                progress = 100 if progress >= 50 else 50
                details["progress"] = progress
                peer.update(obj["id"], details=details)
                return progress >= 100

    def migration_get_progress(self, source_share: base.Share, destination_share: base.Share,
                               source_snapshots: list[base.Snapshot],
                               snapshot_mappings: dict[str, str],
                               share_server: base.ShareServer | None = None,
                               destination_share_server: base.ShareServer | None = None
                               ) -> base.Progress:
        with self._op("migration_get_progress", source_share, write=False) as tx:
            with self._peer(tx, destination_share) as peer:
                obj = self._destination(peer, destination_share)
                return {"total_progress": str((obj["details"] or {}).get("progress", 0))}

    def migration_complete(self, source_share: base.Share, destination_share: base.Share,
                           source_snapshots: list[base.Snapshot],
                           snapshot_mappings: dict[str, str],
                           share_server: base.ShareServer | None = None,
                           destination_share_server: base.ShareServer | None = None
                           ) -> base.MigrationUpdate:
        host, backend = _backend_of(destination_share.get("host"))
        address = f"{host}.{backend}.dummy"
        with self._op("migration_complete", source_share) as tx:
            with self._peer(tx, destination_share) as peer:
                obj = self._destination(peer, destination_share)
                if obj["status"] == MIGRATING_TO:
                    if int((obj["details"] or {}).get("progress") or 0) < 100:
                        raise ShareBackendException(
                            f"dummy backend: the copy of {source_share['id']} is not done")
                    details = dict(obj["details"] or {})
                    details.pop("progress", None)
                    locations: list[base.ExportLocation] = [
                        {"path": f"{address}:/shares/{obj['id']}", "is_admin_only": False,
                         "preferred": True},
                        {"path": f"admin.{address}:/shares/{obj['id']}",
                         "is_admin_only": True, "preferred": False}]
                    peer.update(obj["id"], status=CREATED, export_locations=locations,
                                details=details)
                    obj["export_locations"] = locations
            tx.delete(source_share["id"])  # gone already after a first complete
            return {"export_locations": obj["export_locations"]}

    def migration_cancel(self, source_share: base.Share, destination_share: base.Share,
                         source_snapshots: list[base.Snapshot], snapshot_mappings: dict[str, str],
                         share_server: base.ShareServer | None = None,
                         destination_share_server: base.ShareServer | None = None) -> None:
        with self._op("migration_cancel", source_share) as tx:
            with self._peer(tx, destination_share) as peer:
                obj = peer.get(destination_share["id"], ("share",))
                if obj is not None and obj["status"] == MIGRATING_TO:
                    peer.delete(obj["id"])

    def data_folder(self, share_id: str) -> str:
        return os.path.join(self.dummy_state_path, "data", share_id)

    def migration_data_path(self, share: base.Share,
                            share_server: base.ShareServer | None = None) -> str:
        with self._op("migration_data_path", share, write=False) as tx:
            self._need(tx, share["id"], SHARE_KINDS, "share")
            folder = self.data_folder(share["id"])
            os.makedirs(folder, exist_ok=True)
            return folder
