"""What the local driver's backend holds, read from it: a share's status
(asked of the running servers), the listing drift uses, ensure_shares's
check after a restart, and the pool's stats. Functions of the driver (as
``manage.py``'s); its methods of the contract call them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.local import images, serving, validation
from sharemgr.drivers.local.records import AVAILABLE, Record

if TYPE_CHECKING:
    from sharemgr.drivers.local.driver import LocalDriver

VERSION = "1.0"
# What a batch status method asks about: shares, or snapshots.
Resource = base.Share | base.Snapshot


def share_status(drv: LocalDriver, oid: str, rules: list[object] | None = None
                 ) -> base.StatusReport:
    record = drv.records.get(oid)
    image = drv._image(oid)
    if record is None or record.get("kind") != "share":
        raise ShareResourceNotFound(f"local driver: no share {oid}")
    if not image.exists():
        if record.get("state") != AVAILABLE:
            raise ShareResourceNotFound(f"local driver: no share {oid} (never made)")
        return {"status": vocab.ERROR, "size": record["size"], "export_locations": [],
                "detail": "image missing"}
    mounted = images.is_mounted(drv._mount(oid))
    if record.get("state") == AVAILABLE and mounted:
        seen = drv.exports.serving(record, rules)
    else:
        seen = serving.Serving(False, _why(record, mounted))
    return {"status": vocab.AVAILABLE if seen.exported else vocab.ERROR,
            "size": drv._units(images.size_of(image)),
            "export_locations": drv.exports.locations(record) if seen.exported else [],
            # Asked of the running servers: drift re-applies what differs.
            "served": seen.problem is None,
            "detail": seen.problem}


def listed(drv: LocalDriver) -> list[base.ListedShare]:
    found: list[base.ListedShare] = []
    for record in drv.records.all("share"):
        try:
            status = share_status(drv, record["id"])
        except ShareResourceNotFound:
            continue
        found.append({"id": record["id"], "name": record.get("name"),
                      "size": status["size"], "status": status["status"],
                      "export_locations": status["export_locations"]})
    return found


def ensured(drv: LocalDriver, shares: list[base.Share]) -> dict[str, base.ShareUpdate]:
    """Bring every share back (mount, export, servers), then report the
    shares whose status or export locations differ from their record."""
    drv._restore()
    updates: dict[str, base.ShareUpdate] = {}
    for share in shares:
        try:
            oid = validation.object_id(share.get("id"), "share id")
            status = share_status(drv, oid)
        except ShareBackendException:
            updates[str(share.get("id"))] = {"status": vocab.ERROR, "export_locations": []}
            continue
        found: base.ShareUpdate = {
            "status": vocab.AVAILABLE if status["status"] == vocab.AVAILABLE else vocab.ERROR,
            "export_locations": status["export_locations"]}
        recorded = sorted(str(loc.get("path")) if isinstance(loc, dict) else str(loc)
                          for loc in share.get("export_locations") or [])
        if (share.get("status") != found["status"]
                or recorded != sorted(loc["path"] for loc in found["export_locations"])):
            updates[oid] = found
    return updates


def stats(drv: LocalDriver) -> base.ShareStats:
    """One pool, in units of share size (GiB by default) so that the
    manager's room is counted in the sizes users ask for. Its total is
    the room the shares can have: the free space of the filesystem
    holding the images and what the images already take of it (they
    are sparse), not the filesystem's size, most of which other files
    may hold. So with the ratio at 1.0 the sizes of all shares fit in
    it, and an extend or a create that would not is refused."""
    try:
        st = os.statvfs(drv.images if drv.images.exists() else drv.root.parent)
    except OSError:
        st = os.statvfs("/")
    unit = drv.unit_bytes
    free = st.f_bavail * st.f_frsize
    taken = sum(_allocated(path) for path in drv.images.glob("*.img")) \
        if drv.images.exists() else 0
    provisioned = sum(int(r.get("size") or 0) for r in drv.records.all("share"))
    return {
        "share_backend_name": drv.share_backend_name,
        "vendor_name": "sharemgr",
        "driver_version": VERSION,
        "storage_protocol": "NFS_CIFS",
        "driver_handles_share_servers": False,
        "snapshot_support": True,
        "create_share_from_snapshot_support": True,
        "replication_type": None,
        "share_group_support": False,
        # What the exporters can express: intake refuses the rest up front.
        "access_rule_limits": validation.ACCESS_LIMITS,
        # It moves nothing itself; the engine's copy keeps the metadata
        # (intake refuses what a host-assisted migration cannot do).
        "migration_support": {"driver_assisted": False, "preserve_metadata": True},
        "pools": [{
            "pool_name": "images",
            "total_capacity_gb": round((free + taken) / unit, 2),
            "free_capacity_gb": round(free / unit, 2),
            # Sparse images: a share takes room as it is written.
            "thin_provisioning": True,
            "provisioned_capacity_gb": provisioned,
            "max_over_subscription_ratio":
                float(drv.configuration.local_max_over_subscription_ratio),
            "reserved_percentage": 0,
        }],
    }



def _allocated(path: Path) -> int:
    """Bytes a (sparse) file takes on its filesystem."""
    try:
        return path.stat().st_blocks * 512
    except FileNotFoundError:
        return 0


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _why(record: Record, mounted: bool) -> str:
    if record.get("state") != AVAILABLE:
        return f"left {record.get('state')} by an interrupted call"
    if not mounted:
        return "not mounted"
    return "not exported"


def each(single: Callable[[Resource, base.ShareServer | None], base.StatusReport],
          items: list[tuple[Resource, base.ShareServer | None]]) -> dict[str, base.StatusAnswer]:
    """A batch status method as its single one per resource (the host has
    no cheaper way to ask about many): a missing object is its answer, any
    other failure leaves the resource out, to be asked again one by one."""
    answers: dict[str, base.StatusAnswer] = {}
    for resource, server in items:
        try:
            answers[resource["id"]] = single(resource, server)
        except ShareResourceNotFound as exc:
            answers[resource["id"]] = exc
        except ShareBackendException:
            continue
    return answers
