"""The base driver's delete methods for object kinds a driver never creates:
nothing to delete, so deleting succeeds (a row left by a failed create must
not block its share or group for ever); a driver that creates them must
delete them itself."""

from __future__ import annotations

import pytest
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.drivers.testing import build_driver


class SharesOnly(ShareDriver):
    """Creates shares and snapshots, nothing else."""


class CreatesButCannotDelete(ShareDriver):
    def create_replica(self, replica, active_replica, share_server=None):
        return {"export_locations": [], "replica_state": "in_sync"}

    def create_share_group(self, group, share_server=None):
        return None

    def create_backup(self, share, backup):
        return None


DELETES = {
    "delete_replica": lambda d: d.delete_replica({"id": "r"}, None),
    "delete_share_group": lambda d: d.delete_share_group({"id": "g"}, None),
    "delete_share_group_snapshot": lambda d: d.delete_share_group_snapshot({"id": "gs"}, None),
    "teardown_server": lambda d: d.teardown_server({"id": "s"}, {}),
    "delete_backup": lambda d: d.delete_backup({"id": "b"}),
}


@pytest.mark.parametrize("method", sorted(DELETES))
def test_deleting_a_kind_the_driver_never_creates_succeeds(tmp_path, method):
    driver = build_driver(SharesOnly, tmp_path)
    assert DELETES[method](driver) is None


@pytest.mark.parametrize("method", ["delete_replica", "delete_share_group", "delete_backup"])
def test_a_driver_that_creates_a_kind_must_delete_it(tmp_path, method):
    driver = build_driver(CreatesButCannotDelete, tmp_path)
    with pytest.raises(OperationNotSupported):
        DELETES[method](driver)


def test_out_of_tree_drivers_import_the_whole_contract_from_base():
    """The methods are defined in groups beside base.py; a driver still
    imports the class, the status method names and the dicts from base."""
    from sharemgr.drivers import base

    assert {"ShareDriver", "STATUS_METHODS", "BATCH_STATUS_METHODS", "Share",
            "ShareStats", "StatusReport", "StatusAnswer"} <= set(base.__all__)
    assert all(hasattr(base, name) for name in base.__all__)
    assert callable(ShareDriver.get_share_status) and callable(ShareDriver.manage_existing)
