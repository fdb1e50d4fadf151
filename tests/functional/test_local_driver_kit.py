"""The conformance kit against the local driver on this host's real
backend (loop-mounted images, NFS-Ganesha and Samba on ports of their own).
Needs root and the packages (local_harness)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sharemgr.drivers.testing import DriverConformanceTests, build_driver

from tests.functional import local_harness as lh

pytestmark = pytest.mark.functional


class TestLocalDriverConformance(DriverConformanceTests):
    dhss_modes = (False,)

    @pytest.fixture(autouse=True)
    def _backend_cleaned_up(self, tmp_path: Path):
        lh.require_local()
        yield
        lh.cleanup(tmp_path / "state" / "local" / "kit")

    def make_driver(self, tmp_path, *, driver_handles_share_servers):
        options = lh.backend_options()
        del options["share_driver"]
        return build_driver("local", tmp_path, setup=True,
                            driver_handles_share_servers=driver_handles_share_servers,
                            **options)

    def backend_access_rules(self, driver, share):
        record = driver.records.get(share["id"])
        if record is None:
            return None
        return {(r["access_type"], r["access_to"], r["access_level"])
                for r in record.get("rules", []) if not r.get("error")}
