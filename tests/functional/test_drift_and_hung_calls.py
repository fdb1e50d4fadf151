"""Drift and hung calls through the daemon (issue 16, "Observe reality"):
leases tell a stuck operation from a slow one, and the periodic pass settles
the stuck one while the engine stays up; drift of every kind is handled by
its policy (a bad policy stops the start), a stack check finds drift and
converge repairs it, and a self-healing stack repairs itself."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import pytest
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec

from tests.functional.harness import database, intake, wait_until
from tests.functional.test_reconcile_parity import DATABASES, deployment_servers

pytestmark = pytest.mark.functional


@pytest.fixture(params=DATABASES)
def servers(request) -> dict:
    return deployment_servers(request, request.param)


def _status(db, share_id: str) -> str:
    from sharemgr.cli.nouns import NOUNS

    return NOUNS["share"].status(db, share_id)


def _show(db, share_id: str) -> Mapping[str, object]:
    """What `sharectl share show` prints (in-process: each sharectl costs a
    second or two here)."""
    from sharemgr.cli.nouns import NOUNS

    return NOUNS["share"].show(db, share_id)


def _gated(deployment, servers, **defaults):
    # A host of its own: engines of other tests on the shared Redis that
    # leave its group would otherwise be this host's peers (peer passes).
    d = deployment(**servers, host="observe-lease", extra={"DEFAULT": {
        "startup_reconciliation_wait_seconds": "0",
        "periodic_reconciliation_interval": "1", **defaults}})
    gates = d.root / "gates"
    gates.mkdir()
    d.sections["dummy"].update(dummy_gate_dir=str(gates), dummy_gate_poll_interval="0.02")
    d.write_config()
    d.sync()
    return d, gates


def _reached(d, method: str, resource: str) -> bool:
    return any(c["method"] == method for c in d.backend("calls", "--resource", resource))


def test_hung_call_settled_by_the_periodic_pass_slow_call_left_alone(deployment, servers):
    """A create held at the gate past its 2 s lease is settled by a periodic
    pass (the rule of 'creating': not on the backend → error) while the
    engine stays up; an extend held at its gate the whole time, under the
    default one-hour deadline and a lease renewed 2 s ahead while it runs, is
    skipped by that pass and finishes once let go."""
    d, gates = _gated(deployment, servers, operation_heartbeat_seconds="2",
                      operation_lease_seconds_by_method="create_share:2")
    engine = d.start()
    db, _ = database(d)
    api = intake(d)
    slow = api.create_share(1, "NFS", name="slow-1").id
    wait_until(lambda: _status(db, slow) == vocab.AVAILABLE, what="slow-1 available")
    slow_inst = db_api.request_list(db, resource_id=slow)[0].resource_id
    (gates / "extend_share.slow-").touch()
    api.resize_share(slow, 2, extend=True)
    wait_until(lambda: _reached(d, "extend_share", slow_inst), what="extend at its gate")

    def extend_lease():
        reqs = [r for r in db_api.request_list(db, resource_id=slow_inst)
                if r.status == vocab.REQUEST_RUNNING and r.lease_expires_at]
        return reqs[0].lease_expires_at if reqs else None

    # The slow call's lease is a heartbeat ahead, renewed while it runs.
    first = wait_until(extend_lease, what="the extend's lease")
    assert first < models.utcnow() + datetime.timedelta(seconds=60)
    wait_until(lambda: extend_lease() > first, what="the extend's lease renewed")

    (gates / "create_share.hung-").touch()
    hung = api.create_share(1, "NFS", name="hung-1").id
    wait_until(lambda: _status(db, hung) == vocab.ERROR, what="the hung create settled")
    assert engine.proc.poll() is None
    req = db_api.request_list(db, resource_id=hung)[0]
    assert req.status == vocab.REQUEST_ABANDONED and "lease expired" in req.error
    # The pass that settled it, not the newest: with a pass a second, later
    # ones (nothing stuck) may have finished by now.
    settling = wait_until(lambda: [p for p in db_rec.passes(db, trigger="periodic", limit=1000)
                                   if p.finished_at and p.summary.get("stuck_requests")],
                          what="the periodic pass recorded")
    assert len(settling) == 1
    record = settling[0]
    assert record.summary["stuck_requests"] == 1
    assert record.summary["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.ERROR: 1}}
    assert record.summary["skipped"].get("in progress") == 1  # the slow extend
    assert _status(db, slow) == vocab.EXTENDING

    # The slow call finishes; the hung one, let go, is refused by the backend
    # (the pass asked about the share with a newer fencing token): the share
    # the pass found missing does not appear behind its error row.
    (gates / "extend_share.slow-").unlink()
    (gates / "create_share.hung-").unlink()
    wait_until(lambda: _status(db, slow) == vocab.AVAILABLE, what="the slow extend")
    assert db_api.get(db, models.Share, slow).size == 2
    engine.wait_for_log("refused the call as fenced")
    hung_inst = db_api.request_list(db, resource_id=hung)[0].resource_id
    assert hung_inst not in {o["id"] for o in d.backend("list")}
    assert _status(db, hung) == vocab.ERROR
    assert db_api.request_list(db, resource_id=hung)[0].status == vocab.REQUEST_ABANDONED
    assert engine.proc.poll() is None
    db.dispose()


MOVED = '[{"path": "10.9.9.9:/moved", "is_admin_only": false, "preferred": true}]'


def _drift(d, *args) -> dict[tuple[str, str], dict]:
    """`sharectl reconcile drift` by (kind, instance id)."""
    return {(i["kind"], i["instance_id"]): i for i in d.json("reconcile", "drift", *args)}


def _restart(d, engine, **policy):
    engine.terminate()
    d.sections["DEFAULT"].update(policy)
    d.write_config()
    return d.start()


def test_drift_every_kind_and_policy(deployment, servers):
    """Each kind of drift, made behind the manager's back with the dummy
    backend's set/remove (and an orphan a forced delete left), is found; the
    default policy only reports it; then 'error' and 'correct' (on demand)
    and 'error' for size and exports (the periodic check)."""
    d = deployment(**servers, host="observe-drift",
                   extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "0"}},
                   backends={"dummy": {"dummy_fail_methods": "delete_share.orphan-"}})
    d.sync()
    engine = d.start()
    db, _ = database(d)
    api = intake(d)
    ids = {n: api.create_share(1, "NFS", name=n).id for n in ("gone", "big", "moved", "orphan-1")}
    wait_until(lambda: all(_status(db, s) == vocab.AVAILABLE for s in ids.values()),
               what="shares available")
    inst = {n: _show(db, s)["instance_id"] for n, s in ids.items()}
    assert _drift(d) == {}  # the backend agrees
    api.delete_share(ids["orphan-1"], force=True)  # the driver fails: the object stays
    wait_until(lambda: _status(db, ids["orphan-1"]) == vocab.DELETED, what="forced delete")
    d.backend("remove", inst["gone"])
    d.backend("set", inst["big"], "size=3")
    d.backend("set", inst["moved"], f"export_locations={MOVED}")

    # report (the default): found, recorded, nothing else changes.
    dry = _drift(d, "--dry-run")
    assert set(dry) == {("missing", inst["gone"]), ("size", inst["big"]),
                        ("export_locations", inst["moved"]), ("orphan", inst["orphan-1"])}
    assert {i["action"] for i in dry.values()} == {"would report"}
    assert _show(db, ids["big"])["drift"] is None  # a dry run records nothing
    found = _drift(d)
    assert found[("size", inst["big"])]["database"] == 1
    assert found[("size", inst["big"])]["backend"] == 3
    assert {i["action"] for i in found.values()} == {"report"}
    big = d.json("share", "show", ids["big"])  # the drift is shown
    assert (big["status"], big["size"]) == ("available", 1)
    assert big["drift"]["found"]["size"]["backend"] == 3
    assert _show(db, ids["gone"])["drift"]["found"]["missing"]["action"] == "report"
    assert engine.wait_for_log("drift: orphan on") is None
    rec = db_rec.passes(db, trigger=None, limit=1)[0]
    assert rec.trigger.startswith("drift:") and rec.summary["drift"] == {
        "missing": 1, "size": 1, "export_locations": 1, "orphan": 1}

    # error for missing, correct for size and exports.
    engine = _restart(d, engine, drift_policy="missing:error,size:correct,"
                      "export_locations:correct")
    found = _drift(d)
    assert {k: i["action"] for k, i in found.items()} == {
        ("missing", inst["gone"]): "error", ("size", inst["big"]): "corrected",
        ("export_locations", inst["moved"]): "corrected", ("orphan", inst["orphan-1"]): "report"}
    assert _status(db, ids["gone"]) == vocab.ERROR
    big, moved = (_show(db, ids[n]) for n in ("big", "moved"))
    assert (big["status"], big["size"]) == ("available", 3)
    assert [e["path"] for e in moved["export_locations"]] == ["10.9.9.9:/moved"]
    # Corrected, the backend agrees: the next check clears the records.
    assert set(_drift(d)) == {("orphan", inst["orphan-1"])}
    assert _show(db, ids["big"])["drift"] is None

    # error for size and exports, by the periodic check.
    d.backend("set", inst["big"], "size=4")
    d.backend("set", inst["moved"], "export_locations=[]")
    engine = _restart(d, engine, drift_policy="size:error,export_locations:error",
                      drift_check_interval="1")
    wait_until(lambda: _status(db, ids["big"]) == vocab.ERROR
               and _status(db, ids["moved"]) == vocab.ERROR, what="periodic drift check")

    def recorded() -> list:
        # The pass's record is finished after its writes, and with checks
        # every second a newer pass may be running: the finished ones.
        return [p.summary["actions"] for p in db_rec.passes(db, trigger="drift", limit=20)
                if p.finished_at is not None and p.summary.get("actions")]

    wait_until(lambda: any(a.get("error") for a in recorded()), what="the drift pass recorded")
    assert [a["error"] for a in recorded() if a.get("error")][-1] == 2  # both, in one pass
    assert _show(db, ids["big"])["size"] == 3
    assert engine.proc.poll() is None
    db.dispose()


def test_drift_of_replicas_and_snapshots(deployment, servers):
    """Replicas and snapshots are checked too (drift.TARGETS): a replica
    moved and a snapshot resized are corrected, a snapshot removed behind
    the manager's back is marked error; each is shown by its show command;
    a replica's size is compared with its share's and reported, never
    corrected (issue 30: a replica that differs needs an operator)."""
    d = deployment(**servers, host="observe-drift-more",
                   extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "0",
                                      "drift_policy": "missing:error,size:correct,"
                                                      "export_locations:correct"}})
    d.sync()
    d.start()
    db, _ = database(d)
    api = intake(d)
    share = api.create_share(1, "NFS", name="more").id
    wait_until(lambda: _status(db, share) == vocab.AVAILABLE, what="share available")
    replica = api.create_replica(share).id
    snaps = [api.create_snapshot(share, name=n).id for n in ("snap-big", "snap-gone")]

    def snapshot(ident):
        from sharemgr.cli.nouns import NOUNS

        return NOUNS["snapshot"].show(db, ident)

    def replica_row():
        from sharemgr.cli.nouns import NOUNS

        return NOUNS["replica"].show(db, replica)

    wait_until(lambda: replica_row()["status"] == vocab.AVAILABLE
               and all(snapshot(s)["status"] == vocab.AVAILABLE for s in snaps),
               what="replica and snapshots available")
    assert _drift(d) == {}
    d.backend("set", replica, f"export_locations={MOVED}", "size=7")
    d.backend("set", snaps[0], "size=5")
    d.backend("remove", snaps[1])

    found = {(i["kind"], i["resource_type"]): i for i in d.json("reconcile", "drift")}
    assert set(found) == {("export_locations", "replica"), ("size", "replica"),
                          ("size", "snapshot"), ("missing", "snapshot")}
    assert found[("size", "snapshot")]["snapshot_id"] == snaps[0]
    assert {k: i["action"] for k, i in found.items()} == {
        ("export_locations", "replica"): "corrected", ("size", "replica"): "report",
        ("size", "snapshot"): "corrected", ("missing", "snapshot"): "error"}
    assert (found[("size", "replica")]["database"], found[("size", "replica")]["backend"]) \
        == (1, 7)
    assert [e["path"] for e in replica_row()["export_locations"]] == ["10.9.9.9:/moved"]
    assert replica_row()["drift"]["found"]["export_locations"]["action"] == "corrected"
    big, gone = snapshot(snaps[0]), snapshot(snaps[1])
    assert (big["status"], big["size"]) == (vocab.AVAILABLE, 5)
    assert big["drift"]["found"]["size"] == {"database": 1, "backend": 5,
                                             "policy": "correct", "action": "corrected"}
    assert gone["status"] == vocab.ERROR and "missing" in gone["drift"]["found"]
    assert _status(db, share) == vocab.AVAILABLE  # the share itself agrees
    d.backend("set", replica, "size=1")  # what an operator does about the replica
    # Corrected, they agree now: the next check finds nothing and clears.
    assert _drift(d) == {}
    assert snapshot(snaps[0])["drift"] is None and replica_row()["drift"] is None
    db.dispose()


def test_bad_drift_policy_stops_the_start(deployment):
    d = deployment(extra={"DEFAULT": {"drift_policy": "orphan:error"}})
    d.sync()
    out = d.run_manager()
    assert out.returncode == 1
    assert "drift_policy: 'orphan' cannot be 'error' (allowed: report)" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr + out.stdout


STACK = """
resources:
  data:
    type: share
    properties: {size: 1, proto: NFS}
  logs:
    type: share
    properties: {size: 2, proto: NFS}
