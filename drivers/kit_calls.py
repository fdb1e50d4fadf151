"""The conformance kit's ``Kit``: resource dicts in the shapes the manager
passes, and driver calls that turn contract breaches into clear failures."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.drivers.base import (
    Backup,
    GroupSnapshot,
    Replica,
    Share,
    ShareDriver,
    ShareGroup,
    ShareServer,
    Snapshot,
)
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.kit_report import fail, method_name, skip, unsupported

# kind -> (create method, delete method, status method)
KINDS: dict[str, tuple[str, str, str | None]] = {
    "share": ("create_share", "delete_share", "get_share_status"),
    "snapshot": ("create_snapshot", "delete_snapshot", "get_snapshot_status"),
    "replica": ("create_replica", "delete_replica", "get_replica_status"),
    "share_group": ("create_share_group", "delete_share_group", "get_share_group_status"),
    "group_snapshot": (
        "create_share_group_snapshot",
        "delete_share_group_snapshot",
        "get_share_group_snapshot_status",
    ),
    "backup": ("create_backup", "delete_backup", None),
    "share_server": ("setup_server", "teardown_server", None),
}
STATUS_KIND = {status: kind for kind, (_, _, status) in KINDS.items() if status}
# A dict of one of the KINDS, in the manager's shape.
Resource = Share | Snapshot | Replica | ShareGroup | GroupSnapshot | Backup | ShareServer


class Kit:
    """Builds resource dicts in the manager's shapes and calls the driver,
    turning contract breaches into clear failures."""

    def __init__(self, driver: ShareDriver, server: ShareServer | None, proto: str = "NFS") -> None:
        self.driver = driver
        self.server = server
        self.proto = proto
        # object id -> (create method, its arguments, its result), to repeat it
        self.created: dict[str, tuple[str, tuple[object, ...], object]] = {}

    # Dicts in the shapes the manager passes ---------------------------------

    @staticmethod
    def _ids(kind: str) -> tuple[str, str]:
        return str(uuid.uuid4()), f"kit-{kind}-{uuid.uuid4().hex[:8]}"

    def share_dict(self, size: int = 1, snapshot: Snapshot | None = None) -> Share:
        instance_id, name = self._ids("share")
        return {
            "id": instance_id, "share_id": str(uuid.uuid4()), "name": name, "size": size,
            "share_proto": self.proto, "host": self.driver.backend_host,
            "share_server_id": self.server["id"] if self.server else None,
            "export_locations": [],
            "snapshot_id": snapshot["snapshot_id"] if snapshot else None,
        }

    def snapshot_dict(self, share: Share) -> Snapshot:
        instance_id, name = self._ids("snapshot")
        return {"id": instance_id, "snapshot_id": str(uuid.uuid4()),
                "share_instance_id": share["id"], "share_id": share["share_id"],
                "name": name, "size": share["size"], "share": share}

    def replica_dict(self, share: Share) -> Replica:
        replica = self.share_dict(share["size"])
        replica.update(share_id=share["share_id"], replica_state=vocab.REPLICA_OUT_OF_SYNC)
        return replica

    def group_dict(self) -> ShareGroup:
        group_id, name = self._ids("group")
        return {"id": group_id, "name": name, "host": self.driver.backend_host,
                "share_server_id": self.server["id"] if self.server else None}

    def group_snapshot_dict(self, group: ShareGroup) -> GroupSnapshot:
        gs_id, name = self._ids("group-snapshot")
        return {"id": gs_id, "name": name, "share_group_id": group["id"], "share_group": group,
                "members": []}  # the kit's groups hold no shares

    def backup_dict(self, share: Share) -> Backup:
        backup_id, name = self._ids("backup")
        return {"id": backup_id, "share_id": share["share_id"], "name": name,
                "size": share["size"]}

    def server_dict(self) -> ShareServer:
        return {"id": str(uuid.uuid4()), "host": self.driver.backend_host,
                "backend_details": {}}

    # Calls ----------------------------------------------------------------------

    def call(self, method: str, *args: object) -> object:
        """Call; a driver error stays an exception, anything else fails."""
        try:
            return getattr(self.driver, method)(*args)
        except (ShareBackendException, NotImplementedError):
            raise
        except Exception as exc:
            fail(
                f"{method_name(self.driver, method)} raised {type(exc).__name__}: {exc}; a "
                "driver reports failures with sharemgr.drivers.exceptions."
                "ShareBackendException subclasses"
            )

    def ok(self, method: str, *args: object, what: str, optional: bool = True) -> object:
        """Call a method that must succeed; skip if it is not implemented
        and ``optional``."""
        try:
            return self.call(method, *args)
        except NotImplementedError:
            if optional:
                unsupported(self.driver, method)
            fail(f"{method_name(self.driver, method)} is required but raised NotImplementedError")
        except ShareBackendException as exc:
            fail(f"{method_name(self.driver, method)} failed for {what}: "
                 f"{type(exc).__name__}: {exc}")

    def delete(self, kind: str, obj: Resource, what: str) -> None:
        method = KINDS[kind][1]
        try:
            self.call(method, *self._delete_args(kind, obj))
        except NotImplementedError:
            unsupported(self.driver, method)
        except ShareBackendException as exc:
            fail(
                f"{method_name(self.driver, method)} is not idempotent: deleting {what} raised "
                f"{type(exc).__name__}: {exc}; a delete must succeed when the object "
                "is already gone"
            )

    def _delete_args(self, kind: str, obj: Resource) -> tuple[object, ...]:
        if kind == "share_server":
            return (obj, obj.get("backend_details") or {})
        if kind == "backup":
            return (obj,)
        return (obj, self.server)

    def status(self, method: str, obj: Resource, what: str) -> Mapping[str, object] | None:
        """A status method's answer, checked for shape; None if unimplemented."""
        try:
            result = self.call(method, obj, self.server)
        except NotImplementedError:
            return None
        except ShareResourceNotFound as exc:
            fail(f"{method_name(self.driver, method)} of {what} raised ShareResourceNotFound "
                 f"({exc}) although the object exists")
        except ShareBackendException as exc:
            fail(f"{method_name(self.driver, method)} of {what} failed: "
                 f"{type(exc).__name__}: {exc}")
        if not isinstance(result, dict) or not isinstance(result.get("status"), str):
            fail(
                f"{method_name(self.driver, method)} of {what} returned {result!r}; a status "
                "method returns a dict with at least a 'status' string, or raises "
                "NotImplementedError"
            )
        return result

    def expect_not_found(self, method: str, *args: object, what: str) -> None:
        try:
            result = self.call(method, *args)
        except NotImplementedError:
            unsupported(self.driver, method)
        except ShareResourceNotFound:
            return
        except ShareBackendException as exc:
            fail(f"{method_name(self.driver, method)} of {what} raised {type(exc).__name__}: "
                 f"{exc}; it must raise ShareResourceNotFound")
        fail(f"{method_name(self.driver, method)} of {what} returned {result!r}; it must raise "
             "ShareResourceNotFound")

    def expect_error(self, method: str, *args: object, what: str) -> None:
        try:
            result = self.call(method, *args)
        except NotImplementedError:
            # Before ShareBackendException: OperationNotSupported is both, and
            # an unimplemented operation is a skip, not the error asked for.
            unsupported(self.driver, method)
        except ShareBackendException:
            return
        fail(f"{method_name(self.driver, method)} of {what} returned {result!r}; it must raise "
             "a ShareBackendException")

    def create_call(self, obj: Resource, method: str, *args: object, what: str,
                    optional: bool = True) -> object:
        """``ok`` for the create of ``obj``, remembered so a check can repeat it."""
        result = self.ok(method, *args, what=what, optional=optional)
        self.created[obj["id"]] = (method, copy.deepcopy(args), copy.deepcopy(result))
        return result

    # Objects ---------------------------------------------------------------------

    def create_share(self, size: int = 1) -> Share:
        share = self.share_dict(size)
        locations = self.create_call(share, "create_share", share, self.server,
                                     what="a new share", optional=False)
        check_export_locations(self.driver, "create_share", locations)
        share["export_locations"] = locations
        return share

    def create(self, kind: str) -> Resource:
        """Create an object of ``kind`` (with its parents); skip if the driver
        cannot."""
        method = KINDS[kind][0]
        if kind == "share":
            return self.create_share()
        if kind == "share_server":
            if not self.driver.driver_handles_share_servers:
                skip(self.driver, None, f"{type(self.driver).__name__}: share servers exist "
                     "only with driver_handles_share_servers = True")
            server = self.server_dict()
            details = self.create_call(server, method, server, None,
                                       what="a new share server")
            if not isinstance(details, dict):
                fail(f"{method_name(self.driver, method)} returned {details!r}; it must return "
                     "the backend_details dict")
            server["backend_details"] = details
            return server
        if kind in ("share_group", "group_snapshot"):
            group = self.group_dict()
            self.create_call(group, "create_share_group", group, self.server,
                             what="a new share group")
            if kind == "share_group":
                return group
            gsnap = self.group_snapshot_dict(group)
            self.create_call(gsnap, method, gsnap, self.server, what="a new group snapshot")
            return gsnap
        share = self.create_share()
        if kind == "snapshot":
            snap = self.snapshot_dict(share)
            self.create_call(snap, method, snap, self.server, what="a snapshot of a new share")
            return snap
        if kind == "replica":
            replica = self.replica_dict(share)
            result = self.create_call(replica, method, replica, share, self.server,
                                      what="a new replica")
            if not isinstance(result, dict) or not isinstance(
                result.get("export_locations"), list
            ) or "replica_state" not in result:
                fail(f"{method_name(self.driver, method)} returned {result!r}; it must return "
                     "{'export_locations': [...], 'replica_state': ...}")
            check_export_locations(self.driver, method, result["export_locations"])
            return replica
        backup = self.backup_dict(share)
        self.create_call(backup, method, share, backup, what="a backup of a new share")
        backup["share"] = share
        return backup

    def never_created(self, kind: str) -> Resource:
        """A dict of ``kind`` whose object the backend never had."""
        share = self.share_dict()
        return {
            "share": share,
            "snapshot": self.snapshot_dict(share),
            "replica": self.replica_dict(share),
            "share_group": self.group_dict(),
            "group_snapshot": self.group_snapshot_dict(self.group_dict()),
            "backup": self.backup_dict(share),
            "share_server": self.server_dict(),
        }[kind]


def check_export_locations(driver: ShareDriver, method: str, locations: object) -> None:
    """Fail unless ``locations`` is a list of export location dicts."""
    if not isinstance(locations, list) or not locations:
        fail(f"{method_name(driver, method)} returned {locations!r}; it must return a non-empty "
             "list of export locations {'path', 'is_admin_only', 'preferred'}")
    for loc in locations:
        if (
            not isinstance(loc, dict)
            or not isinstance(loc.get("path"), str)
            or not loc["path"]
            or not isinstance(loc.get("is_admin_only"), bool)
            or not isinstance(loc.get("preferred"), bool)
        ):
            fail(f"{method_name(driver, method)} returned the export location {loc!r}; each must "
                 "be {'path': non-empty str, 'is_admin_only': bool, 'preferred': bool}")


# What a capacity may say instead of a number of GiB (Manila's words).
CAPACITY_WORDS = ("infinite", "unknown")
