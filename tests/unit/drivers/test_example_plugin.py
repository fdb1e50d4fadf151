"""The example out-of-tree plugin passes the conformance kit when it is loaded
by name through config, as an installed distribution (a generated dist-info
and its package on sys.path)."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sharemgr.drivers import loader
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.testing import DriverConformanceTests

from tests.unit.drivers.test_loader import (
    EXAMPLE,
    example_entry_points,
    example_site,
    make_conf,
    plugins_on_path,
)


@pytest.fixture
def example_installed(tmp_path, monkeypatch):
    with plugins_on_path(monkeypatch, example_site(tmp_path / "site")):
        yield


class TestExamplePluginConformance(DriverConformanceTests):
    @pytest.fixture(autouse=True)
    def _installed(self, example_installed):
        """The plugin is visible for every check of this class."""

    def make_driver(self, tmp_path, *, driver_handles_share_servers) -> ShareDriver:
        conf = make_conf(tmp_path, {"files": {
            "share_driver": "example",
            "driver_handles_share_servers": str(driver_handles_share_servers).lower(),
            "example_export_host": "filer.test",
        }})
        return loader.load_drivers(conf, "hostA", "hostA.kit", setup=False)["files"]

    def backend_access_rules(self, driver, share):
        data = json.loads(driver.path.read_text())
        return {("ip", ip, level) for ip, level in data[share["id"]].get("rules", {}).items()}


def test_example_declares_its_entry_point():
    assert example_entry_points() == {
        "example": "sharemgr_example_driver.driver:ExampleDriver"}


def test_example_is_loaded_by_name_with_its_options(tmp_path, example_installed):
    conf = make_conf(tmp_path, {"files": {"share_driver": "example",
                                          "example_export_host": "nas7.test"}})
    drv = loader.load_drivers(conf, "hostA", "hostA.e1")["files"]
    assert type(drv).__module__ == "sharemgr_example_driver.driver"
    share = {"id": "inst-1", "share_id": "s-1", "name": "data", "size": 1,
             "share_proto": "NFS", "host": "hostA@files", "share_server_id": None,
             "export_locations": [], "snapshot_id": None}
    assert drv.create_share(share)[0]["path"] == "nas7.test:/inst-1"
    # Its backend lives under the manager's state_path.
    assert (tmp_path / "state" / "example" / "files.json").exists()


def test_example_driver_stays_small():
    """Shares, snapshots, status methods, access rules and stats: a starting
    point to read in one sitting."""
    lines = (EXAMPLE / "sharemgr_example_driver" / "driver.py").read_text().splitlines()
    assert len(lines) < 150


def test_example_options_appear_in_a_generated_sample(tmp_path):
    """The example publishes its options through its own oslo.config.opts
    entry point: oslo-config-generator lists them, as doc/drivers.rst shows."""
    site = example_site(tmp_path / "site")
    parser = configparser.ConfigParser()
    parser.read(EXAMPLE / "setup.cfg")
    opts = parser["options.entry_points"]["oslo.config.opts"].strip()
    [info] = site.glob("*.dist-info")
    with open(info / "entry_points.txt", "a") as f:
        f.write(f"\n[oslo.config.opts]\n{opts}\n")
    out = subprocess.run(
        [str(Path(sys.executable).parent / "oslo-config-generator"),
         "--namespace", "sharemgr_example_driver"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)})
    assert out.returncode == 0, out.stderr
    assert "[backend]" in out.stdout
    assert "#example_export_host = nas.example.org" in out.stdout
    assert "#example_capacity_gb = 100" in out.stdout