"""


def test_stack_check_finds_drift_and_converge_repairs_it(deployment, servers):
    """A share of a stack removed out of band, another resized and a
    snapshot removed: 'stack check' marks the stack CHECK FAILED naming the
    three; 'stack converge' recreates the missing share and snapshot and
    resizes the other share back, and a second check completes."""
    d = deployment(**servers, host="observe-stack",
                   extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "0"}})
    d.sync()
    d.start()
    db, _ = database(d)
    template = d.root / "web.yaml"
    template.write_text(STACK + "  snap:\n    type: snapshot\n"
                                "    properties: {share: {get_resource: logs}}\n")
    d.sharectl("stack", "create", "web", "-t", str(template), "--wait")
    assert d.json("stack", "check", "web")["status"] == "COMPLETE"
    phys = {r["name"]: r["physical_id"] for r in d.json("stack", "resource", "list", "web")}
    inst = {n: _show(db, phys[n])["instance_id"] for n in ("data", "logs")}
    d.backend("remove", inst["data"])
    d.backend("set", inst["logs"], "size=5")
    d.backend("remove", phys["snap"])

    out = d.sharectl("stack", "check", "web", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "stack web CHECK FAILED: drifted: data (missing); logs (size 2 on record, " \
           "5 on the backend); snap (missing)" in out.stderr
    assert "Traceback" not in out.stderr
    # The traversal the check looked at completed: its progress stays whole.
    shown = d.json("stack", "show", "web")
    assert (shown["action"], shown["status"], shown["progress"]) == ("CHECK", "FAILED", "3/3")
    assert _show(db, phys["data"])["status"] == vocab.ERROR
    assert _show(db, phys["logs"])["size"] == 5  # the backend's truth, for the converge

    shown = d.json("stack", "converge", "web", "--wait")
    assert (shown["action"], shown["status"]) == ("UPDATE", "COMPLETE")
    after = {r["name"]: r["physical_id"] for r in d.json("stack", "resource", "list", "web")
             if r["action"] != "DELETE"}
    assert after["logs"] == phys["logs"] and after["data"] != phys["data"]
    assert after["snap"] != phys["snap"]
    objects = {o["id"]: o for o in d.backend("list")}
    assert after["snap"] in {o.get("snapshot_id") for o in objects.values()}
    assert objects[_show(db, after["data"])["instance_id"]]["size"] == 1
    assert objects[inst["logs"]]["size"] == 2
    assert _show(db, phys["logs"])["size"] == 2
    assert d.json("stack", "check", "web")["status"] == "COMPLETE"
    db.dispose()


def test_a_self_healing_stack_repairs_itself(deployment):
    """A stack whose template sets converge_interval: a share removed on the
    backend is found by the engine's own check and the stack converges
    (CHECK FAILED, then an UPDATE that recreates the share)."""
    d = deployment(host="observe-heal", extra={"DEFAULT": {
        "startup_reconciliation_wait_seconds": "0", "stack_watchdog_interval": "0.5"}})
    d.sync()
    d.start()
    db, _ = database(d)
    template = d.root / "healing.yaml"
    template.write_text("converge_interval: 1\n" + STACK)
    d.sharectl("stack", "create", "healing", "-t", str(template), "--wait")
    phys = {r["name"]: r["physical_id"]
            for r in d.json("stack", "resource", "list", "healing")}
    d.backend("remove", _show(db, phys["data"])["instance_id"])

    def healed():
        shown = d.json("stack", "show", "healing")
        if (shown["action"], shown["status"]) != ("UPDATE", "COMPLETE"):
            return None
        return {r["name"]: r["physical_id"]
                for r in d.json("stack", "resource", "list", "healing")
                if r["action"] != "DELETE"}

    after = wait_until(healed, timeout=60, interval=0.5, what="the stack to heal itself")
    assert after["data"] != phys["data"] and after["logs"] == phys["logs"]
    assert _show(db, after["data"])["instance_id"] in {o["id"] for o in d.backend("list")}
    assert "stack healing drifted (data (missing)): converging" in d.engines[0].text()
    db.dispose()
