"""What the local driver refuses, and how (issue 42), through sharectl and
share-manager with the real clients: a shrink that would lose data leaves
the share available with a user message; an extend beyond the pool's room
is refused at intake. Needs root and the packages (local_harness)."""

from __future__ import annotations

import os

import pytest

from tests.functional import local_harness as lh
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
