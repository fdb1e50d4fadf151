"""Fencing tokens checked in the cluster (drivers/cephfs/fencing.py, and
the batch reads of statuses.py): two drivers, each with its own connection
as two engines' would be, on one subvolume group of the run's Ceph
cluster."""

from __future__ import annotations

import threading
import uuid

import pytest
from sharemgr.drivers.exceptions import FencedCall, ShareResourceNotFound
from sharemgr.drivers.testing import build_driver

from tests.functional.test_cephfs_kit import cephfs_options

pytestmark = pytest.mark.functional
GIB = 1 << 30


@pytest.fixture
def engines(ceph_cluster, tmp_path):
    group = f"t_{uuid.uuid4().hex[:12]}"
    drivers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        drivers.append(build_driver("cephfs", tmp_path / name, setup=True,
                                    driver_handles_share_servers=False,
                                    cephfs_fence_lock_seconds="5",
                                    **cephfs_options(ceph_cluster, group)))
    yield drivers
    for d in drivers:
        d.ceph.close()


def share(ident: str, size: int, token: int | None) -> dict:
    return {"id": ident, "share_id": ident, "name": "s", "size": size, "share_proto": "CEPHFS",
            "project_id": "p", "fence_token": token}


def quota(driver, ident: str) -> int:
    return int(driver._info(ident)["bytes_quota"])


def test_a_lower_token_is_refused_by_the_cluster(engines):
    """Engine a creates with token 1; b takes the share over with token 2;
    a's late calls (a change, a status read) are refused and change nothing;
    a caller that sends no token is not fenced."""
    a, b = engines
    ident = str(uuid.uuid4())
    a.create_share(share(ident, 1, 1))
    b.extend_share(share(ident, 1, 2), 2)
    with pytest.raises(FencedCall, match="older than 2"):
        a.extend_share(share(ident, 2, 1), 3)
    with pytest.raises(FencedCall):
        a.get_share_status(share(ident, 2, 1))
    assert quota(b, ident) == 2 * GIB
    assert a.get_share_status(share(ident, 2, None))["size"] == 2
    # A token never seen fences a create that comes later (no subvolume yet).
    other = str(uuid.uuid4())
    with pytest.raises(ShareResourceNotFound):
        b.get_share_status(share(other, 1, 7))
    with pytest.raises(FencedCall):
        a.create_share(share(other, 1, 6))
    assert other not in {s["id"] for s in b.list_shares()}
    # The batch form fences as the single one does, a missing share's too.
    third = str(uuid.uuid4())
    answers = b.get_share_statuses([(share(ident, 2, 4), None), (share(third, 1, 9), None)])
    assert answers[ident]["size"] == 2 and isinstance(answers[third], ShareResourceNotFound)
    with pytest.raises(FencedCall):
        a.create_share(share(third, 1, 8))
    with pytest.raises(FencedCall):
        a.get_share_status(share(ident, 2, 3))
    # Many objects at once (the batch's threads, one bridge): each records
    # its own token.
    many = [str(uuid.uuid4()) for _ in range(16)]
    answers = b.get_share_statuses([(share(m, 1, 5), None) for m in many])
    assert all(isinstance(answers[m], ShareResourceNotFound) for m in many)
    for m in many:
        with pytest.raises(FencedCall, match="older than 5"):
            a.get_share_status(share(m, 1, 4))
    b.delete_share(share(ident, 2, 4))


def test_a_call_holds_its_object_until_it_ends(engines):
    """A newer owner's call waits for the older call's lock: the two never
    run at once, and the newer one then fences the older engine."""
    a, b = engines
    ident = str(uuid.uuid4())
    a.create_share(share(ident, 1, 1))
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def older() -> None:
        with a.fence.guard(share(ident, 1, 2), "share"):
            held.set()
            release.wait(30)

    t = threading.Thread(target=older)
    t.start()
    assert held.wait(30)
    newer = threading.Thread(target=lambda: (b.extend_share(share(ident, 1, 3), 2), done.set()))
    newer.start()
    # Longer than a renewal period: the older call's lock is renewed.
    assert not done.wait(4), "the newer call ran while the older one held the share"
    release.set()
    t.join(30)
    newer.join(60)
    assert done.is_set()
    assert quota(a, ident) == 2 * GIB
    with pytest.raises(FencedCall):
        a.extend_share(share(ident, 2, 2), 3)
    b.delete_share(share(ident, 2, 3))


def test_an_engine_stopped_past_the_lock_is_fenced_after(engines):
    """An engine that took the lock and stopped (no renewal, no release)
    holds the share for the lock's duration only; its next call is then
    refused."""
    a, b = engines
    ident = str(uuid.uuid4())
    a.create_share(share(ident, 1, 1))
    a.ceph.fence("enter", {**a.fence._fields(ident, "stopped-engine"), "token": 2})
    b.extend_share(share(ident, 1, 3), 2)
    assert quota(b, ident) == 2 * GIB
    with pytest.raises(FencedCall):
        a.shrink_share(share(ident, 2, 2), 1)
    assert quota(a, ident) == 2 * GIB
    b.delete_share(share(ident, 2, 4))
