"""The cephfs driver's manage: take over a subvolume of the backend's group
that sharemgr did not make (or unmanaged before) under its own name
(drivers/cephfs/names.py keeps instance id -> subvolume name)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sharemgr.drivers import shapes
from sharemgr.drivers.cephfs import nfs
from sharemgr.drivers.cephfs.client import CephCallFailed
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound

if TYPE_CHECKING:
    from sharemgr.drivers.cephfs.driver import CephFSDriver

GIB = 1 << 30


def take_over(drv: CephFSDriver, share: shapes.Share, driver_options: Mapping[str, str]
              ) -> shapes.ManagedShare:
    """The subvolume at the export path given (``[MONS:]/volumes/<group>/
    <name>[/<uuid>]``, in the backend's group); a subvolume without a quota
    gets one of its data rounded up to whole GiB."""
    if driver_options:
        raise InvalidShareRequest(f"cephfs: manage takes no driver options (given: "
                                  f"{', '.join(sorted(driver_options))})")
    drv._proto(share)
    name = subvolume_name(share, drv.group)
    try:
        info = drv.ceph.mgr("fs subvolume info", vol_name=drv.volume,
                            group_name=drv.group, sub_name=name)
    except CephCallFailed as exc:
        if exc.missing:
            raise ShareResourceNotFound(f"cephfs: no subvolume {name} in group "
                                        f"{drv.group}") from exc
        raise
    released = drv.names.adopt(share["id"], name)
    if released is not None and released != share["id"]:
        # What the share it was before left: its NFS export and id.
        if drv.nfs is not None:
            drv.nfs.unexport(released)
            drv._deauthorize(share["id"], nfs.auth_id(released))
        drv.names.cleared(name)
    facts = info if isinstance(info, dict) else {}
    quota = facts.get("bytes_quota")
    if isinstance(quota, int) and quota > 0:
        size = -(-quota // GIB)
    else:
        size = max(1, -(-int(facts.get("bytes_used") or 0) // GIB))
        drv._sub("resize", share["id"], new_size=str(size * GIB), no_shrink=True)
    return {"size": size, "export_locations": drv._serve(share, drv._info(share["id"]))}


def subvolume_name(share: shapes.Share, group: str) -> str:
    locations = share.get("export_locations") or []
    first = locations[0] if locations else None
    path = str(first.get("path") if isinstance(first, Mapping) else first or "")
    tail = path[path.find(":/") + 1:] if ":/" in path else path
    found = re.fullmatch(r"/volumes/([^/]+)/([^/]+)(?:/[^/]*)?/?", tail)
    if found is None:
        raise InvalidShareRequest(f"cephfs: manage takes a subvolume's path "
                                  f"(/volumes/<group>/<name>[/<uuid>]), not {path!r}")
    if found.group(1) != group:
        raise InvalidShareRequest(f"cephfs: {tail} is in subvolume group "
                                  f"{found.group(1)}, not this backend's ({group})")
    return found.group(2)
