"""Loading drivers through stevedore: every failure is one clear line.

Plugins are made visible the way an installed distribution is: a folder on
sys.path with the package and a ``*.dist-info`` declaring the entry points.
The helpers here are shared with the other driver test modules.
"""

from __future__ import annotations

import configparser
import contextlib
import logging
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from oslo_config import cfg
from sharemgr.drivers import loader
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.manager import config
from stevedore import driver as stevedore_driver
from stevedore import exception as stevedore_exc
from stevedore import extension as stevedore_ext

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "sharemgr-example-driver"

# A distribution of bad plugins, one module per way to fail.
BAD_PLUGINS = {
    "__init__.py": "",
    "imports_missing.py": "import sharemgr_no_such_module_xyz\n",
    "asserts.py": "assert False, 'plugin asserts at import'\n",
    "good.py": textwrap.dedent(
        """
        from sharemgr.drivers.base import ShareDriver


        class CtorFails(ShareDriver):
            def __init__(self, configuration, **kw):
                raise RuntimeError("cannot reach the array at 10.9.9.9")


        class SetupFails(ShareDriver):
            def do_setup(self):
                raise RuntimeError("array refused login")


        class NotADriver:
            pass
        """
    ),
}
BAD_ENTRY_POINTS = {
    "imports_missing": "sm_bad_plugins.imports_missing:Driver",
    "asserts": "sm_bad_plugins.asserts:Driver",
    "missing_class": "sm_bad_plugins.good:NoSuchDriver",
    "ctor_fails": "sm_bad_plugins.good:CtorFails",
    "setup_fails": "sm_bad_plugins.good:SetupFails",
    "not_a_driver": "sm_bad_plugins.good:NotADriver",
}


def write_dist(site: Path, dist: str, entry_points: dict[str, str]) -> None:
    """A ``*.dist-info`` under ``site`` declaring share driver entry points."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = [f"{name} = {target}" for name, target in entry_points.items()]
    (info / "entry_points.txt").write_text(
        f"[{loader.NAMESPACE}]\n" + "\n".join(lines) + "\n"
    )


def bad_plugins_site(root: Path) -> Path:
    site = root / "bad-site"
    pkg = site / "sm_bad_plugins"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, text in BAD_PLUGINS.items():
        (pkg / name).write_text(text)
    write_dist(site, "sm-bad-plugins", BAD_ENTRY_POINTS)
    return site


def example_entry_points() -> dict[str, str]:
    """The entry points the example distribution declares in its setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(EXAMPLE / "setup.cfg")
    raw = parser["options.entry_points"][loader.NAMESPACE]
    pairs = (line.split("=", 1) for line in raw.strip().splitlines())
    return {name.strip(): target.strip() for name, target in pairs}


def example_site(root: Path) -> Path:
    """The example distribution as pip would lay it out in site-packages."""
    site = root / "example-site"
    shutil.copytree(EXAMPLE / "sharemgr_example_driver", site / "sharemgr_example_driver",
                    dirs_exist_ok=True)
    write_dist(site, "sharemgr-example-driver", example_entry_points())
    return site


@contextlib.contextmanager
def plugins_on_path(monkeypatch, *sites: Path):
    """Put plugin folders on sys.path; afterwards forget their modules and
    stevedore's cached entry points."""
    before = set(sys.modules)
    for site in sites:
        monkeypatch.syspath_prepend(str(site))
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            if name.startswith(("sm_bad_plugins", "sharemgr_example_driver")):
                del sys.modules[name]
        stevedore_ext.ExtensionManager.ENTRY_POINT_CACHE.pop(loader.NAMESPACE, None)


@pytest.fixture
def bad_plugins(tmp_path, monkeypatch):
    with plugins_on_path(monkeypatch, bad_plugins_site(tmp_path)):
        yield


def make_conf(tmp_path: Path, backends: dict[str, dict[str, str]]) -> cfg.ConfigOpts:
    lines = ["[DEFAULT]", f"state_path = {tmp_path / 'state'}",
             f"enabled_share_backends = {','.join(backends)}"]
    for name, opts in backends.items():
        lines += ["", f"[{name}]"] + [f"{k} = {v}" for k, v in opts.items()]
    conf_file = tmp_path / "sharemgr.conf"
    conf_file.write_text("\n".join(lines) + "\n")
    conf = cfg.ConfigOpts()
    config.load(["--config-file", str(conf_file)], conf=conf)
    return conf


def load_error(tmp_path: Path, backends: dict[str, dict[str, str]]) -> str:
    conf = make_conf(tmp_path, backends)
    with pytest.raises(loader.DriverLoadError) as info:
        loader.load_drivers(conf, "hostA", "hostA.engine")
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_dummy_is_loaded_by_the_group_name(tmp_path):
    conf = make_conf(tmp_path, {"dummy": {}})
    drivers = loader.load_drivers(conf, "hostA", "hostA.e1")
    assert list(drivers) == ["dummy"]
    drv = drivers["dummy"]
    assert isinstance(drv, DummyDriver)
    assert (drv.backend_name, drv.host, drv.engine_id) == ("dummy", "hostA", "hostA.e1")
    assert drv.dummy_state_path == str(tmp_path / "state" / "dummy" / "dummy")
    assert drv.driver_handles_share_servers is False


def test_two_backends_of_one_driver_are_separate(tmp_path):
    conf = make_conf(tmp_path, {
        "gold": {"share_driver": "dummy", "driver_handles_share_servers": "true"},
        "silver": {"share_driver": "dummy", "dummy_fail_methods": "create_share"},
    })
    drivers = loader.load_drivers(conf, "hostA", "hostA.e1")
    assert drivers["gold"].driver_handles_share_servers is True
    assert drivers["silver"].driver_handles_share_servers is False
    assert drivers["gold"].dummy_state_path != drivers["silver"].dummy_state_path
    assert drivers["gold"].knobs.fail == [] and drivers["silver"].knobs.fail == ["create_share"]


