"""Every operation of every resource type through sharectl --wait against real
share-manager processes; the dummy backend agrees with the database."""

from __future__ import annotations

import collections
import subprocess

import pytest

from tests.functional.harness import (
    SETUPS,
    Deployment,
    assert_backend_agrees,
    database,
    db_objects,
    intake,
    servers,
    wait_until,
)

pytestmark = pytest.mark.functional

BACKENDS = {
    "dummy": {},
    "dhss": {"share_driver": "dummy", "driver_handles_share_servers": "True"},
}


def _setup(deployment, request, **kw):
    return deployment(backends=BACKENDS, **servers(request), **kw)


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = _setup(deployment, request)
    d.sync()
    return d


def _id(d, *args):
    return d.sharectl(*args, "--wait", "-f", "value", "-c", "id").stdout.strip()


def _make(d, *args, status="available"):
    """Create through sharectl --wait; the row it prints has reached ``status``."""
    row = d.json(*args, "--wait")
    assert row["status"] == status, row
    return row["id"]


def test_every_operation(setup):
    d = setup
    d.start()
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "data", "--wait")
    assert share["status"] == "available" and share["export_locations"]
    assert any(loc["preferred"] for loc in share["export_locations"])
    share = share["id"]
    assert_backend_agrees(d)

    snap = _make(d, "snapshot", "create", share, "--name", "s1")
    clone = _make(d, "share", "create", "2", "--proto", "NFS", "--snapshot", snap)
    rep = d.json("replica", "create", share, "--wait")
    assert rep["status"] == "available" and rep["replica_state"] == "in_sync"
    replica = rep["id"]
    assert_backend_agrees(d)

    assert d.json("share", "extend", share, "4", "--wait")["size"] == 4
    shrunk = d.json("share", "shrink", share, "3", "--wait")
    assert shrunk["size"] == 3 and shrunk["status"] == "available"
    sizes = {o["id"]: o["size"] for o in d.backend("list")}
    assert sizes[shrunk["instance_id"]] == 3

    backup = _make(d, "backup", "create", share, "--name", "b1")
    _make(d, "backup", "restore", backup)
    server = _make(d, "share-server", "create", "--backend", "dhss", status="active")
    on_server = _make(d, "share", "create", "1", "--proto", "CIFS", "--backend", "dhss",
                      "--share-server", server)
    group = _make(d, "share-group", "create", "--name", "g")
    member = _make(d, "share", "create", "1", "--proto", "NFS", "--share-group", group)
    gsnap = _make(d, "group-snapshot", "create", group)
    # It holds its group's share, on the array too: the share is not deleted
    # under it (it used to be; Manila refuses that).
    assert d.json("group-snapshot", "show", gsnap)["members"] == [member]
    on_array = {o["id"]: o for o in d.backend("list")}
    assert on_array[gsnap]["details"]["members"] == [
        d.json("share", "show", member)["instance_id"]]
    out = d.sharectl("share", "delete", member, check=False)
    assert out.returncode == 2 and "is in 1 group snapshot(s)" in out.stderr, out.stderr
    statuses = {r["id"]: r["status"] for r in d.json("share", "list")}
    assert statuses[share] == "available"  # the backup and restore gave it back
    assert_backend_agrees(d)

    # Tear everything down, children first.
    for noun, ident in [("group-snapshot", gsnap), ("share", member), ("share-group", group),
                        ("share", on_server), ("share-server", server), ("backup", backup),
                        ("replica", replica), ("share", clone), ("snapshot", snap),
                        ("share", share)]:
        out = d.sharectl(noun, "delete", ident, "--wait")
        assert f"{noun} {ident} deleted" in out.stdout
    out = d.sharectl("share", "show", share, check=False)
    assert out.returncode == 2 and "no share" in out.stderr
    assert_backend_agrees(d)
    assert all(not objs for objs in db_objects(d).values())
    assert all(not objs for objs in (d.backend("list", backend=b) for b in BACKENDS))
    reqs = d.json("request", "list")
    assert reqs and all(r["status"] == "done" for r in reqs), reqs


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """One running deployment for the bad-input cases: a share of 2 GiB with
    a snapshot, and the requests written so far."""
    d = Deployment(tmp_path_factory.mktemp("bad-input") / "d", backends=BACKENDS)
    try:
        d.sync()
        d.start()
        share = _id(d, "share", "create", "2", "--proto", "NFS")
        _id(d, "snapshot", "create", share)
        yield d, share, d.json("request", "list")
    finally:
        d.stop_all()


BAD_INPUT = [
    (("share", "create", "-1", "--proto", "NFS"), "positive"),
    (("share", "create", "1", "--proto", "FTP"), "unknown protocol"),
    (("share", "create", "1", "--proto", "NFS", "--backend", "nope"), "unknown backend"),
    (("share", "create", "1", "--proto", "NFS", "--backend", "dhss"), "--share-server"),
    (("share", "shrink", "{share}", "5"), "only 2"),
    (("share", "extend", "{share}", "1"), "already 2"),
    (("share", "delete", "{share}"), "has snapshots"),
    (("share", "show", "no-such-id"), "no share"),
    (("share", "reset-state", "{share}", "--state", "bogus"), "valid: creating"),
    (("snapshot", "create", "no-such-id"), "no share"),
]


@pytest.mark.parametrize("args,needle", BAD_INPUT, ids=[n for _, n in BAD_INPUT])
def test_bad_input_changes_nothing(refusing, args, needle):
    d, share, before = refusing
    args = tuple(a.format(share=share) for a in args)
    out = d.sharectl(*args, check=False)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert needle in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert d.json("request", "list") == before


