"""share-manager loads its drivers at start: a bad driver ends it with one
clear line and exit 1; an out-of-tree plugin on PYTHONPATH is loaded by name."""

from __future__ import annotations

import pytest

from tests.functional.harness import Deployment
from tests.functional.test_daemon import one_error_line
from tests.unit.drivers.test_loader import bad_plugins_site, example_site

pytestmark = pytest.mark.functional


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """One database for every bad-driver case (driver loading comes after the
    database and coordination checks), plus the bad plugins' folder."""
    root = tmp_path_factory.mktemp("bad-drivers")
    d = Deployment(root / "d", backends={"gold": {}})
    d.sync()
    return d, bad_plugins_site(root)


@pytest.mark.parametrize(
    "options,words",
    [
        ({"share_driver": "nosuch"},
         ["backend [gold]", "driver 'nosuch'", "no entry point 'nosuch'"]),
        ({"share_driver": "imports_missing"},
         ["backend [gold]", "'imports_missing = sm_bad_plugins.imports_missing:Driver'",
          "ModuleNotFoundError: No module named 'sharemgr_no_such_module_xyz'"]),
        ({"share_driver": "missing_class"},
         ["backend [gold]", "'missing_class = sm_bad_plugins.good:NoSuchDriver'",
          "has no class 'NoSuchDriver'"]),
        ({"share_driver": "ctor_fails"},
         ["backend [gold]", "driver 'ctor_fails'",
          "constructor failed: RuntimeError: cannot reach the array at 10.9.9.9"]),
        ({"share_driver": "dummy", "dummy_method_delays": "create_share:slow"},
         ["backend [gold]", "driver 'dummy'", "[gold] dummy_method_delays",
          "could not convert string to float: 'slow'"]),
        ({"share_driver": "dummy", "dummy_crash_after": "create_shares"},
         ["backend [gold]", "driver 'dummy'", "'create_shares' names no dummy driver method"]),
    ],
    ids=["unknown", "import-error", "missing-class", "constructor", "bad-option",
         "bad-knob"],
)
def test_bad_driver_stops_share_manager_with_one_line(synced, tmp_path, options, words):
    d, site = synced
    config = d.write_config(tmp_path / "bad.conf", gold=options)
    out = d.run_manager(config=config, env={"PYTHONPATH": str(site)})
    # A value its option's type refuses is the user's configuration: exit 2,
    # as every bad value (README); a driver that cannot be loaded or built
    # (a constructor's own check included): exit 1.
    bad_value = "dummy_method_delays" in options
    assert out.returncode == (2 if bad_value else 1), out.stdout + out.stderr
    line = one_error_line(out)
    assert "share-manager cannot start" in line
    for word in words:
        assert word in line, line
    assert "share-manager up" not in out.stdout + out.stderr


def test_plugin_on_pythonpath_is_loaded_by_name(deployment, tmp_path):
    site = example_site(tmp_path)
    d = deployment(backends={"files": {"share_driver": "example"}, "dummy": {}})
    d.sync()
    engine = d.start(env={"PYTHONPATH": str(site)})
    assert engine.terminate() == 0
    # Its do_setup ran in the daemon: the example keeps its state there.
    assert (d.state / "example").is_dir()
    # The dummy backend was set up too, and logged it.
    assert [c["method"] for c in d.backend("calls")][:2] == ["do_setup",
                                                             "check_for_setup_error"]
