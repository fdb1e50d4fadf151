"""A stack update that changes a share's backend moves the share, its data
kept (issue 46), through share-manager and sharectl: ``stack update
--dry-run`` says ``migrate``; between two dummy backends (driver-assisted,
with a size change in the same update, done once the share has moved) on
SQLite and on PostgreSQL + Redis; between two local backends (host-assisted)
with the real NFS client reading the moved share's file through its new
export."""

from __future__ import annotations

import pytest

from tests.functional import local_harness as lh
from tests.functional.harness import SETUPS, assert_backend_agrees, servers, wait_until

pytestmark = pytest.mark.functional

FAST = {"startup_reconciliation_wait_seconds": "2", "migration_continue_interval": "1",
        "backend_stats_interval": "1"}
TEMPLATE = """
resources:
  data:
    type: share
    properties: {{size: {size}, proto: NFS, backend: {backend},
                 access_rules: [{{access_type: ip, access_to: 127.0.0.1}}]}}
outputs:
  export: {{get_attr: [data, export_locations, 0, path]}}
"""


def _template(d, name: str, **values) -> str:
    path = d.root / f"{name}.yaml"
    path.write_text(TEMPLATE.format(**values))
    return str(path)


def _ready(d, *backends: str) -> None:
    wait_until(lambda: {b["backend"] for b in d.json("backend", "list")} >= set(backends),
               timeout=30, what="the backends' reports")


def _share_of(d, stack: str) -> dict:
    (row,) = [r for r in d.json("stack", "resource", "list", stack) if r["name"] == "data"]
    return d.json("share", "show", row["physical_id"])


def _dummies(deployment, **kw):
    d = deployment(backends={"alpha": {"share_driver": "dummy"},
                             "beta": {"share_driver": "dummy"}},
                   extra={"DEFAULT": FAST}, **kw)
    d.sync()
    return d


@pytest.fixture(params=SETUPS)
def dummies(deployment, request):
    return _dummies(deployment, **servers(request))


@pytest.mark.long(40)
def test_a_backend_change_moves_the_share_and_then_resizes_it(dummies):
    d = dummies
    d.start()
    _ready(d, "alpha", "beta")
    d.json("stack", "create", "web", "-t", _template(d, "v1", size=1, backend="alpha"),
           "--wait")
    before = _share_of(d, "web")
    assert before["host"].startswith(f"{d.host}@alpha")
    moved = _template(d, "v2", size=2, backend="beta")
    preview = d.json("stack", "update", "web", "-t", moved, "--dry-run")
    assert preview["data"].startswith("migrate (backend, size)"), preview
    shown = d.json("stack", "update", "web", "-t", moved, "--wait")
    assert (shown["action"], shown["status"]) == ("UPDATE", "COMPLETE"), shown
    after = _share_of(d, "web")
    assert (after["id"], after["status"], after["size"]) == (before["id"], "available", 2)
    assert after["host"].startswith(f"{d.host}@beta"), after
    assert after["instance_id"] != before["instance_id"]
    assert d.json("share", "migration", "show", after["id"])["task_state"] == \
        "migration_success"
    assert [r["state"] for r in d.json("access", "list", after["id"])] == ["active"]
    assert_backend_agrees(d)
    # Nothing left to do: the same template again changes nothing.
    assert d.json("stack", "update", "web", "-t", moved, "--dry-run")["data"] == "unchanged"


@pytest.mark.long(60)
def test_a_local_share_moved_by_a_stack_keeps_its_data(deployment, tmp_path):
    lh.require_local()
    src, dst = lh.backend_options(), lh.backend_options()
    d = deployment(backends={"local": src, "local2": dst}, extra={"DEFAULT": FAST})
    d.sync()
    try:
        d.start()
        _ready(d, "local", "local2")
        d.json("stack", "create", "files", "-t",
               _template(d, "v1", size=1, backend="local"), "--wait")
        share = _share_of(d, "files")
        old_loc = share["export_locations"][0]["path"]
        old_client, new_client = lh.Client(src), lh.Client(dst)
        note = tmp_path / "note.txt"
        note.write_text("kept across backends\n")
        wait_until(lambda: old_client.put("NFS", old_loc, note, "note.txt").returncode == 0,
                   timeout=20, what="the share to take a write")

        moved = _template(d, "v2", size=1, backend="local2")
        preview = d.json("stack", "update", "files", "-t", moved, "--dry-run")
        assert preview["data"].startswith("migrate (backend)"), preview
        d.json("stack", "update", "files", "-t", moved, "--wait", "--timeout", "120")
        after = _share_of(d, "files")
        assert after["id"] == share["id"] and after["host"].startswith(f"{d.host}@local2")
        new_loc = after["export_locations"][0]["path"]
        back = tmp_path / "back.txt"
        wait_until(lambda: new_client.get("NFS", new_loc, "note.txt", back).returncode == 0,
                   timeout=30, what="the moved share to serve the client")
        assert back.read_text() == "kept across backends\n"
        assert old_client.ls("NFS", old_loc).returncode != 0  # the old export is gone
    finally:
        d.stop_all()
        for backend in ("local", "local2"):
            lh.cleanup(lh.local_root(d.state, backend))


@pytest.mark.long(30)
def test_a_failed_move_fails_the_update_and_the_share_stays(deployment, tmp_path):
    d = _dummies(deployment)
    failing = d.write_config(tmp_path / "fail.conf",
                             alpha={"dummy_fail_methods": "migration_continue"})
    d.start(config=failing)
    _ready(d, "alpha", "beta")
    d.json("stack", "create", "web", "-t", _template(d, "v1", size=1, backend="alpha"),
           "--wait")
    before = _share_of(d, "web")
    out = d.sharectl("stack", "update", "web", "-t", _template(d, "v2", size=1, backend="beta"),
                     "--wait", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    shown = d.json("stack", "show", "web")
    assert "ended in migration_error" in str(shown), shown
    after = _share_of(d, "web")
    assert (after["id"], after["status"], after["instance_id"]) == (
        before["id"], "available", before["instance_id"])
    assert after["host"].startswith(f"{d.host}@alpha")
    assert_backend_agrees(d)


@pytest.mark.long(45)
def test_an_engine_killed_while_its_stack_moves_a_share_is_settled(dummies, tmp_path):
    """SIGKILL in the middle of the move (inside the periodic task's first
    migration_continue, while the update node waits): the next engine
    drives the migration on and completes it, and the watchdog retriggers
    the node, which finds the share on its new backend."""
    d = dummies
    first = d.start(name="maker")
    _ready(d, "alpha", "beta")
    d.json("stack", "create", "web", "-t", _template(d, "v1", size=1, backend="alpha"),
           "--wait")
    before = _share_of(d, "web")
    first.terminate()
    crashing = d.write_config(tmp_path / "crash.conf",
                              alpha={"dummy_crash_after": "migration_continue"})
    engine = d.start(config=crashing, name="crashing")
    d.sharectl("stack", "update", "web", "-t", _template(d, "v2", size=2, backend="beta"))
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    d.start(name="after")
    wait_until(lambda: d.json("stack", "show", "web")["status"] != "IN_PROGRESS", timeout=120,
               what="the update to end")
    shown = d.json("stack", "show", "web")
    assert (shown["action"], shown["status"]) == ("UPDATE", "COMPLETE"), shown
    after = _share_of(d, "web")
    assert (after["id"], after["status"], after["size"]) == (before["id"], "available", 2)
    assert after["host"].startswith(f"{d.host}@beta"), after
    assert_backend_agrees(d)
