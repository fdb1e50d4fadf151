"""Share migration between two dummy backends (issue 46), through sharectl
and real share-manager processes, on SQLite and on PostgreSQL + Redis:
start, show, complete (the share on the destination with its rules, the
source gone from its backend), cancel (the share as it was), the refusals
(exit 2, nothing written), and SIGKILL of the engine inside the start and
inside the complete, each settled by the next engine's periodic task."""

from __future__ import annotations

import pytest

from tests.functional.harness import SETUPS, servers, wait_until

pytestmark = pytest.mark.functional

BACKENDS = {"alpha": {"share_driver": "dummy"}, "beta": {"share_driver": "dummy"},
            # A destination that cannot make shares: a start that fails.
            "broken": {"share_driver": "dummy", "dummy_fail_methods": "create_share"}}
FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2",
                    "migration_continue_interval": "1", "backend_stats_interval": "1"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(backends=BACKENDS, extra=FAST, **servers(request))
    d.sync()
    return d


def _objects(d, backend: str) -> dict[str, dict]:
    return {o["id"]: o for o in d.backend("list", backend=backend)}


def _refused(d, *args: str) -> str:
    """Exit 2, one line, nothing written (every write of the intake comes
    with a request)."""
    before = d.json("request", "list")
    out = d.sharectl(*args, check=False)
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert out.stderr.startswith("sharectl: error:") and out.stderr.count("\n") == 1, out.stderr
    assert d.json("request", "list") == before
    return out.stderr


def _new_share(d, name: str) -> dict:
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", name,
                   "--backend", "alpha", "--wait")
    d.sharectl("access", "allow", share["id"], "--type", "ip", "--to", "10.0.0.1", "--wait")
    return share


def _ready(d) -> None:
    # Both backends have reported: the destination is known.
    wait_until(lambda: {b["backend"] for b in d.json("backend", "list")} >= set(BACKENDS),
               timeout=30, what="every backend's report")


@pytest.mark.long(45)
def test_migrate_complete_cancel_and_refusals(setup):
    d = setup
    d.start()
    _ready(d)
    beta = f"{d.host}@beta"
    share = _new_share(d, "moving")
    sid, src = share["id"], share["instance_id"]

    # Bad input: one line, exit 2, nothing written.
    assert "unknown destination" in _refused(d, "share", "migration", "start", sid,
                                             "nohost@beta")
    assert "is on hostA@alpha already" in _refused(d, "share", "migration", "start", sid,
                                                   f"{d.host}@alpha")
    assert "invalid destination" in _refused(d, "share", "migration", "start", sid, "beta")
    assert "preserve-snapshots" in _refused(d, "share", "migration", "start", sid, beta,
                                            "--preserve-snapshots")
    assert "cannot keep the share writable" in _refused(
        d, "share", "migration", "start", sid, beta, "--force-host-assisted", "--writable")
    assert "copies on one host" in _refused(d, "share", "migration", "start", sid,
                                            "elsewhere@beta", "--force-host-assisted")
    assert "no share with id" in _refused(d, "share", "migration", "start", "nope", beta)
    assert "it is not migrating" in _refused(d, "share", "migration", "complete", sid)
    assert "never been migrated" in _refused(d, "share", "migration", "show", sid)

    # Phase 1: the share stays on its source, migrating.
    shown = d.json("share", "migration", "start", sid, beta, "--writable", "--wait")
    assert (shown["task_state"], shown["total_progress"]) == (
        "migration_driver_phase1_done", "100%"), shown
    assert (shown["source_host"], shown["destination_host"]) == (f"{d.host}@alpha", beta)
    dest = shown["destination_instance_id"]
    row = d.json("share", "show", sid)
    assert (row["status"], row["host"], row["instance_id"]) == ("migrating", f"{d.host}@alpha",
                                                                src)
    assert (row["task_state"], row["progress"]) == ("migration_driver_phase1_done", "100%")
    assert _objects(d, "beta")[dest]["status"] == "migrating_to"
    assert "migrating" in _refused(d, "share", "extend", sid, "2")
    assert "cancel its migration first" in _refused(d, "share", "delete", sid, "--force")
    assert "its status is 'migrating'" in _refused(d, "share", "migration", "start", sid, beta)

    # Phase 2: the share is the destination's, with its rules; the source
    # is gone from its backend.
    done = d.json("share", "migration", "complete", sid, "--wait")
    assert done["task_state"] == "migration_success", done
    wait_until(lambda: d.json("share", "show", sid)["access_rules_status"] == "active",
               timeout=30, what="the rules on the destination")
    row = d.json("share", "show", sid)
    assert (row["status"], row["host"], row["instance_id"]) == ("available", beta, dest)
    assert row["export_locations"][0]["path"] == f"{d.host}.beta.dummy:/shares/{dest}"
    assert src not in _objects(d, "alpha")
    moved = _objects(d, "beta")[dest]
    assert moved["status"] == "available"
    assert [r["access_to"] for r in moved["details"]["access_rules"]] == ["10.0.0.1"]
    assert [r["state"] for r in d.json("access", "list", sid)] == ["active"]
    # And it works there.
    assert d.json("share", "extend", sid, "2", "--wait")["size"] == 2

    # Cancel: the destination goes, the share is as it was.
    other = _new_share(d, "staying")
    shown = d.json("share", "migration", "start", other["id"], beta, "--wait")
    gone = shown["destination_instance_id"]
    assert gone in _objects(d, "beta")
    cancelled = d.json("share", "migration", "cancel", other["id"], "--wait")
    assert cancelled["task_state"] == "migration_cancelled", cancelled
    row = d.json("share", "show", other["id"])
    assert (row["status"], row["host"]) == ("available", f"{d.host}@alpha")
    assert gone not in _objects(d, "beta") and other["instance_id"] in _objects(d, "alpha")
    assert "it is not migrating" in _refused(d, "share", "migration", "cancel", other["id"])

    # A start that fails says why, and the share stays on its source.
    out = d.sharectl("share", "migration", "start", other["id"], f"{d.host}@broken",
                     "--force-host-assisted", "--wait", check=False)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "ended in task_state migration_error" in out.stderr, out.stderr
    assert "create_share" in out.stderr, out.stderr
    assert d.json("share", "show", other["id"])["status"] == "available"

    # An admin resets the destination of a migration that waits for its
    # complete: the share stays on its source, available again.
    third = _new_share(d, "reset")
    shown = d.json("share", "migration", "start", third["id"], beta, "--wait")
    d.sharectl("share-instance", "reset-state", shown["destination_instance_id"],
               "--state", "error")
    wait_until(lambda: d.json("share", "show", third["id"])["status"] == "available",
               timeout=30, what="the share available on its source")
    row = d.json("share", "show", third["id"])
    assert (row["host"], row["task_state"]) == (f"{d.host}@alpha", "migration_error"), row
    # The destination left in error is the admin's to remove, and the share's
    # delete says so until it is gone.
    dest = shown["destination_instance_id"]
    refused = d.sharectl("share", "delete", third["id"], check=False)
    assert refused.returncode == 2 and f"has another instance ({dest})" in refused.stderr, \
        refused.stderr
    d.sharectl("share-instance", "delete", dest, "--wait")
    d.sharectl("share", "delete", third["id"], "--wait")
    assert third["id"] not in [s["id"] for s in d.json("share", "list")]


