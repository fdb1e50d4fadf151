"""The dummy driver's manage and unmanage (Manila's methods).

Managing takes an object the backend holds and gives it the manager's new
ids (``Tx.rekey``), as a real driver renames a volume after the share that
now owns it: a share found by one of its export paths, a snapshot by its
provider location (the id it was made with, or the location it was managed
from), a share server by its id or server name. The object keeps its data,
size and export paths; the driver options given are kept in its details
(``managed_with``), so ``sharemgr-dummy-backend list`` shows them.
Unmanaging changes nothing on the backend; the call goes through the knobs
like any other (crash points, gates, failures).
"""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.drivers import base
from sharemgr.drivers.dummy_calls import DummyCalls
from sharemgr.drivers.dummy_state import BackendObject, Details, Tx
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound


def _path(share: base.Share) -> str:
    locations = share.get("export_locations") or []
    if not locations or not isinstance(locations[0], Mapping) or not locations[0].get("path"):
        raise InvalidShareRequest("dummy backend: manage_existing needs the share's export path")
    return str(locations[0]["path"])


def _at_path(tx: Tx, path: str) -> BackendObject:
    found = [o for o in tx.objects("share")
             if path in {loc["path"] for loc in o["export_locations"]}]
    if not found:
        raise ShareResourceNotFound(f"dummy backend has no share exported at {path}")
    return found[0]


class DummyManage(DummyCalls):
    """Manage and unmanage on the dummy backend."""

    def manage_existing(self, share: base.Share, driver_options: Mapping[str, str]
                        ) -> base.ManagedShare:
        with self._op("manage_existing", share) as tx:
            obj = tx.get(share["id"], ("share",))
            if obj is None:  # not taken over by an earlier call (a crash after it)
                obj = _at_path(tx, _path(share))
                proto = str((obj["details"] or {}).get("share_proto") or "").upper()
                wanted = str(share.get("share_proto") or "").upper()
                if proto and wanted and proto != wanted:
                    raise InvalidShareRequest(f"dummy backend: {obj['id']} is a {proto} "
                                              f"share, not {wanted}")
                details: Details = {**obj["details"], "managed_with": dict(driver_options)}
                tx.rekey(obj["id"], share["id"], share_id=share.get("share_id"),
                         name=share.get("name") or obj["name"], details=details)
                obj = tx.get(share["id"]) or obj
            return {"size": obj["size"] or 1, "export_locations": obj["export_locations"]}

    def unmanage(self, share: base.Share) -> None:
        with self._op("unmanage", share):
            pass  # the share stays as it is: only the manager forgets it

    def manage_existing_snapshot(self, snapshot: base.Snapshot,
                                 driver_options: Mapping[str, str]) -> base.ManagedSnapshot:
        with self._op("manage_existing_snapshot", snapshot) as tx:
            obj = tx.get(snapshot["id"], ("snapshot",))
            location = str(snapshot.get("provider_location") or "")
            if obj is None:
                found = [o for o in tx.objects("snapshot")
                         if location in (o["id"], o["details"].get("provider_location"))]
                if not found:
                    raise ShareResourceNotFound(
                        f"dummy backend has no snapshot at provider location {location!r}")
                obj = found[0]
                if obj["share_instance_id"] != snapshot.get("share_instance_id"):
                    raise InvalidShareRequest(
                        f"dummy backend: snapshot {location} is of share instance "
                        f"{obj['share_instance_id']}, not {snapshot.get('share_instance_id')}")
                details: Details = {**obj["details"], "provider_location": location,
                                    "managed_with": dict(driver_options)}
                tx.rekey(obj["id"], snapshot["id"], snapshot_id=snapshot.get("snapshot_id"),
                         name=snapshot.get("name") or obj["name"], details=details)
                obj = tx.get(snapshot["id"]) or obj
            return {"size": obj["size"] or 1,
                    "provider_location": obj["details"].get("provider_location") or location}

    def unmanage_snapshot(self, snapshot: base.Snapshot) -> None:
        with self._op("unmanage_snapshot", snapshot):
            pass

    def manage_server(self, share_server: base.ShareServer, identifier: str,
                      driver_options: Mapping[str, str]) -> tuple[str | None, base.JSONDict]:
        with self._op("manage_server", share_server) as tx:
            if not self.driver_handles_share_servers:
                raise InvalidShareRequest(
                    f"dummy backend {self.backend_name} does not handle share servers")
            obj = tx.get(share_server["id"], ("share_server",))
            if obj is None:
                found = [o for o in tx.objects("share_server")
                         if identifier in (o["id"], o["details"].get("server_name"))]
                if not found:
                    raise ShareResourceNotFound(f"dummy backend has no share server "
                                                f"{identifier!r}")
                obj = found[0]
                details: Details = {**obj["details"], "managed_with": dict(driver_options)}
                tx.rekey(obj["id"], share_server["id"], share_server_id=share_server["id"],
                         details=details)
                obj = tx.get(share_server["id"]) or obj
            made = obj["details"]
            return made.get("server_name") or identifier, {
                "server_name": made.get("server_name") or identifier,
                "address": made.get("address") or f"{obj['id'][:8]}.{self.backend_name}.dummy"}

    def unmanage_server(self, server_details: Mapping[str, object],
                        security_services: list[Mapping[str, object]] | None = None) -> None:
        with self._op("unmanage_server", {"name": server_details.get("server_name")}):
            pass
