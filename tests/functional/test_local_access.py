"""Access rules on the local driver that once broke a backend (issue 42),
through sharectl and share-manager with the real NFS and SMB clients:

1. a scoped address ('fe80::1%lo') is refused by sharectl (exit 2, nothing
   written), and the backend goes on creating, changing and deleting;
2. '0.0.0.0/0' lets every client in (NFS-Ganesha cannot read it as written:
   the driver writes the two halves of the space) and the share stays served;
3. sharectl and the driver agree on names: 'bin' (a real 3-letter account)
   works, a 33-character name or '@wheel' is refused up front naming the
   backend's limit; a rule the backend refuses for what the other rules say
   ends 'error' alone, with its reason in the user message.

Needs root and the packages (local_harness)."""

from __future__ import annotations

import pytest

from tests.functional import local_harness as lh
from tests.functional.test_local_driver import _location, _rule

pytestmark = pytest.mark.functional


def _refused_at_intake(d, sid, *args) -> str:
    """``access allow`` exits 2 with one line and writes no rule."""
    before = d.json("access", "list", sid)
    out = d.sharectl("access", "allow", sid, *args, "--wait", check=False)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert out.stderr.startswith("sharectl: error:") and "Traceback" not in out.stderr, out
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert d.json("access", "list", sid) == before
    return out.stderr


def _states(d, sid) -> dict[str, str]:
    return {r["access_to"]: r["state"] for r in d.json("access", "list", sid)}


@pytest.mark.long(60)
def test_a_bad_rule_fails_alone(local, tmp_path):
    d, options = local()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    d.start()

    def create(proto, name):
        share = d.json("share", "create", "1", "--proto", proto, "--name", name,
                       "--backend", "local", "--wait")
        return share["id"], _location(d, share["id"])

    served, served_loc = create("NFS", "served")
    _rule(d, served, "--type", "ip", "--to", "127.0.0.1")
    team, team_loc = create("CIFS", "team")
    _rule(d, team, "--type", "ip", "--to", "127.0.0.1")

    team_user = None  # once a user rule is in, the CIFS share admits only users

    def others_served():
        assert client.ls("NFS", served_loc).returncode == 0
        assert client.ls("CIFS", team_loc, user=team_user).returncode == 0
        assert set(_states(d, served).values()) == {"active"}

    others_served()

    # 1. A scoped address: refused up front; the backend keeps working.
    other, other_loc = create("NFS", "other")
    assert "scoped address" in _refused_at_intake(d, other, "--type", "ip",
                                                   "--to", "fe80::1%lo")
    extra, extra_loc = create("NFS", "extra")
    _rule(d, extra, "--type", "ip", "--to", "127.0.0.1")
    assert client.ls("NFS", extra_loc).returncode == 0
    d.sharectl("share", "delete", extra, "--wait")
    others_served()

    # 2. Every IPv4 client, on NFS and CIFS: in force, proven by a client.
    assert client.ls("NFS", other_loc).returncode != 0
    assert _rule(d, other, "--type", "ip", "--to", "0.0.0.0/0")["state"] == "active"
    assert client.ls("NFS", other_loc).returncode == 0
    assert d.json("share", "show", other)["status"] == "available"
    # Every IPv6 client too: in force beside it, nothing dropped.
    assert _rule(d, other, "--type", "ip", "--to", "::/0")["state"] == "active"
    assert client.ls("NFS", other_loc).returncode == 0
    wide, wide_loc = create("CIFS", "wide")
    assert _rule(d, wide, "--type", "ip", "--to", "0.0.0.0/0")["state"] == "active"
    assert client.ls("CIFS", wide_loc).returncode == 0
    others_served()

    # 3. Names: what the backend takes works, the rest is refused up front.
    out = lh.run("pdbedit", "-s", str(root / "samba" / "smb.conf"), "-a", "-t", "-u", "bin",
                 input_text="secret\nsecret\n")
    assert out.returncode == 0, out.stderr
    assert _rule(d, team, "--type", "user", "--to", "bin")["state"] == "active"
    team_user = "bin%secret"
    others_served()
    assert "32" in _refused_at_intake(d, team, "--type", "user", "--to", "a" * 33)
    assert "no groups" in _refused_at_intake(d, team, "--type", "user", "--to", "@wheel")
    assert "take ip rules" in _refused_at_intake(d, served, "--type", "user", "--to", "bin")
    assert "take ip or user" in _refused_at_intake(d, team, "--type", "cert", "--to", "x")

    # A rule the backend refuses for what the others say (Samba has one
    # 'read only' for all addresses): it alone ends error, its reason in
    # the user message; the others stay active and served.
    out = d.sharectl("access", "allow", team, "--type", "ip", "--to", "10.9.9.9",
                     "--level", "ro", "--wait", check=False)
    assert out.returncode == 1 and "ended in state error" in out.stderr, out
    assert _states(d, team) == {"127.0.0.1": "active", "bin": "active", "10.9.9.9": "error"}
    messages = d.json("message", "list", "--resource", team)
    assert len(messages) == 1
    detail = d.json("message", "show", messages[0]["id"])["detail"]
    assert "10.9.9.9" in detail and "read only" in detail, detail
    others_served()
