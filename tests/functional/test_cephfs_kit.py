"""The conformance kit against the cephfs driver on the run's Ceph cluster
(tests/functional/ceph_shared.py); each test in a subvolume group of its
own."""

from __future__ import annotations

import uuid

import pytest
from sharemgr.drivers.testing import DriverConformanceTests, build_driver

from tests.functional.ceph_shared import DRIVER_ID

pytestmark = pytest.mark.functional


def cephfs_options(ceph, group: str | None = None) -> dict[str, str]:
    return {"cephfs_conf_path": str(ceph.conf), "cephfs_auth_id": DRIVER_ID,
            "cephfs_subvolume_group": group or f"t_{uuid.uuid4().hex[:12]}",
            "cephfs_command_timeout": "60"}


class TestCephFSDriverConformance(DriverConformanceTests):
    dhss_modes = (False,)
    share_proto = "CEPHFS"

    @pytest.fixture(autouse=True)
    def _cluster(self, ceph_cluster):
        self.ceph = ceph_cluster

    def make_driver(self, tmp_path, *, driver_handles_share_servers):
        return build_driver("cephfs", tmp_path, setup=True,
                            driver_handles_share_servers=driver_handles_share_servers,
                            **cephfs_options(self.ceph))
