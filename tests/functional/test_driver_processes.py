"""The dummy driver in real processes: crash points kill the process at the
point they name, several processes drive one backend, the command works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sharemgr.drivers.dummy_knobs import CRASH_EXIT_CODE

from tests.functional.harness import tool

pytestmark = pytest.mark.functional

# Loads the dummy backend from a config file as share-manager does, then
# creates the shares named on the command line, one create_share each.
DRIVE = textwrap.dedent(
    """
    import json, sys
    from oslo_config import cfg
    from sharemgr.drivers import loader
    from sharemgr.manager import config

    conf = cfg.ConfigOpts()
    config.load(["--config-file", sys.argv[1]], conf=conf)
    drv = loader.load_drivers(conf, "hostA", sys.argv[2])["dummy"]
    for name in sys.argv[3:]:
        share = {"id": "inst-" + name, "share_id": "share-" + name, "name": name,
                 "size": 1, "share_proto": "NFS", "host": "hostA@dummy",
                 "share_server_id": None, "export_locations": [], "snapshot_id": None}
        drv.create_share(share)
        print("created", name, flush=True)
    """
)


def write_conf(tmp_path: Path, **options: str) -> tuple[Path, Path]:
    backend = tmp_path / "backend"
    lines = ["[DEFAULT]", f"state_path = {tmp_path / 'state'}", "enabled_share_backends = dummy",
             "", "[dummy]", f"dummy_state_path = {backend}"]
    lines += [f"{k} = {v}" for k, v in options.items()]
    conf = tmp_path / "sharemgr.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf, backend


def drive(conf: Path, engine: str, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVE, str(conf), engine, *names],
                          capture_output=True, text=True, timeout=120)


def backend_cmd(backend: Path, *args: str) -> object:
    out = subprocess.run([tool("sharemgr-dummy-backend"), "--state-path", str(backend), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_crash_after_create_share_kills_the_process_with_the_share_on_disk(tmp_path):
    conf, backend = write_conf(tmp_path, dummy_crash_after="create_share")
    out = drive(conf, "hostA.e1", "data")
    assert out.returncode == CRASH_EXIT_CODE, out.stderr
    assert "created" not in out.stdout  # it never returned from create_share
    assert "crash point after create_share" in out.stderr
    listed = backend_cmd(backend, "list")
    assert [(o["kind"], o["id"], o["share_id"], o["status"]) for o in listed] == [
        ("share", "inst-data", "share-data", "available")]


def test_crash_before_create_share_leaves_nothing_but_the_call(tmp_path):
    conf, backend = write_conf(tmp_path, dummy_crash_before="create_share")
    out = drive(conf, "hostA.e1", "data")
    assert out.returncode == CRASH_EXIT_CODE, out.stderr
    assert backend_cmd(backend, "list") == []
    calls = backend_cmd(backend, "calls", "--method", "create_share")
    assert [(c["resource_id"], c["engine_id"]) for c in calls] == [("inst-data", "hostA.e1")]


def test_crash_point_with_a_name_prefix_spares_other_resources(tmp_path):
    conf, backend = write_conf(tmp_path, dummy_crash_after="create_share.web-")
    out = drive(conf, "hostA.e1", "db-data", "web-data", "zz-never")
    assert out.returncode == CRASH_EXIT_CODE, out.stderr
    assert out.stdout.split("\n")[0] == "created db-data"
    assert sorted(o["name"] for o in backend_cmd(backend, "list")) == ["db-data", "web-data"]


def test_two_processes_drive_one_backend(tmp_path):
    conf, backend = write_conf(tmp_path)
    names = {engine: [f"{engine}-{i}" for i in range(60)] for engine in ("e1", "e2")}
    procs = [
        subprocess.Popen([sys.executable, "-c", DRIVE, str(conf), f"hostA.{engine}", *n],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for engine, n in names.items()
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    listed = backend_cmd(backend, "list")
    assert sorted(o["name"] for o in listed) == sorted(names["e1"] + names["e2"])
    engines = {c["engine_id"] for c in backend_cmd(backend, "calls", "--method", "create_share")}
    assert engines == {"hostA.e1", "hostA.e2"}


def test_command_changes_what_the_driver_reports(tmp_path):
    conf, backend = write_conf(tmp_path)
    assert drive(conf, "hostA.e1", "data").returncode == 0
    changed = backend_cmd(backend, "set", "share-data", "size=5", "status=error")
    assert (changed["id"], changed["size"], changed["status"]) == ("inst-data", 5, "error")
    # The manager's state_path finds the same backend.
    listed = backend_cmd(tmp_path, "list")
    assert [(o["backend"], o["size"]) for o in listed] == [("dummy", 5)]
    backend_cmd(backend, "remove", "inst-data")
    assert backend_cmd(backend, "list") == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["list", "--kind", "volume"], "invalid choice: 'volume'"),
        (["set", "nope", "size=1"], "no object with id or name 'nope'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_command_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    conf, backend = write_conf(tmp_path)
    assert drive(conf, "hostA.e1").returncode == 0  # creates the state
    out = subprocess.run([tool("sharemgr-dummy-backend"), "--state-path", str(backend), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
