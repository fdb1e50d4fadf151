"""Access rules through sharectl and share-manager: allow, deny and list; a
rule the backend refuses; bad rules refused with nothing written; a stack
that exports its share; and a crash in the middle of applying a rule,
settled by the next engine's startup pass. On SQLite + file locks and on
PostgreSQL + Redis."""

from __future__ import annotations

import pytest

from tests.functional.harness import SETUPS, servers, wait_until

pytestmark = pytest.mark.functional

FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2"}}
# The engine dies right after the backend applied the rules of a share whose
# name starts with 'crashy' (the dummy driver's crash knob, by name prefix).
CRASHING = {"dummy_crash_after": "update_access.crashy"}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(backends={"dummy": CRASHING}, extra=FAST, **servers(request))
    d.sync()
    return d


def _rules(d, share):
    return {r["access_to"]: (r["access_level"], r["state"])
            for r in d.json("access", "list", share)}


def _exported(d, instance):
    obj = next(o for o in d.backend("list") if o["id"] == instance)
    return sorted((r["access_type"], r["access_to"], r["access_level"])
                  for r in obj["details"].get("access_rules", []))


TEMPLATE = """
resources:
  data:
    type: share
    properties:
      size: 1
      proto: NFS
      access_rules: {rules}
outputs:
  exports: {{get_attr: [data, export_locations]}}
"""


def test_access_rules(setup, tmp_path):
    d = setup
    engine = d.start()
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "data", "--wait")
    sid, inst = share["id"], share["instance_id"]

    rule = d.json("access", "allow", sid, "--type", "ip", "--to", "10.0.0.0/24", "--wait")
    assert rule["state"] == "active"
    d.json("access", "allow", sid, "--type", "ip", "--to", "10.0.1.7", "--level", "ro",
           "--wait")
    assert _exported(d, inst) == [("ip", "10.0.0.0/24", "rw"), ("ip", "10.0.1.7", "ro")]

    # Bad rules: exit 2, one line, nothing written.
    for bad in (["--type", "ip", "--to", "10.0.0.300"], ["--type", "ip", "--to", "10.0.0.0/24"],
                ["--type", "user", "--to", "x y z"]):
        out = d.sharectl("access", "allow", sid, *bad, check=False)
        assert out.returncode == 2 and out.stderr.startswith("sharectl: error:"), out
        assert len(out.stderr.strip().splitlines()) == 1
    assert len(_rules(d, sid)) == 2

    # NFS is exported by address: the dummy backend refuses a user rule.
    out = d.sharectl("access", "allow", sid, "--type", "user", "--to", "alice", "--wait",
                     check=False)
    assert out.returncode == 1 and "ended in state error" in out.stderr
    assert _rules(d, sid)["alice"] == ("rw", "error")
    assert d.json("share", "show", sid)["access_rules_status"] == "error"

    for r in d.json("access", "list", sid):
        if r["access_to"] in ("alice", "10.0.0.0/24"):
            d.sharectl("access", "deny", sid, r["id"], "--wait")
    assert _rules(d, sid) == {"10.0.1.7": ("ro", "active")}
    assert _exported(d, inst) == [("ip", "10.0.1.7", "ro")]
    assert d.json("share", "show", sid)["access_rules_status"] == "active"
    # A share's requests are found by its own id (they are keyed by its instance).
    actions = [r["action"] for r in d.json("request", "list", "--resource", sid)]
    assert actions[-1] == "create" and actions.count("update_access") == 5, actions

    # A stack exports what it makes; a changed list is applied in place.
    first = tmp_path / "one.yaml"
    first.write_text(TEMPLATE.format(rules="[{access_type: ip, access_to: 10.5.0.0/16}]"))
    assert d.json("stack", "create", "web", "-t", str(first), "--wait")["status"] == "COMPLETE"
    made = d.json("stack", "resource", "list", "web")[0]["physical_id"]
    made_inst = d.json("share", "show", made)["instance_id"]
    assert _exported(d, made_inst) == [("ip", "10.5.0.0/16", "rw")]
    second = tmp_path / "two.yaml"
    second.write_text(TEMPLATE.format(
        rules="[{access_type: ip, access_to: 10.5.0.0/16, access_level: ro}, "
              "{access_type: ip, access_to: 10.6.0.1}]"))
    assert d.json("stack", "update", "web", "-t", str(second), "--wait")["status"] == "COMPLETE"
    assert d.json("stack", "resource", "list", "web")[0]["physical_id"] == made
    assert _exported(d, made_inst) == [("ip", "10.5.0.0/16", "ro"), ("ip", "10.6.0.1", "rw")]
    assert _rules(d, made) == {"10.5.0.0/16": ("ro", "active"), "10.6.0.1": ("rw", "active")}

    # A crash after the backend applied a rule, before the outcome was written.
    crashy = d.json("share", "create", "1", "--proto", "NFS", "--name", "crashy-1", "--wait")
    d.sharectl("access", "allow", crashy["id"], "--type", "ip", "--to", "10.9.0.0/16")
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    assert _rules(d, crashy["id"]) == {"10.9.0.0/16": ("rw", "applying")}
    normal = d.write_config(tmp_path / "normal.conf", dummy={"dummy_crash_after": ""})
    d.start(config=normal)
    wait_until(lambda: _rules(d, crashy["id"]) == {"10.9.0.0/16": ("rw", "active")},
               timeout=60, what="the rule settled by the startup pass")
    assert _exported(d, crashy["instance_id"]) == [("ip", "10.9.0.0/16", "rw")]
    # Its outcomes are written at the pass's end, after the rule it settled.
    wait_until(lambda: any(p["outcomes"].get("access_rule") == {"active": 1}
                           for p in d.json("reconcile", "list")),
               what="the startup pass's outcomes recorded")
