"""Revert to snapshot, replica promotion and resync, replica-aware resize
(issue 30) through sharectl and real share-manager processes, on SQLite and
PostgreSQL + Redis: one daemon walking the commands, then a crash inside a
revert, one inside a promotion and one inside a resync (the dummy's crash
points, by name), each settled by the next engine's startup pass and told in
a user message."""

from __future__ import annotations

import pytest

from tests.functional.harness import SETUPS, servers, wait_until

pytestmark = pytest.mark.functional

FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(extra=FAST, **servers(request))
    d.sync()
    return d


def _objects(d) -> dict[str, dict]:
    return {o["id"]: o for o in d.backend("list")}


def _crashing(d, tmp_path, name: str, knob: str):
    conf = d.write_config(tmp_path / f"{name}.conf", dummy={"dummy_crash_after": knob})
    return d.start(config=conf, name=name)


def test_revert_promote_resync_and_their_crashes(setup, tmp_path):
    d = setup
    engine = _crashing(d, tmp_path, "first", "revert_to_snapshot.crashsnap")

    # Revert: only to the latest snapshot, of the share's size.
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "data", "--wait")
    s1 = d.json("snapshot", "create", share["id"], "--name", "s1", "--wait")["id"]
    s2 = d.json("snapshot", "create", share["id"], "--name", "s2", "--wait")["id"]
    out = d.sharectl("share", "revert", s1, check=False)
    assert out.returncode == 2 and f"only the share's latest snapshot ({s2})" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    reverted = d.json("share", "revert", s2, "--wait")
    assert (reverted["id"], reverted["status"]) == (share["id"], "available")
    assert d.json("snapshot", "show", s2)["status"] == "available"
    snap_inst = d.json("snapshot", "show", s2)["instance_id"]
    assert _objects(d)[share["instance_id"]]["details"]["reverted_to"] == snap_inst

    # Extend reaches the replica on the backend; drift compares replica sizes.
    rep = d.json("replica", "create", share["id"], "--wait")["id"]
    assert d.json("share", "extend", share["id"], "3", "--wait")["size"] == 3
    objs = _objects(d)
    assert (objs[share["instance_id"]]["size"], objs[rep]["size"]) == (3, 3)
    d.backend("set", rep, "size=2")
    (found,) = d.json("reconcile", "drift", "--dry-run")
    assert (found["kind"], found["instance_id"], found["database"], found["backend"]) == (
        "size", rep, 3, 2)
    d.backend("set", rep, "size=3")

    # Promote: the replica becomes active, the old active a replica; the
    # new active serves the share's rules.
    rule = d.json("access", "allow", share["id"], "--type", "ip", "--to", "10.0.0.0/24",
                  "--wait")
    promoted = d.json("replica", "promote", rep, "--wait")
    assert [r["id"] for r in _objects(d)[rep]["details"]["access_rules"]] == [rule["id"]]
    assert (promoted["status"], promoted["replica_state"]) == ("available", "active")
    states = {r["id"]: r["replica_state"] for r in d.json("replica", "list")}
    assert states == {rep: "active", share["instance_id"]: "in_sync"}
    assert d.json("share", "show", share["id"])["instance_id"] == rep
    assert _objects(d)[rep]["replica_state"] == "active"

    # Resync: the backend's state, asked now.
    old = share["instance_id"]
    d.backend("set", old, "replica_state=out_of_sync")
    assert d.json("replica", "resync", old, "--wait")["replica_state"] == "out_of_sync"
    out = d.sharectl("replica", "promote", "no-such-id", check=False)
    assert out.returncode == 2 and "no replica with id 'no-such-id'" in out.stderr
    # The old active holds the share's snapshots: not deleted under them.
    for extra in ((), ("--force",)):
        out = d.sharectl("replica", "delete", old, *extra, check=False)
        assert out.returncode == 2 and f"replica {old} holds snapshots" in out.stderr, \
            out.stderr
    assert d.json("replica", "show", old)["status"] == "available"

    # A crash inside a revert: the spec's outcome, the share and its
    # snapshot error (what a revert cut short left is unknown).
    crashy = d.json("share", "create", "1", "--proto", "NFS", "--name", "crashy", "--wait")
    snap = d.json("snapshot", "create", crashy["id"], "--name", "crashsnap", "--wait")["id"]
    d.sharectl("share", "revert", snap)
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    assert d.json("share", "show", crashy["id"])["status"] == "reverting"
    assert d.json("snapshot", "show", snap)["status"] == "restoring"
    engine = _crashing(d, tmp_path, "second", "promote_replica.crashy")
    wait_until(lambda: d.json("share", "show", crashy["id"])["status"] == "error",
               timeout=60, what="the revert settled by the startup pass")
    assert d.json("snapshot", "show", snap)["status"] == "error"
    (msg,) = d.json("message", "list", "--resource", crashy["id"])
    assert (msg["action_id"], msg["detail_id"]) == ("009", "003")
    assert msg["user_message"].startswith("revert to snapshot share:")

    # A crash inside a promotion, after the backend promoted: the spec's
    # outcome, the replica error; the old active stays the share's instance.
    d.sharectl("share", "reset-state", crashy["id"], "--state", "available")
    crashy_rep = d.json("replica", "create", crashy["id"], "--wait")["id"]
    d.sharectl("replica", "promote", crashy_rep)
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    assert d.json("replica", "show", crashy_rep)["status"] == "replication_change"
    engine = d.start()
    wait_until(lambda: d.json("replica", "show", crashy_rep)["status"] == "error",
               timeout=60, what="the promotion settled by the startup pass")
    states = {r["id"]: r["replica_state"] for r in d.json("replica", "list")
              if r["share_id"] == crashy["id"]}
    assert states[crashy["instance_id"]] == "active", states
    (msg,) = d.json("message", "list", "--resource", crashy_rep)
    assert (msg["action_id"], msg["detail_id"]) == ("010", "003")

    # A crash inside a resync: nothing transient to settle (the replica's
    # status does not move); the request is abandoned and a message says so.
    crashz = d.json("share", "create", "1", "--proto", "NFS", "--name", "crashz", "--wait")
    crashz_rep = d.json("replica", "create", crashz["id"], "--wait")["id"]
    engine.terminate()
    engine = _crashing(d, tmp_path, "third", "update_replica_state.crashz")
    d.sharectl("replica", "resync", crashz_rep)
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    engine = d.start()
    wait_until(lambda: d.json("message", "list", "--resource", crashz_rep), timeout=60,
               what="the resync's message")
    assert d.json("replica", "show", crashz_rep)["status"] == "available"
    (msg,) = d.json("message", "list", "--resource", crashz_rep)
    assert (msg["action_id"], msg["detail_id"]) == ("011", "003")
    reqs = [r for r in d.json("request", "list") if r["status"] == "abandoned"]
    assert sorted(r["action"] for r in reqs) == ["promote", "resync", "revert"]

    # A resync changes no status: --wait waits for its request (with no
    # engine to take it: exit 1, where it once returned the old state at once).
    engine.terminate()
    out = d.sharectl("replica", "resync", crashz_rep, "--wait", "--timeout", "1", check=False)
    assert out.returncode == 1 and "no share-manager took the request" in out.stderr, out
    assert "Traceback" not in out.stderr