@pytest.mark.parametrize("crash, after", [
    ("migration_start", "migration_error"),
    ("migration_complete", "migration_success"),
])
def test_a_kill_inside_a_migration_call_is_settled(setup, tmp_path, crash, after):
    """SIGKILL right after the driver's call changed the backend, before its
    outcome was written: the next engine's periodic task finds the request
    abandoned and settles the migration: a start is undone (the share
    available on its source, nothing left on the destination), a complete
    is carried out again (idempotent)."""
    d = setup
    crashing = d.write_config(tmp_path / "crash.conf", alpha={"dummy_crash_after": crash})
    engine = d.start(config=crashing if crash == "migration_start" else None, name="first")
    _ready(d)
    beta = f"{d.host}@beta"
    share = _new_share(d, "crashy")
    sid, src = share["id"], share["instance_id"]
    if crash == "migration_complete":
        d.json("share", "migration", "start", sid, beta, "--wait")
        engine.proc.terminate()
        assert engine.proc.wait(60) is not None
        engine = d.start(config=crashing, name="second")
        out = d.sharectl("share", "migration", "complete", sid)
        assert out.returncode == 0
    else:
        d.sharectl("share", "migration", "start", sid, beta)
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    dest = d.json("share", "migration", "show", sid)["destination_instance_id"]
    d.start(name="after")
    wait_until(lambda: d.json("share", "migration", "show", sid)["task_state"] == after,
               timeout=60, what=f"the migration settled in {after}")
    row = d.json("share", "show", sid)
    alpha, beta_objs = _objects(d, "alpha"), _objects(d, "beta")
    if after == "migration_error":
        assert (row["status"], row["instance_id"]) == ("available", src)
        assert src in alpha and dest not in beta_objs
    else:
        assert (row["status"], row["instance_id"]) == ("available", dest)
        assert src not in alpha and beta_objs[dest]["status"] == "available"
    assert d.json("share", "extend", sid, "2", "--wait")["status"] == "available"
