"""Manage and unmanage (manager/manage_ops.py) through sharectl against real
share-manager processes: shares, snapshots and share servers unmanaged stay on
the dummy backend, an orphan drift reports is adopted with `share manage`,
and a crash inside each of the six operations is settled after a restart as
the operation table says, with the user message it leaves."""

from __future__ import annotations

import json

import pytest
from sharemgr.cli.nouns import NOUNS
from sharemgr.drivers.dummy_state import BackendState

from tests.functional.harness import SETUPS, database, servers, wait_until

pytestmark = pytest.mark.functional

BACKENDS = {
    "dummy": {},
    "dhss": {"share_driver": "dummy", "driver_handles_share_servers": "True"},
}
FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request, tmp_path):
    """A deployment whose dummy backends wait at the gates in ``gates`` and
    crash after managing a share named ``crash-...``."""
    gates = tmp_path / "gates"
    gates.mkdir()
    backends = {name: {**opts, "dummy_gate_dir": str(gates)} for name, opts in BACKENDS.items()}
    backends["dummy"]["dummy_crash_after"] = "manage_existing.crash-"
    d = deployment(backends=backends, extra=FAST, **servers(request))
    d.sync()
    return d, gates


def _objects(d, backend="dummy"):
    """The dummy backend's objects by id (what `sharemgr-dummy-backend list`
    prints, read in this process: the test reads it often)."""
    with BackendState(d.sections[backend]["dummy_state_path"]).reading() as tx:
        return {o["id"]: o for o in tx.objects()}


def _gone(d, noun, ident):
    out = d.sharectl(noun, "show", ident, check=False)
    return out.returncode == 2 and f"no {noun}" in out.stderr


def _statuses(db, wanted):
    """What `sharectl <noun> show` says of each (noun, id), read in this process."""
    return {k: NOUNS[k[0]].status(db, k[1]) for k in wanted}


