"""What the local driver refuses, and how (issue 42), through sharectl and
share-manager with the real clients: a shrink that would lose data leaves
the share available with a user message; an extend beyond the pool's room
is refused at intake; paths the servers cannot use stop the start with one
line and exit 2; a server that exits during its start is noticed at once;
ensure runs at every start; the README's clean-up stops only its backend's
servers. Needs root and the packages (local_harness)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.functional import local_harness as lh
from tests.functional.harness import wait_until
from tests.functional.test_daemon import one_error_line
from tests.functional.test_local_driver import _location, _rule

pytestmark = pytest.mark.functional


def test_a_shrink_refused_to_protect_data_leaves_the_share_available(local, tmp_path):
    d, options = local()
    client = lh.Client(options)
    d.start()
    share = d.json("share", "create", "3", "--proto", "CIFS", "--name", "full",
                   "--backend", "local", "--wait")
    sid = share["id"]
    _rule(d, sid, "--type", "ip", "--to", "127.0.0.1")
    loc = _location(d, sid)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(2 * lh.UNIT_MIB * 1024 * 1024))  # two units
    assert client.put("CIFS", loc, data, "data.bin").returncode == 0

    out = d.sharectl("share", "shrink", sid, "1", "--wait", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "was not resized to 1" in out.stderr and "the backend refused it" in out.stderr, \
        out.stderr
    assert "Traceback" not in out.stderr
    shown = d.json("share", "show", sid)
    assert (shown["status"], shown["size"]) == ("available", 3), shown
    (message,) = d.json("message", "list", "--resource", sid)
    assert (message["action_id"], message["detail_id"], message["message_level"]) == (
        "004", "005", "ERROR"), message
    back = tmp_path / "back.bin"
    assert client.get("CIFS", loc, "data.bin", back).returncode == 0
    assert back.read_bytes() == data.read_bytes()

    # No reset-state needed: with the data gone, the next shrink runs.
    assert client._smb(loc, "del data.bin", None).returncode == 0
    shrunk = d.json("share", "shrink", sid, "2", "--wait")
    assert (shrunk["status"], shrunk["size"]) == ("available", 2), shrunk
    assert client.put("CIFS", loc, back, "again.bin").returncode != 0  # 2 units do not fit
    assert client.ls("CIFS", loc).returncode == 0


def _pool(d) -> dict:
    (pool,) = d.json("pool", "list")
    return pool


def test_an_extend_beyond_the_pool_s_room_is_refused_at_intake(local, tmp_path):
    """Issue 42, case 6: the disk holding the images is large but mostly
    taken by other files; at over-subscription ratio 1.0 the shares may
    take only the room there is. Sizes in GiB (the default unit)."""
    with lh.small_filesystem(tmp_path / "pool", size_mib=16 * 1024, free_mib=4608) as pool:
        d, options = local()
        root = pool / "local"
        d.sections["local"].update(local_state_path=str(root), local_size_unit_mib="1024")
        d.sections["DEFAULT"]["backend_stats_interval"] = "1"
        d.write_config()
        try:
            client = lh.Client(options)
            d.start()
            share = d.json("share", "create", "1", "--proto", "NFS", "--name", "grows",
                           "--backend", "local", "--wait")
            sid = share["id"]
            _rule(d, sid, "--type", "ip", "--to", "127.0.0.1")
            note, back = tmp_path / "note.txt", tmp_path / "back.txt"
            note.write_text("kept\n")
            loc = _location(d, sid)
            assert client.put("NFS", loc, note, "note.txt").returncode == 0
            assert d.json("share", "extend", sid, "3", "--wait")["size"] == 3
            # A report made after the extend (the issue's reports came every
            # minute): the room must not come back with it.
            reported = _pool(d)["updated_at"]
            wait_until(lambda: _pool(d)["updated_at"] != reported, timeout=30,
                       what="a stats report after the extend")
            assert _pool(d)["room_gb"] < 2, _pool(d)

            requests = len(d.json("request", "list", "--resource", share["instance_id"]))
            out = d.sharectl("share", "extend", sid, "5", check=False)
            assert out.returncode == 2, out.stdout + out.stderr
            assert "cannot extend share" in out.stderr and "Traceback" not in out.stderr
            assert out.stderr.count("\n") == 1, out.stderr
            # Nothing written: no request, the share as it was, still served.
            assert len(d.json("request", "list", "--resource",
                              share["instance_id"])) == requests
            shown = d.json("share", "show", sid)
            assert (shown["status"], shown["size"]) == ("available", 3), shown
            assert client.get("NFS", loc, "note.txt", back).returncode == 0
            assert back.read_text() == "kept\n"
            # What fits still does.
            assert d.json("share", "extend", sid, "4", "--wait")["size"] == 4
        finally:
            d.stop_all()
            lh.cleanup(root)


def test_paths_the_servers_cannot_use_stop_the_start(local, tmp_path):
    """Issue 42, case 4: a relative local_state_path would depend on the
    daemon's working directory, and ganesha cannot include a file whose
    path holds a space: both stop the start at once, exit 2, one line.
    Without them the same deployment serves both protocols."""
    d, options = local()
    d.sections["local"]["local_state_path"] = "relative-local-state"
    d.write_config()
    relative = Path("relative-local-state").absolute()  # where it would land
    try:
        out = d.run_manager()
    finally:
        if relative.exists():  # accepted: stop its servers, unmount, remove
            lh.cleanup(relative)
            shutil.rmtree(relative, ignore_errors=True)
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_error_line(out)
    assert "[local] local_state_path" in line and "must be an absolute path" in line, line

    # The default path under a state_path with a space.
    del d.sections["local"]["local_state_path"]
    spaced = tmp_path / "my shares"
    d.write_config(DEFAULT={"state_path": str(spaced)}, database={
        "connection": f"sqlite:///{d.state / 'sharemgr.sqlite'}"}, coordination={
        "backend_url": f"file://{d.state / 'coordination'}"})
    out = d.run_manager()
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_error_line(out)
    assert "my shares/local/local" in line and "set local_state_path" in line, line
    assert not (spaced / "local").exists()

    # A quote in a path option of the system's servers, the same.
    d.sections["local"]["local_ganesha_exports_file"] = '/etc/ganesha/"x".conf'
    d.write_config()
    out = d.run_manager()
    assert out.returncode == 2 and "local_ganesha_exports_file" in one_error_line(out)
    del d.sections["local"]["local_ganesha_exports_file"]
    d.write_config()

    client = lh.Client(options)
    d.start()
    for proto in ("NFS", "CIFS"):
        share = d.json("share", "create", "1", "--proto", proto, "--backend", "local",
                       "--wait")
        _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
        assert client.ls(proto, _location(d, share["id"])).returncode == 0


def _backends(d) -> str:
    (svc,) = [s for s in d.json("service", "list") if s["alive"]]
    return svc["backends"]


def test_a_server_that_exits_at_start_is_noticed_at_once_and_ensure_runs(local, tmp_path):
    """Issue 42, case 7: ganesha exits at once (its address is not this
    host's): the backend is failed with the end of ganesha's log as the
    reason, with no false 'out of the engines group' meanwhile. With a good
    address it serves, and every start runs ensure (the local driver's
    backend info is empty: cannot tell)."""
    d, options = local()
    client = lh.Client(options)
    bad = d.write_config(tmp_path / "bad-ip.conf", local={"local_export_ip": "192.0.2.1"})
    engine = d.start(config=bad)
    wait_until(lambda: "local: failed" in _backends(d), timeout=60,
               what="the local backend failed")
    reason = _backends(d)
    assert re.search(r"ganesha\.nfsd \(pid \d+\) exited during its start", reason), reason
    assert "192.0.2.1" in reason or "bind" in reason.lower(), reason
    assert "out of the engines group" not in engine.text(), engine.text()
    engine.terminate()
    lh.stop_servers(lh.local_root(d.state))  # the smbd of no use

    engine = d.start()
    assert "local: up" in _backends(d)
    share = d.json("share", "create", "1", "--proto", "NFS", "--backend", "local", "--wait")
    _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
    assert client.ls("NFS", _location(d, share["id"])).returncode == 0

    # Ensure at every start, as the docs say: the share's rules applied again.
    for _ in range(2):
        engine.terminate()
        engine = d.start()
        engine.wait_for_log("ensured 1 share instance(s)")
        assert "ensure skipped" not in engine.text()
        assert client.ls("NFS", _location(d, share["id"])).returncode == 0


def _readme_cleanup(root: Path) -> str:
    """The README's clean-up of the local backend's servers, for ``root``."""
    readme = Path(__file__).resolve().parents[2] / "README.rst"
    lines = readme.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    # ROOT="))
    script = []
    for line in lines[start:]:
        if not line.startswith("    # "):
            break
        script.append(line[len("    # "):])
    text = "\n".join(c for c in script if not c.startswith("rm "))
    return text.replace("/srv/sharemgr/local/local", str(root))


def test_the_readme_clean_up_stops_only_its_backend_s_servers(local, tmp_path):
    served = {}
    for name in ("a", "b"):
        d, options = local()
        d.start()
        share = d.json("share", "create", "1", "--proto", "CIFS", "--backend", "local",
                       "--wait")
        _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
        served[name] = (d, lh.Client(options), _location(d, share["id"]))
        assert served[name][1].ls("CIFS", served[name][2]).returncode == 0
    root_a = lh.local_root(served["a"][0].state)
    root_b = lh.local_root(served["b"][0].state)
    for d, _, _ in served.values():
        d.stop_all()  # the servers outlive share-manager
    out = subprocess.run(["bash", "-ec", _readme_cleanup(root_a)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    wait_until(lambda: not any(lh.servers_running(root_a).values()), timeout=30,
               what="backend a's servers stopped")
    assert all(lh.servers_running(root_b).values()), lh.servers_running(root_b)
    d, client, loc = served["b"]
    assert client.ls("CIFS", loc).returncode == 0
    assert served["a"][1].ls("CIFS", served["a"][2]).returncode != 0
