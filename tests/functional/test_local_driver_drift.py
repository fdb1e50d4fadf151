"""What the local driver reports is what its servers serve (issue 42): a
share whose export is removed behind the manager's back (deleted from the
server's configuration and the server reloaded, or removed over Ganesha's
admin interface while its file still has it), or whose clients are
changed there, is found by the next periodic drift check, asked of the
running servers, and served again with its rules in that same check, with
a user message; the clients see it again. Needs root and the packages
(local_harness)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from sharemgr.drivers.local.samba import runtime_dir

from tests.functional import local_harness as lh
from tests.functional.harness import wait_until
from tests.functional.test_local_driver import _location, _rule

pytestmark = pytest.mark.functional


def _edit_export(root: Path, inst: str, edit) -> None:
    """Replace the EXPORT block of ``inst`` in Ganesha's exports file with
    ``edit(block)`` and make Ganesha re-read it (what an administrator with
    an editor does)."""
    exports = root / "ganesha" / "exports.conf"
    text = exports.read_text()
    blocks = re.findall(r"EXPORT \{.*?\n\}\n", text, flags=re.S)
    (block,) = [b for b in blocks if f'Pseudo = "/shares/{inst}";' in b]
    exports.write_text(text.replace(block, edit(block)))
    lh.reload_ganesha(root)


def _remove_section(root: Path, inst: str) -> None:
    """Delete a share's section from smbd's shares file and reload smbd."""
    shares = root / "samba" / "shares.conf"
    text = shares.read_text()
    start = text.index(f"[{inst}]")
    end = text.find("\n[", start + 1)
    shares.write_text(text[:start] + (text[end + 1:] if end != -1 else ""))
    pid_file = runtime_dir(root / "samba") / "pid" / "smbd.pid"
    pid = int(pid_file.read_text().split()[0])
    os.kill(pid, signal.SIGHUP)


def _repairs(d, share_id: str) -> list[dict]:
    return [m for m in d.json("message", "list", "--resource", share_id)
            if m["detail_id"] == "006"]


def _repaired(d, share_id: str, count: int) -> dict:
    """The newest of ``count`` repair messages of the share, shown (with
    its detail: how the server differed), once the periodic drift checks
    have written them; and the checks say they found it (trigger ``drift``:
    periodic, not on demand)."""
    wait_until(lambda: len(_repairs(d, share_id)) >= count, timeout=60, interval=1,
               what=f"repair {count} of share {share_id}")
    newest = _repairs(d, share_id)[0]
    # Every pass: a check every 2 s under a loaded machine pushes the one
    # that found it out of the default newest 20.
    passes = d.json("reconcile", "list", "--limit", "100000")
    found = sum((p["drift"] or {}).get("not_served", 0)
                for p in passes if p["trigger"] == "drift")
    assert found >= count, passes
    return d.json("message", "show", newest["id"])


@pytest.mark.long(30)
def test_a_share_removed_behind_its_back_is_served_again_by_one_periodic_check(local, tmp_path):
    d, options = local()
    d.sections["DEFAULT"]["drift_check_interval"] = "2"
    d.write_config()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    d.start()
    shares = {}
    for proto in ("NFS", "CIFS"):
        share = d.json("share", "create", "1", "--proto", proto, "--name", f"kept-{proto}",
                       "--backend", "local", "--wait")
        _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
        assert client.ls(proto, _location(d, share["id"])).returncode == 0
        shares[proto] = share

    # NFS: the export deleted from Ganesha's configuration, Ganesha reloaded.
    nfs = shares["NFS"]
    _edit_export(root, nfs["instance_id"], lambda block: "")
    message = _repaired(d, nfs["id"], 1)
    assert message["message_level"] == "WARNING", message
    assert "applied its export and access rules again" in message["user_message"]
    # A check between the edit and the reload finds the file's symptom
    # first; either way one check repairs it.
    assert message["detail"] in ("not in ganesha's exports file",
                                 "ganesha.nfsd does not export it"), message
    assert client.ls("NFS", _location(d, nfs["id"])).returncode == 0
    assert f'Pseudo = "/shares/{nfs["instance_id"]}";' in \
        (root / "ganesha" / "exports.conf").read_text()
    assert d.json("share", "show", nfs["id"])["status"] == "available"

    # NFS: the export removed over Ganesha's admin interface; its file still
    # has it, so only asking the running server finds it.
    record = json.loads((root / "records" / f"{nfs['instance_id']}.json").read_text())
    bus = runtime_dir(root / "ganesha") / "bus.sock"
    out = lh.run("busctl", f"--address=unix:path={bus}", "call", "org.ganesha.nfsd",
                 "/org/ganesha/nfsd/ExportMgr", "org.ganesha.nfsd.exportmgr", "RemoveExport",
                 "q", str(record["export_id"]))
    assert out.returncode == 0, out.stderr
    message = _repaired(d, nfs["id"], 2)
    assert message["detail"] == "ganesha.nfsd does not export it", message
    assert client.ls("NFS", _location(d, nfs["id"])).returncode == 0

    # CIFS: the section deleted from smbd's shares file, smbd reloaded.
    cifs = shares["CIFS"]
    _remove_section(root, cifs["instance_id"])
    message = _repaired(d, cifs["id"], 1)
    assert message["detail"] in ("not in smbd's shares file", "smbd does not serve it"), message
    assert client.ls("CIFS", _location(d, cifs["id"])).returncode == 0

    # NFS again: its client taken out of the export (the export stays).
    def no_client(block: str) -> str:
        return "\n".join(line for line in block.splitlines(keepends=False)
                         if "CLIENT" not in line) + "\n"

    _edit_export(root, nfs["instance_id"], no_client)
    message = _repaired(d, nfs["id"], 3)
    assert message["detail"] == ("ganesha.nfsd lets in no client; its rules say "
                                 "127.0.0.1/32 rw"), message
    assert client.ls("NFS", _location(d, nfs["id"])).returncode == 0
    assert "CLIENT { Clients = 127.0.0.1; Access_Type = RW; }" in \
        (root / "ganesha" / "exports.conf").read_text()