@pytest.mark.long(55)
def test_manage_unmanage_and_a_crash_inside_each(setup):
    d, gates = setup
    engine = d.start()
    share = d.json("share", "create", "2", "--proto", "NFS", "--name", "data", "--wait")
    inst = share["instance_id"]
    snap = d.json("snapshot", "create", share["id"], "--name", "s1", "--wait")

    # A share with a snapshot cannot be unmanaged; nothing is written.
    out = d.sharectl("share", "unmanage", share["id"], check=False)
    assert out.returncode == 2 and "has snapshots" in out.stderr

    # The snapshot: forgotten, kept on the backend, taken back by its location.
    out = d.sharectl("snapshot", "unmanage", snap["id"], "--wait")
    assert out.stdout == f"snapshot {snap['id']} unmanaged\n"
    assert _gone(d, "snapshot", snap["id"]) and snap["instance_id"] in _objects(d)
    again = d.json("snapshot", "manage", share["id"], snap["instance_id"], "--name", "s1b",
                   "--driver-option", "keep=yes", "--wait")
    assert (again["status"], again["size"], again["name"]) == ("available", 2, "s1b")
    obj = _objects(d)[again["instance_id"]]  # the backend object answers to the new ids
    assert obj["snapshot_id"] == again["id"] and obj["details"]["managed_with"] == {
        "keep": "yes"}
    d.sharectl("snapshot", "delete", again["id"], "--wait")

    # The share: forgotten, kept; drift reports it as an orphan, with the
    # export paths 'share manage' adopts it by.
    out = d.sharectl("share", "unmanage", share["id"], "--wait")
    assert out.stdout == f"share {share['id']} unmanaged\n"
    assert _gone(d, "share", share["id"]) and inst in _objects(d)
    (orphan,) = [i for i in d.json("reconcile", "drift") if i["kind"] == "orphan"]
    assert orphan["instance_id"] == inst and orphan["backend"]["size"] == 2
    path = share["export_locations"][0]["path"]
    assert path in orphan["backend"]["export_paths"]
    adopted = d.json("share", "manage", path, "--proto", "NFS", "--backend", "dummy",
                     "--name", "adopted", "--driver-option", "pool=a", "--wait")
    assert (adopted["status"], adopted["size"], adopted["name"]) == ("available", 2, "adopted")
    assert path in {loc["path"] for loc in adopted["export_locations"]}
    assert adopted["instance_id"] in _objects(d) and inst not in _objects(d)
    assert d.json("reconcile", "drift") == []  # nothing unclaimed any more
    # Managed, it is a share like any other: extend reaches the backend.
    assert d.json("share", "extend", adopted["id"], "3", "--wait")["size"] == 3
    assert _objects(d)[adopted["instance_id"]]["size"] == 3
    out = d.sharectl("share", "manage", path, "--proto", "NFS", "--backend", "dummy",
                     check=False)
    assert out.returncode == 2 and "already managed" in out.stderr

    # A share no manager made; the wrong protocol ends manage_error (exit 1)
    # with a user message; unmanaged from there, then managed right.
    made = d.backend("add-share", "--size", "4", "--proto", "CIFS", "--name", "legacy")
    cifs = made["export_locations"][0]["path"]
    out = d.sharectl("share", "manage", cifs, "--proto", "NFS", "--backend", "dummy",
                     "--wait", "-f", "json", check=False)
    assert out.returncode == 1 and "manage_error" in out.stderr
    bad = json.loads(out.stdout)  # the row is shown before the exit
    assert (bad["status"], bad["size"]) == ("manage_error", 0)
    (msg,) = d.json("message", "list", "--resource", bad["id"])
    assert (msg["action_id"], msg["detail_id"]) == ("007", "002")
    assert msg["user_message"].startswith("manage share: it failed")
    assert "is a CIFS share, not NFS" in d.json("message", "show", msg["id"])["detail"]
    d.sharectl("share", "unmanage", bad["id"], "--wait")
    legacy = d.json("share", "manage", cifs, "--proto", "CIFS", "--backend", "dummy",
                    "--wait")
    assert (legacy["status"], legacy["size"], legacy["name"]) == ("available", 4, None)
    assert _objects(d)[legacy["instance_id"]]["details"]["share_proto"] == "CIFS"

    # Share servers (DHSS): unmanage keeps it; manage by the backend's name.
    server = d.json("share-server", "create", "--backend", "dhss", "--wait")
    name = _objects(d, "dhss")[server["id"]]["details"]["server_name"]
    d.sharectl("share-server", "unmanage", server["id"], "--wait")
    assert _gone(d, "share-server", server["id"])
    taken = d.json("share-server", "manage", name, "--backend", "dhss", "--wait")
    assert taken["status"] == "active" and taken["backend_details"]["identifier"] == name
    assert taken["id"] in _objects(d, "dhss") and server["id"] not in _objects(d, "dhss")
    on_it = d.json("share", "create", "1", "--proto", "NFS", "--backend", "dhss",
                   "--share-server", taken["id"], "--wait")
    assert on_it["status"] == "available"
    out = d.sharectl("share-server", "unmanage", taken["id"], check=False)
    assert out.returncode == 2 and "in use" in out.stderr
    out = d.sharectl("share-server", "manage", name, "--backend", "dummy", check=False)
    assert out.returncode == 2 and "does not handle share servers" in out.stderr
    out = d.sharectl("share", "manage", "x:/y", "--proto", "NFS", "--backend", "dummy",
                     "--driver-option", "novalue", check=False)
    assert out.returncode == 2 and "not key=value" in out.stderr
    reqs = d.json("request", "list")
    assert [r for r in reqs if r["status"] not in ("done", "failed")] == []
    _crash_inside_each(d, gates, engine, legacy["id"], adopted["id"])


