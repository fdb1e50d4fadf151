"""The dummy driver's revert and replica lifecycle (drivers/dummy_replicas.py):
what they change on its backend, beyond the conformance kit's checks."""

from __future__ import annotations

import pytest
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.dummy_state import BackendObject
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.testing import build_driver

from tests.unit.drivers.test_dummy import share_dict


def _driver(tmp_path, **options) -> DummyDriver:
    return build_driver(DummyDriver, tmp_path, setup=True, **options)


def _obj(drv: DummyDriver, ident: str) -> BackendObject | None:
    with drv.state.reading() as tx:
        return tx.get(ident)


def _replicated(drv: DummyDriver) -> tuple[dict, dict]:
    share = share_dict(size=2)
    drv.create_share(share)
    replica = share_dict(size=2, share_id=share["share_id"])
    drv.create_replica(replica, share)
    return {**share, "replica_state": "active"}, {**replica, "replica_state": "in_sync"}


def test_promotion_swaps_the_states_on_the_backend(tmp_path):
    drv = _driver(tmp_path)
    share, replica = _replicated(drv)
    states = drv.promote_replica([share, replica], replica, [])
    assert sorted((s["id"], s["replica_state"]) for s in states) == sorted(
        [(replica["id"], "active"), (share["id"], "in_sync")])
    assert _obj(drv, replica["id"])["replica_state"] == "active"
    assert _obj(drv, share["id"])["replica_state"] == "in_sync"


def test_update_replica_state_reads_what_the_backend_holds(tmp_path):
    drv = _driver(tmp_path)
    share, replica = _replicated(drv)
    assert drv.update_replica_state([share, replica], replica, []) == "in_sync"
    with drv.state.transaction() as tx:  # as 'sharemgr-dummy-backend set' does
        tx.update(replica["id"], replica_state="out_of_sync")
    assert drv.update_replica_state([share, replica], replica, []) == "out_of_sync"
    with pytest.raises(ShareResourceNotFound):
        drv.update_replica_state([share], share_dict(), [])


def test_revert_takes_the_snapshot_s_size_and_obeys_the_failure_knob(tmp_path):
    drv = _driver(tmp_path)
    share = share_dict(size=2)
    drv.create_share(share)
    snap = {"id": "snap-1", "snapshot_id": "s1", "share_instance_id": share["id"],
            "share_id": share["share_id"], "name": "s", "size": 2}
    drv.create_snapshot(snap)
    drv.extend_share(share, 5)
    drv.revert_to_snapshot(snap, [], [])
    obj = _obj(drv, share["id"])
    assert (obj["size"], obj["details"]["reverted_to"]) == (2, "snap-1")
    failing = _driver(tmp_path / "f", dummy_fail_methods=["revert_to_snapshot"])
    failing.create_share(share)
    failing.create_snapshot(snap)
    with pytest.raises(ShareBackendException, match="dummy_fail_methods"):
        failing.revert_to_snapshot(snap, [], [])
