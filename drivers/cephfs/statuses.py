"""The cephfs driver's batch status methods: a reconciliation after a crash
asks about many shares at once. One ``fs subvolume ls`` (or one ``snapshot
ls`` per share) says which exist; a missing one is answered without a mgr
call; the others are asked one by one, several at a time. Each is still a
fenced read (its token checked and recorded in the cluster, a missing one's
too: a create that comes later with an older token is refused)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from sharemgr.drivers import shapes
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound

if TYPE_CHECKING:
    from sharemgr.drivers.cephfs.driver import CephFSDriver

# Reads in flight at once (each a fencing round trip and a mgr command).
WORKERS = 8
T = TypeVar("T", bound=Mapping[str, object])


def shares(drv: CephFSDriver, items: list[shapes.Share]) -> dict[str, shapes.StatusAnswer]:
    present = {s.get("name") for s in drv._ls()}
    return _each(drv, "share", items, lambda s: s["id"] in present, drv.get_share_status)


def snapshots(drv: CephFSDriver, items: list[shapes.Snapshot]
              ) -> dict[str, shapes.StatusAnswer]:
    present: set[tuple[str, str]] = set()
    for parent in {s["share_instance_id"] for s in items}:
        present |= {(parent, str(n.get("name"))) for n in drv._snapshots(parent)}
    return _each(drv, "snapshot", items,
                 lambda s: (s["share_instance_id"], s["id"]) in present,
                 drv.get_snapshot_status)


def _each(drv: CephFSDriver, what: str, items: list[T], exists: Callable[[T], bool],
          single: Callable[[T], shapes.StatusReport]) -> dict[str, shapes.StatusAnswer]:
    """Each item's answer: ShareResourceNotFound for a missing one (after
    its fenced check), the single method's for the others; an item whose
    read failed otherwise is left out (the manager asks it again alone)."""

    def one(item: T) -> shapes.StatusAnswer | None:
        try:
            if exists(item):
                return single(item)
            with drv.fence.guard(item, what):
                return ShareResourceNotFound(f"cephfs: no {what} {item['id']}")
        except ShareResourceNotFound as exc:
            return exc
        except ShareBackendException:
            return None

    with ThreadPoolExecutor(min(WORKERS, max(1, len(items)))) as pool:
        answers = list(pool.map(one, items))
    return {str(item["id"]): answer for item, answer in zip(items, answers, strict=True)
            if answer is not None}