def test_unknown_driver_name(tmp_path):
    message = load_error(tmp_path, {"gold": {"share_driver": "nosuch"}})
    assert message.startswith("backend [gold]: driver 'nosuch': no entry point 'nosuch'")
    assert "installed: " in message and "dummy" in message


def test_default_name_is_the_group_name(tmp_path):
    message = load_error(tmp_path, {"netapp": {}})
    assert "backend [netapp]" in message and "no entry point 'netapp'" in message


@pytest.mark.parametrize(
    "entry_point,cause",
    [
        ("imports_missing",
         "import failed: ModuleNotFoundError: No module named 'sharemgr_no_such_module_xyz'"),
        ("asserts", "import failed: AssertionError: plugin asserts at import"),
        ("missing_class", "module 'sm_bad_plugins.good' has no class 'NoSuchDriver'"),
        ("ctor_fails", "constructor failed: RuntimeError: cannot reach the array at 10.9.9.9"),
        ("setup_fails", "do_setup failed: RuntimeError: array refused login"),
        ("not_a_driver", "is not a subclass of sharemgr.drivers.base.ShareDriver"),
    ],
)
def test_bad_plugin_is_one_line(tmp_path, bad_plugins, entry_point, cause):
    message = load_error(tmp_path, {"gold": {"share_driver": entry_point}})
    assert message.startswith("backend [gold]: driver "), message
    assert entry_point in message
    assert cause in message


def test_without_setup_a_failing_set_up_is_left_to_the_caller(tmp_path, bad_plugins):
    """The daemon constructs every driver first (a mistake there stops it),
    then sets each up and retries one that fails (daemon/service.py)."""
    conf = make_conf(tmp_path, {"gold": {"share_driver": "setup_fails"}})
    drivers = loader.load_drivers(conf, "hostA", "hostA.engine", setup=False)
    with pytest.raises(loader.BackendSetupError) as info:
        loader.setup_driver(drivers["gold"])
    assert str(info.value) == "do_setup failed: RuntimeError: array refused login"


def test_entry_point_target_is_named_for_import_errors(tmp_path, bad_plugins):
    message = load_error(tmp_path, {"gold": {"share_driver": "missing_class"}})
    assert "'missing_class = sm_bad_plugins.good:NoSuchDriver'" in message


@pytest.mark.parametrize(
    "option,value,cause",
    [
        ("dummy_method_delays", "create_share:slow",
         "invalid value for [gold] dummy_method_delays: could not convert string to float"),
        ("dummy_method_delays", "create_share:-1",
         "invalid value for [gold] dummy_method_delays: Should be greater than or equal to 0"),
        ("dummy_status_methods", "get_share_status,get_everything",
         "invalid value for [gold] dummy_status_methods"),
        ("dummy_gate_poll_interval", "0", "invalid value for [gold] dummy_gate_poll_interval"),
        ("dummy_fail_methods", "create_shares", "'create_shares' names no dummy driver method"),
        ("dummy_crash_after", "frobnicate.web-", "'frobnicate.web-' names no dummy driver method"),
    ],
)
def test_bad_driver_option_is_one_line(tmp_path, option, value, cause):
    message = load_error(tmp_path, {"gold": {"share_driver": "dummy", option: value}})
    assert message.startswith("backend [gold]: driver 'dummy'"), message
    assert cause in message


def test_first_failing_backend_is_reported(tmp_path):
    message = load_error(tmp_path, {"ok": {"share_driver": "dummy"},
                                    "broken": {"share_driver": "nosuch"}})
    assert message.startswith("backend [broken]")


def test_plugin_added_after_stevedore_cached_the_namespace(tmp_path, monkeypatch):
    """stevedore caches a namespace's entry points for the whole process: a
    plugin that appears later is invisible to it, but not to the loader."""
    with pytest.raises(stevedore_exc.NoMatches):
        stevedore_driver.DriverManager(loader.NAMESPACE, "example")
    with plugins_on_path(monkeypatch, example_site(tmp_path)):
        # Still cached: stevedore alone does not see the new plugin.
        with pytest.raises(stevedore_exc.NoMatches):
            stevedore_driver.DriverManager(loader.NAMESPACE, "example")
        conf = make_conf(tmp_path, {"files": {"share_driver": "example"}})
        drivers = loader.load_drivers(conf, "hostA", "hostA.e1")
    assert type(drivers["files"]).__name__ == "ExampleDriver"
    assert type(drivers["files"]).__module__ == "sharemgr_example_driver.driver"


@pytest.mark.parametrize("entry_point,cause", [
    ("imports_missing", ModuleNotFoundError),
    ("ctor_fails", RuntimeError),
    ("setup_fails", RuntimeError),
])
def test_load_failure_traceback_is_logged_at_debug(tmp_path, bad_plugins, caplog,
                                                   entry_point, cause):
    """The error is one line; the cause's traceback is in the DEBUG log."""
    caplog.set_level(logging.DEBUG, "sharemgr.drivers.loader")
    message = load_error(tmp_path, {"gold": {"share_driver": entry_point}})
    [record] = [r for r in caplog.records if r.name == "sharemgr.drivers.loader"]
    assert record.levelno == logging.DEBUG and record.getMessage() == message
    assert record.exc_info[0] is cause and record.exc_info[2] is not None
