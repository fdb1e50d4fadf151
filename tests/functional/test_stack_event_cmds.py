"""Stack events through sharectl and a real share-manager (doc/convergence.rst,
"Events"): what a create, an update (in place, replace, add, remove) and a
failure record, failures list, --follow to the end and Ctrl-C, the per-stack
cap, events gone with their stack. On SQLite + file locks and on PostgreSQL +
Redis."""

from __future__ import annotations

import signal
import subprocess

import pytest
from sharemgr.db import models, stack_events

from tests.functional.harness import database, tool
from tests.functional.test_stacks import _setup, _stack, _write, setup  # noqa: F401

pytestmark = pytest.mark.functional

V1 = """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
  c: {type: share, properties: {size: 1, proto: NFS}}
"""
# a grows (in place), b changes protocol (replaced), c goes, d is new.
V2 = """
resources:
  a: {type: share, properties: {size: 2, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: CIFS}}
  d: {type: share, properties: {size: 1, proto: NFS}}
"""
BAD = """
resources:
  good: {type: share, properties: {size: 1, proto: NFS}}
  bad: {type: share, properties: {size: 1, proto: NFS}}
"""
SLOW = """
resources:
  s: {type: share, properties: {size: 1, proto: NFS}}
"""
# Create 8 events (the stack's two, two per resource), the update 12: the
# update's all stay, and two of the create's.
CAP = 14
KNOBS = {"dummy": {"dummy_fail_methods": "create_share.ev-bad-",
                   "dummy_method_delays": "create_share.slow-:1"}}


def _changes(listed, traversal):
    return stack_events.changes([models.StackEvent(
        resource_name=e["resource_name"], resource_id=e["resource_id"], action=e["action"],
        status=e["status"], traversal_id=e["traversal"]) for e in listed], traversal)


def test_events_failures_follow_and_cap(deployment, setup, tmp_path):  # noqa: F811
    # The hanging create waits at a gate, which the deployment opens when it
    # stops its engines (a delay would hold the stop for its whole length).
    gates = tmp_path / "gates"
    gates.mkdir()
    d = _setup(deployment, setup,
               backends={"dummy": {**KNOBS["dummy"], "dummy_gate_dir": str(gates)}},
               extra={"DEFAULT": {"max_events_per_stack": str(CAP)}})
    (gates / "create_share.hang-").touch()
    d.sync()
    d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", V1), "--wait")
    listed = d.json("stack", "event", "list", "web")
    assert [(e["resource_name"], e["action"], e["status"]) for e in listed][::len(listed) - 1] \
        == [(None, "CREATE", "IN_PROGRESS"), (None, "CREATE", "COMPLETE")]
    assert sorted((e["resource_name"], e["status"]) for e in listed[1:-1]) == sorted(
        (n, s) for n in "abc" for s in ("IN_PROGRESS", "COMPLETE"))
    assert all(e["physical_id"] for e in listed[1:-1])
    assert [e["id"] for e in listed] == sorted(e["id"] for e in listed)

    d.sharectl("stack", "update", "web", "-t", _write(d, "v2", V2), "--wait",
               "--allow-replace")
    listed = d.json("stack", "event", "list", "web")
    assert len(listed) == CAP  # trimmed at the update's end
    assert (listed[-1]["resource_name"], listed[-1]["action"], listed[-1]["status"]) == \
        (None, "UPDATE", "COMPLETE")
    traversal = listed[-1]["traversal"]
    got = _changes(listed, traversal)
    assert (got.added, got.updated, got.replaced, got.deleted) == ({"d"}, {"a"}, {"b"}, {"c"})
    only_b = d.json("stack", "event", "list", "web", "--resource", "b")
    assert {e["resource_name"] for e in only_b} == {"b"}
    assert len({e["resource_id"] for e in only_b if e["traversal"] == traversal}) == 2
    shown = d.json("stack", "event", "show", "web", str(only_b[-1]["id"]))
    assert shown == only_b[-1]

    # Unknown stack or event: one message, exit 2.
    out = d.sharectl("stack", "event", "list", "nope", check=False)
    assert out.returncode == 2 and "no stack named" in out.stderr and "Traceback" not in out.stderr
    out = d.sharectl("stack", "event", "show", "web", "999999", check=False)
    assert out.returncode == 2 and "has no event 999999" in out.stderr
    out = d.sharectl("stack", "event", "list", "web", "--resource", "nosuch", check=False)
    assert out.returncode == 2 and "stack web has no resource 'nosuch'" in out.stderr
    out = d.sharectl("stack", "failures", "list", "nope", check=False)
    assert out.returncode == 2

    # A failing resource without rollback: its failure, with the reason.
    out = d.sharectl("stack", "create", "ev", "-t", _write(d, "bad", BAD), "--wait",
                     "--disable-rollback", check=False)
    assert out.returncode == 1
    failures = d.json("stack", "failures", "list", "ev")
    assert [(f["resource_name"], f["action"], f["status"]) for f in failures] == [
        ("bad", "CREATE", "FAILED")]
    assert "bad" in failures[0]["reason"] and failures[0]["physical_id"]
    bad = d.json("stack", "event", "list", "ev", "--resource", "bad")
    assert [(e["action"], e["status"]) for e in bad] == [("CREATE", "IN_PROGRESS"),
                                                         ("CREATE", "FAILED")]
    assert bad[-1]["reason"] == failures[0]["reason"]
    assert d.json("stack", "failures", "list", "web") == []

    _follow(d)

    # Deleted with the stack.
    stack_id = _stack(d, "web").id
    d.sharectl("stack", "delete", "web", "--wait")
    out = d.sharectl("stack", "event", "list", "web", check=False)
    assert out.returncode == 2
    db, _ = database(d)
    try:
        assert stack_events.events(db, stack_id) == []
    finally:
        db.dispose()


def _follow(d):
    """--follow prints events as lines and ends when the stack does; Ctrl-C
    ends it with exit 0 and no traceback."""
    d.sharectl("stack", "create", "slow", "-t", _write(d, "slow", SLOW))
    out = d.sharectl("stack", "event", "list", "slow", "--follow", timeout=60)
    lines = out.stdout.splitlines()
    assert "[slow]: CREATE IN_PROGRESS" in lines[0], out.stdout
    assert "[s]: CREATE COMPLETE" in out.stdout
    assert lines[-1].endswith("[slow]: CREATE COMPLETE  Stack CREATE completed"), out.stdout

    d.sharectl("stack", "create", "hang", "-t", _write(d, "hang", SLOW.replace("  s:", "  h:")))
    proc = subprocess.Popen([tool("sharectl"), "--config-file", str(d.config), "stack", "event",
                             "list", "hang", "--follow"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the stack's CREATE IN_PROGRESS: following now
        assert "[hang]: CREATE IN_PROGRESS" in first
        proc.send_signal(signal.SIGINT)
        _rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    d.sharectl("stack", "cancel", "hang", "--no-rollback")
