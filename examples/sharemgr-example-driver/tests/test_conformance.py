"""The example driver's own suite: sharemgr's conformance kit, loading the
driver by its entry point name, so it checks the installed distribution."""

import json
from pathlib import Path

from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.testing import DriverConformanceTests, build_driver


class TestExampleDriverConformance(DriverConformanceTests):
    dhss_modes = (False,)

    def make_driver(self, tmp_path: Path, *, driver_handles_share_servers: bool) -> ShareDriver:
        return build_driver(
            "example",
            tmp_path,
            driver_handles_share_servers=driver_handles_share_servers,
            example_export_host="filer.test",
        )

    def backend_access_rules(self, driver: ShareDriver, share: dict
                             ) -> set[tuple[str, str, str]]:
        # The rules the backend file holds for the share (IP rules only).
        data = json.loads(driver.path.read_text())
        return {("ip", ip, level) for ip, level in data[share["id"]].get("rules", {}).items()}
