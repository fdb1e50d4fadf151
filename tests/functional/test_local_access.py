"""Access rules on the local driver that once broke a backend (issue 42),
through sharectl and share-manager with the real NFS and SMB clients:

1. a scoped address ('fe80::1%lo') is refused by sharectl (exit 2, nothing
   written), and the backend goes on creating, changing and deleting;
2. '0.0.0.0/0' lets every client in (NFS-Ganesha cannot read it as written:
   the driver writes the two halves of the space) and the share stays served;
3. sharectl and the driver agree on names: 'bin' (a real 3-letter account)
   works, a 33-character name or '@wheel' is refused up front naming the
   backend's limit.

And two rules that once left a share no client could use: on CIFS an ip
and a user rule (Samba admitted only their intersection) and two ip rules
at two levels are refused up front; on NFS the rule that names a client
most precisely decides for it, whatever the order the rules came in.

Needs root and the packages (local_harness)."""

from __future__ import annotations

import json
import os

import pytest

from tests.functional import local_harness as lh
from tests.functional.test_local_driver import _deny_all, _location, _rule

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

    def others_served():
        assert client.ls("NFS", served_loc).returncode == 0
        assert client.ls("CIFS", team_loc).returncode == 0
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
    users, users_loc = create("CIFS", "users")
    assert _rule(d, users, "--type", "user", "--to", "bin")["state"] == "active"
    assert client.ls("CIFS", users_loc, user="bin%secret").returncode == 0
    assert "32" in _refused_at_intake(d, users, "--type", "user", "--to", "a" * 33)
    assert "no groups" in _refused_at_intake(d, users, "--type", "user", "--to", "@wheel")
    assert "take ip rules" in _refused_at_intake(d, served, "--type", "user", "--to", "bin")
    assert "take ip or user" in _refused_at_intake(d, team, "--type", "cert", "--to", "x")
    others_served()


@pytest.mark.long(60)
def test_rules_that_cannot_stand_together(local, tmp_path):
    """The rules a new user gave that left a share reported healthy while no
    client could use it: each refused up front (exit 2, nothing written,
    the share served as before), or served as the rules mean."""
    d, options = local()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    engine = d.start()
    for account in ("bin", "daemon"):
        out = lh.run("pdbedit", "-s", str(root / "samba" / "smb.conf"), "-a", "-t", "-u",
                     account, input_text="secret\nsecret\n")
        assert out.returncode == 0, out.stderr
    note = tmp_path / "note.txt"
    note.write_text("hello\n")

    def create(proto, name):
        share = d.json("share", "create", "1", "--proto", proto, "--name", name,
                       "--backend", "local", "--wait")
        return share["id"], _location(d, share["id"])

    def can(proto, loc, user=None):
        """(reads, writes) of this host's client."""
        return (client.ls(proto, loc, user=user).returncode == 0,
                client.put(proto, loc, note, f"w{os.urandom(4).hex()}.txt",
                           user=user).returncode == 0)

    # CIFS, an ip rule then a user rule: Samba would have admitted only the
    # user from the address, so guests lost the share the ip rule gave them.
    guests, guests_loc = create("CIFS", "guests")
    _rule(d, guests, "--type", "ip", "--to", "127.0.0.1")
    assert can("CIFS", guests_loc) == (True, True)
    refusal = _refused_at_intake(d, guests, "--type", "user", "--to", "daemon")
    assert "user rules cannot stand beside ip rules on one share" in refusal, refusal
    assert "ip 127.0.0.1 (rw, rule " in refusal, refusal
    # A network that does not hold this host and a user: nobody at all.
    assert _rule(d, guests, "--type", "ip", "--to", "10.0.0.0/24")["state"] == "active"
    _refused_at_intake(d, guests, "--type", "user", "--to", "daemon")
    # Two levels of ip rules: Samba has one 'read only' for the share.
    refusal = _refused_at_intake(d, guests, "--type", "ip", "--to", "10.0.1.0/24",
                                 "--level", "ro")
    assert "ip rules of one share all have one access level" in refusal, refusal
    assert can("CIFS", guests_loc) == (True, True)
    assert can("CIFS", guests_loc, user="daemon%secret") == (True, True)  # as a guest

    # The other way round: a user rule, then an ip rule.
    team, team_loc = create("CIFS", "team")
    _rule(d, team, "--type", "user", "--to", "daemon")
    _refused_at_intake(d, team, "--type", "ip", "--to", "127.0.0.1")
    # Users at two levels: 'read list' holds them apart.
    assert _rule(d, team, "--type", "user", "--to", "bin", "--level", "ro")["state"] == "active"
    assert can("CIFS", team_loc, user="daemon%secret") == (True, True)
    assert can("CIFS", team_loc, user="bin%secret") == (True, False)
    assert can("CIFS", team_loc) == (False, False)
    # Once the user rules are denied, the ip rule may come.
    _deny_all(d, team)
    assert _rule(d, team, "--type", "ip", "--to", "127.0.0.1")["state"] == "active"
    assert can("CIFS", team_loc) == (True, True)

    # A record of an older version holding both kinds: the older kind is
    # served, the newer left out (and logged), the share usable by its
    # older rules; every other share as before.
    record_file = root / "records" / f"{d.json('share', 'show', guests)['instance_id']}.json"
    record = json.loads(record_file.read_text())
    record["rules"].append({"id": "old-user", "access_type": "user", "access_to": "daemon",
                            "access_level": "rw"})
    record_file.write_text(json.dumps(record))
    wake, wake_loc = create("NFS", "wake")
    _rule(d, wake, "--type", "ip", "--to", "127.0.0.1")  # rewrites every share's file
    assert can("CIFS", guests_loc) == (True, True)
    assert can("CIFS", team_loc) == (True, True)
    assert "recorded rule old-user left out" in engine.text()

    # NFS: a network's rule does not overrule an address's, whatever the
    # order: Ganesha takes the first CLIENT that names a client.
    ordered, ordered_loc = create("NFS", "ordered")
    _rule(d, ordered, "--type", "ip", "--to", "127.0.0.0/8", "--level", "ro")
    assert can("NFS", ordered_loc) == (True, False)
    _rule(d, ordered, "--type", "ip", "--to", "127.0.0.1")
    assert can("NFS", ordered_loc) == (True, True)
    narrow, narrow_loc = create("NFS", "narrow")
    _rule(d, narrow, "--type", "ip", "--to", "0.0.0.0/0")
    _rule(d, narrow, "--type", "ip", "--to", "127.0.0.1", "--level", "ro")
    assert can("NFS", narrow_loc) == (True, False)
    # A stack's share is held to the same limits, at create and at update.
    template = tmp_path / "mixed.yaml"
    template.write_text(
        "resources:\n  mixed:\n    type: share\n    properties:\n"
        "      {size: 1, proto: CIFS, backend: local, access_rules: "
        "[{access_type: ip, access_to: 127.0.0.1}, {access_type: user, access_to: bin}]}\n")
    out = d.sharectl("stack", "create", "mixed", "-t", str(template), "--disable-rollback",
                     "--wait", check=False)
    assert out.returncode == 1 and "CREATE FAILED" in out.stderr, out.stdout + out.stderr
    reason = d.json("stack", "show", "mixed")["status_reason"]
    assert "rule 2 of access_rules: user rules cannot stand beside ip rules" in reason, reason
    for sid in (guests, team, wake, ordered, narrow):
        show = d.json("share", "show", sid)
        assert (show["status"], show["access_rules_status"]) == ("available", "active"), show