def _crash_inside_each(d, gates, engine, share, parent):
    """Five calls held at the dummy's gates and a sixth that crashes the
    engine after the backend change: after a restart the pass settles each
    as the operation table says, and each request leaves its message."""
    snap = d.json("snapshot", "create", parent, "--wait")["id"]
    loose = d.json("snapshot", "create", parent, "--wait")
    server = d.json("share-server", "create", "--backend", "dhss", "--wait")["id"]
    loose_server = d.json("share-server", "create", "--backend", "dhss", "--wait")["id"]
    d.sharectl("snapshot", "unmanage", loose["id"], "--wait")
    d.sharectl("share-server", "unmanage", loose_server, "--wait")
    path = d.backend("add-share", "--size", "5", "--proto", "NFS")["export_locations"][0]["path"]

    held = ("unmanage", "unmanage_snapshot", "manage_existing_snapshot", "unmanage_server",
            "manage_server")
    for method in held:
        (gates / method).touch()
    d.sharectl("share", "unmanage", share)
    d.sharectl("snapshot", "unmanage", snap)
    snap2 = d.json("snapshot", "manage", parent, loose["instance_id"])["id"]
    d.sharectl("share-server", "unmanage", server)
    server2 = d.json("share-server", "manage", loose_server, "--backend", "dhss")["id"]

    def waiting():
        calls = []
        for backend in BACKENDS:
            with BackendState(d.sections[backend]["dummy_state_path"]).reading() as tx:
                calls += tx.calls()
        return {c["method"] for c in calls} >= set(held)
    wait_until(waiting, what="the five calls at their gates")
    adopted = d.json("share", "manage", path, "--proto", "NFS", "--backend", "dummy",
                     "--name", "crash-me")["id"]
    assert engine.proc.wait(60) == 137  # crashed right after manage_existing's change

    expected = {("share", share): "unmanage_starting", ("snapshot", snap): "unmanage_starting",
                ("snapshot", snap2): "manage_starting",
                ("share-server", server): "unmanage_starting",
                ("share-server", server2): "manage_starting",
                ("share", adopted): "manage_starting"}
    db, _ = database(d)
    assert _statuses(db, expected) == expected

    for gate in gates.iterdir():
        gate.unlink()
    d.start()  # the crash point stays: the pass does not call manage again
    # Neither can be resumed without the call's context (specs/002): each
    # manage ends manage_error, each unmanage unmanage_error.
    settled = {("share", share): "unmanage_error", ("snapshot", snap): "unmanage_error",
               ("snapshot", snap2): "manage_error", ("share-server", server): "unmanage_error",
               ("share-server", server2): "manage_error", ("share", adopted): "manage_error"}

    wait_until(lambda: _statuses(db, settled) == settled, timeout=60,
               what="the pass settling all six")
    db.dispose()
    # Each request was abandoned and left a message: engine stopped (003),
    # the action manage (007) or unmanage (008).
    messages = {m["resource_id"]: m for m in d.json("message", "list")}
    assert {ident: (messages[ident]["action_id"], messages[ident]["detail_id"])
            for _, ident in settled} == {
        share: ("008", "003"), snap: ("008", "003"), snap2: ("007", "003"),
        server: ("008", "003"), server2: ("007", "003"), adopted: ("007", "003")}
    # From unmanage_error an unmanage is asked again, and goes through.
    d.sharectl("share", "unmanage", share, "--wait")
    assert _gone(d, "share", share)
    # A manage_error record is unmanaged; what the driver had taken over
    # before the crash stays on the backend, drift reports it, and it is
    # managed again by the export path drift names.
    d.sharectl("share", "unmanage", adopted, "--wait")
    [orphan] = [i for i in d.json("reconcile", "drift")
                if i["kind"] == "orphan" and i["backend"].get("size") == 5]
    again = d.json("share", "manage", orphan["backend"]["export_paths"][0], "--proto", "NFS",
                   "--backend", "dummy", "--name", "recovered", "--wait")
    assert (again["status"], again["size"]) == ("available", 5)
