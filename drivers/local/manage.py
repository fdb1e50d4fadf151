"""The local driver's manage: take over a share of this backend that the
manager no longer records (unmanaged before, or an orphan drift reports),
found by one of its export paths.

Everything the driver keeps about a share is named by its id (image, mount
point, record, NFS pseudo path, Samba share name), so a managed share is
renamed to the new share instance's id, as a real array renames a volume:
its data, size and NFS export id stay, its export path becomes the new id's
(the answer says so), and its access rules start empty, as the manager's
new record has none. Unmanage needs nothing here: the share stays exported
as it was (the base class's ``unmanage`` does nothing).

A crash in the middle leaves the new record ``creating`` (its status
``error``, so reconciliation ends the manage in ``manage_error``) and the
old one ``deleting`` (neither served nor listed as available).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sharemgr.drivers import base
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound
from sharemgr.drivers.local import images, validation
from sharemgr.drivers.local.fencing import file_lock
from sharemgr.drivers.local.records import AVAILABLE, CREATING, DELETING

if TYPE_CHECKING:
    from sharemgr.drivers.local.driver import LocalDriver


def _path(share: base.Share) -> str:
    locations = share.get("export_locations") or []
    first = locations[0] if locations else None
    if not isinstance(first, Mapping) or not first.get("path"):
        raise InvalidShareRequest("local driver: manage needs the share's export path")
    return str(first["path"])


def take_over(drv: LocalDriver, share: base.Share, driver_options: Mapping[str, str]
              ) -> base.ManagedShare:
    if driver_options:
        raise InvalidShareRequest(f"local driver: manage takes no driver options "
                                  f"(given: {', '.join(sorted(driver_options))})")
    with drv.fence.guard(share, "share") as oid:
        proto = validation.protocol(share.get("share_proto"))
        record = drv.records.get(oid)
        if record is not None and record.get("state") == AVAILABLE \
                and drv._image(oid).exists():
            # Taken over by an earlier call (a crash after it): as it is.
            images.mount(drv._image(oid), drv._mount(oid))
            drv.exports.publish()
            return {"size": record["size"], "export_locations": drv.exports.locations(record)}
        path = _path(share)
        found = [r for r in drv.records.all("share") if r["id"] != oid
                 and path in {loc["path"] for loc in drv.exports.locations(r)}]
        if not found:
            raise ShareResourceNotFound(f"local driver: no share exported at {path}")
        old_id = found[0]["id"]
        with file_lock(drv.fence.locks / f"{old_id}.lock"):
            old = drv.records.get(old_id)
            if old is None or old.get("state") != AVAILABLE or not drv._image(old_id).exists():
                raise ShareResourceNotFound(f"local driver: share {old_id} at {path} is not "
                                            "available")
            if old["proto"] != proto:
                raise InvalidShareRequest(f"local driver: {path} is a {old['proto']} share, "
                                          f"not {proto}")
            new = {**old, "id": oid, "share_id": share.get("share_id"),
                   "name": share.get("name"), "rules": [], "state": CREATING}
            drv.records.put(new)
            old["state"] = DELETING
            drv.records.put(old)
            drv.exports.publish()  # no longer served under the old name
            images.unmount(drv._image(old_id), drv._mount(old_id))
            with contextlib.suppress(OSError):
                drv._mount(old_id).rmdir()
            os.replace(drv._image(old_id), drv._image(oid))
            for snap in drv.records.all("snapshot"):
                if snap.get("share_instance_id") == old_id:
                    drv.records.put({**snap, "share_instance_id": oid})
            drv.records.remove(old_id)
            images.mount(drv._image(oid), drv._mount(oid))
            new["state"] = AVAILABLE
            drv.records.put(new)
            drv.exports.publish()
        return {"size": new["size"], "export_locations": drv.exports.locations(new)}