def test_an_operation_in_a_transient_status_changes_nothing(deployment):
    # No startup pass: on a loaded machine it could come after the
    # reset-state below and settle 'extending' before the extend is asked.
    d = deployment(backends=BACKENDS,
                   extra={"DEFAULT": {"startup_reconciliation_enabled": "false"}})
    d.sync()
    d.start()
    share = _id(d, "share", "create", "2", "--proto", "NFS")
    before = d.json("request", "list")
    d.sharectl("share", "reset-state", share, "--state", "extending")
    out = d.sharectl("share", "extend", share, "5", check=False)
    assert out.returncode == 2 and "'extending'" in out.stderr
    assert d.json("request", "list") == before


def test_error_status_exits_1(deployment):
    d = deployment(backends={"dummy": {"dummy_fail_methods": "extend_share"}})
    d.sync()
    d.start()
    share = _id(d, "share", "create", "1", "--proto", "NFS")
    out = d.sharectl("share", "extend", share, "2", "--wait", check=False)
    assert out.returncode == 1 and "extending_error" in out.stderr
    reqs = d.json("request", "list", "--resource", d.json("share", "show", share)["instance_id"])
    assert reqs[0]["status"] == "failed" and reqs[0]["error"]
    # The user message names the share (not its instance), the action, the detail.
    (msg,) = d.json("message", "list", "--resource", share)
    assert (msg["resource_type"], msg["resource_id"], msg["action_id"], msg["detail_id"]) == (
        "share", share, "003", "002")
    assert msg["user_message"].startswith("extend share: it failed")
    assert d.json("message", "show", msg["id"])["detail"] == reqs[0]["error"]
    d.sharectl("message", "delete", msg["id"])
    out = d.sharectl("message", "show", msg["id"], check=False)
    assert out.returncode == 2 and out.stderr == f"sharectl: error: no message {msg['id']}\n"
    assert d.json("message", "list") == []


def test_requests_written_while_no_manager_runs(deployment):
    d = deployment()
    d.sync()
    made = [d.json("share", "create", "1", "--proto", "NFS")["id"] for _ in range(3)]
    assert {d.json("share", "show", s)["status"] for s in made} == {"creating"}
    d.start()
    wait_until(lambda: {d.json("share", "show", s)["status"] for s in made} == {"available"},
               what="shares created after the manager started")
    assert_backend_agrees(d)


def test_sigterm_lets_running_calls_finish(deployment):
    d = deployment(backends={"dummy": {"dummy_method_delays": "create_share:2"}})
    d.sync()
    engine = d.start()
    share = d.json("share", "create", "1", "--proto", "NFS")["id"]
    wait_until(lambda: any(c["method"] == "create_share" for c in d.backend("calls")),
               what="create_share to start")
    assert engine.terminate() == 0
    assert d.json("share", "show", share)["status"] == "available"


def test_crash_mid_create_leaves_creating(deployment):
    d = deployment(backends={"dummy": {"dummy_crash_after": "create_share"}})
    d.sync()
    engine = d.start()
    share = d.json("share", "create", "1", "--proto", "NFS")["id"]
    assert engine.proc.wait(60) == 137
    shown = d.json("share", "show", share)
    assert shown["status"] == "creating"
    # The backend has it: the crash came after the backend change.
    assert shown["instance_id"] in {o["id"] for o in d.backend("list")}


def test_active_active_runs_each_request_once(deployment, pg_url, redis_url):
    d = deployment(db_url=pg_url, coordination_url=redis_url,
                   extra={"DEFAULT": {"request_workers": "4"}})
    d.sync()
    api = intake(d)
    db, _ = database(d)
    base = [api.create_share(1, "NFS", name=f"base{i}").id for i in range(100)]
    d.start()
    d.start()
    wait_until(lambda: _all_settled(d, base), timeout=120, what="base shares")
    # 200 mixed requests while both engines serve the host.
    for i in range(100):
        api.create_share(1, "NFS", name=f"new{i}")
    for share in base[:40]:
        api.resize_share(share, 2, extend=True)
    for share in base[40:80]:
        api.create_snapshot(share)
    for share in base[80:]:
        api.delete_share(share)
    done = {}

    def finished():
        rows = d.json("request", "list")
        done.update({r["id"]: r for r in rows})
        return len(rows) == 300 and all(r["status"] in ("done", "failed") for r in rows)

    wait_until(finished, timeout=240, interval=1, what="all requests")
    rows = list(done.values())
    assert all(r["status"] == "done" for r in rows), [r for r in rows if r["status"] != "done"]
    verb = {"create_share": "create", "extend_share": "extend",
            "create_snapshot": "create", "delete_share": "delete"}
    calls = [c for c in d.backend("calls") if c["method"] in verb]
    per_resource = collections.Counter((c["method"], c["resource_id"]) for c in calls)
    assert len(calls) == 300 and set(per_resource.values()) == {1}
    engines = {r["engine_id"] for r in rows}
    assert len(engines) == 2, "both engines took requests"
    by_request = {r["resource_id"] + r["action"]: r["engine_id"] for r in rows}
    for call in calls:
        assert by_request[call["resource_id"] + verb[call["method"]]] == call["engine_id"]
    assert_backend_agrees(d)
    db.dispose()


def _all_settled(d, shares):
    statuses = {s["id"]: s["status"] for s in d.json("share", "list")}
    return all(statuses.get(s) == "available" for s in shares)


def test_sharectl_help_needs_no_config(tmp_path):
    from tests.functional.harness import tool

    out = subprocess.run([tool("sharectl"), "--help"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0 and "share create" in out.stdout
