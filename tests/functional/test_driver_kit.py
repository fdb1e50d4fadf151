"""The conformance kit run as a driver author runs it, in its own pytest process:
it fails broken drivers with a clear message, and the example distribution,
installed through PYTHONPATH, passes its own suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.drivers.test_loader import EXAMPLE, example_site

pytestmark = pytest.mark.functional

# Dummy drivers, each broken in one way, under the kit.
BROKEN_SUITE = textwrap.dedent(
    """
    from sharemgr.drivers.dummy import DummyDriver
    from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound
    from sharemgr.drivers.testing import DriverConformanceTests, build_driver


    class DeleteNotIdempotent(DummyDriver):
        def delete_share(self, share, share_server=None):
            with self.state.reading() as tx:
                if tx.get(share["id"]) is None:
                    raise ShareResourceNotFound("no such share " + share["id"])
            super().delete_share(share, share_server)


    class StatusReturnsNone(DummyDriver):
        def get_snapshot_status(self, snapshot, share_server=None):
            return None


    class ExtendIgnored(DummyDriver):
        def extend_share(self, share, new_size, share_server=None):
            pass


    class RaisesKeyError(DummyDriver):
        def shrink_share(self, share, new_size, share_server=None):
            with self.state.reading() as tx:
                return {}[tx.get(share["id"])["id"]]


    class CreateNotIdempotent(DummyDriver):
        def create_share(self, share, share_server=None):
            with self.state.reading() as tx:
                if tx.get(share["id"]) is not None:
                    raise InvalidShareRequest("share " + share["id"] + " exists")
            return super().create_share(share, share_server)


    class ExtendToSameSizeFails(DummyDriver):
        def extend_share(self, share, new_size, share_server=None):
            if new_size <= share["size"]:
                raise InvalidShareRequest("nothing to extend")
            super().extend_share(share, new_size, share_server)


    class AccessByChangesOnly(DummyDriver):
        # Applies add_rules and delete_rules, ignoring the full set.
        rules = {}

        def update_access(self, share, access_rules, add_rules, delete_rules,
                          share_server=None):
            held = self.rules.setdefault(share["id"], set())
            held |= {(r["access_type"], r["access_to"], r["access_level"]) for r in add_rules}
            held -= {(r["access_type"], r["access_to"], r["access_level"])
                     for r in delete_rules}


    class StatsWithoutNumbers(DummyDriver):
        def get_share_stats(self, refresh=False):
            return {"share_backend_name": "b", "vendor_name": "v", "driver_version": "1",
                    "storage_protocol": "NFS", "driver_handles_share_servers": False,
                    "snapshot_support": True, "create_share_from_snapshot_support": True,
                    "replication_type": None, "share_group_support": False,
                    "pools": [{"pool_name": "p", "total_capacity_gb": "lots",
                               "free_capacity_gb": 1}]}


    def suite(cls):
        class Suite(DriverConformanceTests):
            def make_driver(self, tmp_path, *, driver_handles_share_servers):
                return build_driver(cls, tmp_path)

            def backend_access_rules(self, driver, share):
                return getattr(driver, "rules", {}).get(share["id"])
        return Suite


    TestDeleteNotIdempotent = suite(DeleteNotIdempotent)
    TestStatusReturnsNone = suite(StatusReturnsNone)
    TestExtendIgnored = suite(ExtendIgnored)
    TestRaisesKeyError = suite(RaisesKeyError)
    TestCreateNotIdempotent = suite(CreateNotIdempotent)
    TestExtendToSameSizeFails = suite(ExtendToSameSizeFails)
    TestAccessByChangesOnly = suite(AccessByChangesOnly)
    TestStatsWithoutNumbers = suite(StatsWithoutNumbers)
    """
)

# class -> {failing test: words its message must hold}
EXPECTED_FAILURES = {
    "TestDeleteNotIdempotent": {
        "test_delete_twice_succeeds[dhss=False-share]":
            "DeleteNotIdempotent.delete_share is not idempotent: deleting a share that was "
            "already deleted raised ShareResourceNotFound",
        "test_delete_of_never_created_object_succeeds[dhss=False-share]":
            "DeleteNotIdempotent.delete_share is not idempotent: deleting a share the "
            "backend never had raised ShareResourceNotFound",
    },
    "TestStatusReturnsNone": {
        "test_status_method_reports_created_object[dhss=False-get_snapshot_status]":
            "StatusReturnsNone.get_snapshot_status of a snapshot just created returned None; "
            "a status method returns a dict with at least a 'status' string",
        "test_status_of_unknown_object_is_not_found[dhss=False-get_snapshot_status]":
            "StatusReturnsNone.get_snapshot_status of a snapshot the backend never had "
            "returned None; it must raise ShareResourceNotFound",
        # The batch form (inherited) answers a dict: the kit compares it
        # with the single method, whose broken answer it reports.
        "test_batch_status_agrees_with_single[dhss=False-get_snapshot_status]":
            "StatusReturnsNone.get_snapshot_status of a snapshot just created returned None; "
            "a status method returns a dict with at least a 'status' string",
        "test_delete_twice_succeeds[dhss=False-snapshot]":
            "StatusReturnsNone.get_snapshot_status answers None for a snapshot after "
            "StatusReturnsNone.delete_snapshot succeeded; it must raise ShareResourceNotFound",
    },
    "TestExtendIgnored": {
        "test_extend_changes_reported_size[dhss=False]":
            "after ExtendIgnored.extend_share from 1 to 3, get_share_status reports size 1",
        "test_resize_of_unknown_share_is_a_driver_error[dhss=False-extend_share]":
            "ExtendIgnored.extend_share of a share the backend never had returned None; it "
            "must raise a ShareBackendException",
    },
    "TestRaisesKeyError": {
        "test_shrink_changes_reported_size[dhss=False]":
            "RaisesKeyError.shrink_share raised KeyError",
        "test_resize_of_unknown_share_is_a_driver_error[dhss=False-shrink_share]":
            "RaisesKeyError.shrink_share raised TypeError: 'NoneType' object is not "
            "subscriptable; a driver reports failures with sharemgr.drivers.exceptions."
            "ShareBackendException subclasses",
    },
    "TestCreateNotIdempotent": {
        "test_create_twice_returns_the_existing_object[dhss=False-share]":
            "CreateNotIdempotent.create_share is not idempotent: creating a share the backend "
            "already has raised InvalidShareRequest",
    },
    "TestExtendToSameSizeFails": {
        "test_extend_to_the_current_size_succeeds[dhss=False]":
            "ExtendToSameSizeFails.extend_share to the size the share already has (2) raised "
            "InvalidShareRequest: nothing to extend; extending to the current size must succeed",
    },
    "TestAccessByChangesOnly": {
        "test_update_access_applies_the_full_rule_set_idempotently[dhss=False]":
            "AccessByChangesOnly.update_access ignores the full rule set: called with two "
            "rules and nothing added or deleted (recovery): the backend applies "
            "[('ip', '10.0.0.2', 'ro')]",
    },
    "TestStatsWithoutNumbers": {
        "test_share_stats_have_the_documented_shape[dhss=False]":
            "StatsWithoutNumbers.get_share_stats returned the pool {'pool_name': 'p', "
            "'total_capacity_gb': 'lots', 'free_capacity_gb': 1}; each must have",
    },
}


def run_pytest(target: Path, cwd: Path, env: dict | None = None,
               report: str = "-rf") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", report, "-p", "no:cacheprovider",
         "--rootdir", str(cwd), "-c", os.devnull, str(target)],
        cwd=cwd, capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_kit_fails_broken_drivers_with_clear_messages(tmp_path):
    (tmp_path / "test_broken_drivers.py").write_text(BROKEN_SUITE)
    out = run_pytest(tmp_path / "test_broken_drivers.py", tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    failed: dict[str, set[str]] = {}
    for line in out.stdout.splitlines():
        match = re.match(r"FAILED \S+::(Test\w+)::(\S+)", line)
        if match:
            failed.setdefault(match[1], set()).add(match[2])
    # Exactly the broken rules fail ...
    assert failed == {cls: set(tests) for cls, tests in EXPECTED_FAILURES.items()}, out.stdout
    # ... each report being the kit's message alone, with no traceback.
    sections = re.split(r"^_+ (Test\w+)\.(\S+) _+$", out.stdout, flags=re.M)
    reports = {(sections[i], sections[i + 1]): sections[i + 2]
               for i in range(1, len(sections) - 2, 3)}
    for cls, tests in EXPECTED_FAILURES.items():
        for test, words in tests.items():
            report = reports[(cls, test)].split("=====")[0].strip()
            assert words in report, report
            assert "Traceback" not in report and "During handling" not in report, report


def test_example_distribution_passes_its_own_suite_when_installed(tmp_path):
    site = example_site(tmp_path / "site")
    suite = EXAMPLE / "tests" / "test_conformance.py"
    out = run_pytest(suite, tmp_path, env={"PYTHONPATH": str(site)}, report="-rfs")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"\b\d+ passed", out.stdout) and "failed" not in out.stdout
    # Access rules and stats are implemented: checked, not skipped. A skip
    # names the driver's method and is reported at the driver, not the kit.
    skips = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and not any("update_access" in line or "get_share_stats" in line
                             for line in skips), skips
    assert all("sharemgr_example_driver/driver.py:" in line and "testing.py" not in line
               for line in skips), skips
    assert any(line.endswith("ExampleDriver.create_backup is not implemented")
               for line in skips), skips


def test_example_suite_fails_when_the_plugin_is_not_installed(tmp_path):
    """The suite above really loads the installed plugin by name."""
    suite = EXAMPLE / "tests" / "test_conformance.py"
    out = run_pytest(suite, tmp_path)
    assert out.returncode == 1
    assert "no entry point 'example' in namespace sharemgr.share_drivers" in out.stdout
