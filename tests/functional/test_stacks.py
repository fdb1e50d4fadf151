"""Stacks through sharectl and real share-manager processes: create, update in
place, replace, add and remove, delete, failure with and without rollback,
concurrent traversals, live and dead locks, a SIGKILLed manager. On SQLite +
file locks and on PostgreSQL + Redis."""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from pathlib import Path

import pytest
from sharemgr.common import vocab
from sharemgr.convergence import actions, lifecycle, prepare
from sharemgr.convergence import physical as phys
from sharemgr.db import api, models, resource_locks, resources, stack_work, stacks
from sqlalchemy import func, select

from tests.functional.harness import assert_backend_agrees, database, wait_until

pytestmark = pytest.mark.functional

V1 = """
resources:
  data:
    type: share
    properties: {size: 1, proto: NFS, backend: dummy}
  snap:
    type: snapshot
    properties: {share: {get_resource: data}}
  copy:
    type: share
    properties: {size: 2, proto: NFS, snapshot: {get_resource: snap}}
outputs:
  export: {get_attr: [data, export_locations, 0, path]}
  copy_size: {get_attr: [copy, size]}
"""
# data grows and gets a name (in place), copy goes, logs is new.
V2 = """
resources:
  data:
    type: share
    properties: {size: 2, proto: NFS, backend: dummy, name: main}
  snap:
    type: snapshot
    properties: {share: {get_resource: data}}
  logs:
    type: share
    properties: {size: 1, proto: CIFS}
    depends_on: [snap]
outputs:
  export: {get_attr: [data, export_locations, 0, path]}
"""
# data changes protocol: a new share, and a new snapshot of it.
V3 = V2.replace("proto: NFS, backend", "proto: CIFS, backend")


EMBEDDED, SERVERS, MARIADB = "embedded", "postgresql+redis", "mariadb+redis"


def _setup(deployment, setup, redis_options="", **kw):
    """A deployment on SQLite + file locks, or on PostgreSQL + Redis."""
    kind, request = setup
    if kind == EMBEDDED:
        return deployment(**kw)
    url = request.getfixturevalue("mysql_url" if kind == MARIADB else "pg_url")
    redis = request.getfixturevalue("redis_url")
    if redis_options:
        redis += "&" + redis_options
    return deployment(db_url=url, coordination_url=redis, **kw)


@pytest.fixture(params=[EMBEDDED, SERVERS])
def setup(request):
    """Both setups: the tests of the basic workflow run on each."""
    return request.param, request


@pytest.fixture
def servers(request):
    return SERVERS, request


@pytest.fixture
def embedded(request):
    return EMBEDDED, request


def _write(d, name, text) -> str:
    path = d.root / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def _stack(d, name):
    db, _ = database(d)
    try:
        stack = stacks.stack_get_by_name(db, name)
        if stack is None:
            stack = [s for s in stacks.stack_list(db, include_deleted=True) if s.name == name][-1]
        return stack
    finally:
        db.dispose()


def _settled(d, name, action):
    stack = _stack(d, name)
    return stack if stack.action == action and stack.status != "IN_PROGRESS" else None


def _by_stack_resource(d):
    """Backend objects per '<stack>-<resource>' name prefix."""
    out = collections.defaultdict(list)
    for obj in d.backend("list"):
        out[obj["name"].rsplit("-", 1)[0]].append(obj)
    return dict(out)


def _create_calls(d):
    names = {o["id"]: o["name"] for o in d.backend("list")}
    return [(c["method"], names.get(c["resource_id"], c["resource_id"]))
            for c in d.backend("calls") if c["method"].startswith(("create_", "delete_"))]


def _rows(d, name):
    """The stack's resource rows by resource name (one each when settled)."""
    db, _ = database(d)
    try:
        stack = stacks.stack_lookup(db, name)
        return {r.name: r for r in stacks.resource_list(db, stack.id)}
    finally:
        db.dispose()


def _share(d, share_id):
    """What a share looks like in the database (the stack's view of it)."""
    db, _ = database(d)
    try:
        return phys.observe(db, "share", share_id)
    finally:
        db.dispose()


FAIL_KNOBS = {"dummy": {"dummy_fail_methods":
                        "create_snapshot.web-bad-,create_snapshot.nr-bad-"}}


def test_create_update_replace_delete_and_failures(deployment, setup):
    d = _setup(deployment, setup, backends=FAIL_KNOBS)
    d.sync()
    d.start()
    shown = d.json("stack", "create", "web", "-t", _write(d, "v1", V1), "--wait")
    assert (shown["action"], shown["status"], shown["progress"]) == ("CREATE", "COMPLETE", "3/3")
    assert shown["outputs"]["copy_size"] == 2 and ":/shares/" in shown["outputs"]["export"]
    listed = {r["name"]: r for r in d.json("stack", "resource", "list", "web")}
    assert {n: (r["type"], r["action"], r["status"]) for n, r in listed.items()} == {
        "data": ("share", "CREATE", "COMPLETE"), "snap": ("snapshot", "CREATE", "COMPLETE"),
        "copy": ("share", "CREATE", "COMPLETE")}
    rows = _rows(d, "web")
    assert all(listed[n]["physical_id"] == r.physical_id for n, r in rows.items())
    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-copy", "web-data", "web-snap"]
    assert all(len(v) == 1 for v in objs.values())
    data = _share(d, rows["data"].physical_id)
    assert data.actual["size"] == 1 and data.attributes["name"].startswith("web-data-")
    data_instance = _instance(d, rows["data"].physical_id)
    copy_instance = _instance(d, rows["copy"].physical_id)
    assert_backend_agrees(d)

    # In place (size, name), one resource added, one removed.
    shown = d.json("stack", "update", "web", "-t", _write(d, "v2", V2), "--wait")
    assert (shown["action"], shown["status"]) == ("UPDATE", "COMPLETE")
    after = _rows(d, "web")
    assert set(after) == {"data", "snap", "logs"}
    assert (after["data"].id, after["data"].physical_id) == (rows["data"].id,
                                                             rows["data"].physical_id)
    assert after["data"].action == "UPDATE"
    grown = _share(d, rows["data"].physical_id)
    assert (grown.actual["size"], grown.attributes["name"]) == (2, "web-data-main")
    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-data", "web-logs", "web-snap"]
    assert objs["web-data"][0]["size"] == 2
    calls = [(c["method"], c["resource_id"]) for c in d.backend("calls")]
    assert ("extend_share", data_instance) in calls
    assert ("delete_share", copy_instance) in calls
    assert_backend_agrees(d)

    # Replace: a new share and snapshot first, the old ones deleted after.
    d.sharectl("stack", "update", "web", "-t", _write(d, "v3", V3), "--wait",
               "--allow-replace")
    final = _rows(d, "web")
    assert set(final) == {"data", "snap", "logs"}
    assert final["data"].physical_id != after["data"].physical_id
    assert final["snap"].physical_id != after["snap"].physical_id
    assert final["logs"].physical_id == after["logs"].physical_id
    calls = [(c["method"], c["resource_id"]) for c in d.backend("calls")]
    new_instance = _instance(d, final["data"].physical_id)
    assert calls.index(("create_share", new_instance)) < calls.index(
        ("delete_share", data_instance))
    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-data", "web-logs", "web-snap"]
    assert all(len(v) == 1 for v in objs.values()), objs
    assert (objs["web-data"][0]["size"], _share(d, final["data"].physical_id).attributes[
        "proto"]) == (2, "CIFS")
    assert_backend_agrees(d)

    dot = d.sharectl("stack", "graph", "web").stdout
    assert dot.startswith('digraph "web"') and "->" in dot
    assert [(s["name"], s["action"], s["status"]) for s in d.json("stack", "list")] == [
        ("web", "UPDATE", "COMPLETE")]

    _failures(d, final)

    d.sharectl("stack", "delete", "web", "--wait")
    assert d.backend("list") == []
    assert _stack(d, "web").deleted_at is not None
    assert_backend_agrees(d)


def _failures(d, before):
    """A failing update rolls back to the template that completed; a failing
    create without rollback stays FAILED, saying why; rollback on demand."""
    failing = V3.replace("size: 2, proto: CIFS", "size: 3, proto: CIFS").replace(
        "outputs:", "  bad:\n    type: snapshot\n    properties: {share: {get_resource: logs}}\n"
        "outputs:")
    out = d.sharectl("stack", "update", "web", "-t", _write(d, "bad", failing), "--wait",
                     check=False)
    assert out.returncode == 1, out.stderr
    assert "ROLLBACK COMPLETE" in out.stderr and "bad" in out.stderr
    stack = _stack(d, "web")
    assert (stack.action, stack.status) == ("ROLLBACK", "COMPLETE")
    rows = _rows(d, "web")
    assert {n: r.physical_id for n, r in rows.items()} == {
        n: r.physical_id for n, r in before.items()}
    share = _share(d, rows["data"].physical_id)
    assert share.actual["size"] == 2  # extended to 3 by the update, shrunk back
    methods = [c["method"] for c in d.backend("calls")]
    assert "shrink_share" in methods
    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-data", "web-logs", "web-snap"]
    assert all(len(v) == 1 for v in objs.values()), objs
    assert_backend_agrees(d)

    out = d.sharectl("stack", "create", "nr", "-t", _write(d, "nr", FAILING),
                     "--disable-rollback", "--wait", check=False)
    assert out.returncode == 1 and "CREATE FAILED" in out.stderr
    rows = _rows(d, "nr")
    failed = [r for r in rows.values() if r.status == "FAILED"]
    assert [r.name for r in failed] == ["bad"], [(r.name, r.status_reason) for r in failed]
    assert "create_snapshot" in failed[0].status_reason
    assert "create_snapshot" in _stack(d, "nr").status_reason
    assert "nr-copy" in _by_stack_resource(d)
    shown = d.json("stack", "rollback", "nr", "--wait")
    assert (shown["action"], shown["status"]) == ("ROLLBACK", "COMPLETE")
    assert not any(k.startswith("nr-") for k in _by_stack_resource(d))
    assert_backend_agrees(d)


def _instance(d, share_id):
    """The id of a share's instance: what the driver and its call log know."""
    db, _ = database(d)
    try:
        return resources.primary_instance(db, share_id).id
    finally:
        db.dispose()


FAILING = V1.replace("outputs:", """  bad:
    type: snapshot
    properties: {share: {get_resource: copy}}
outputs:""")


def test_invalid_templates_write_nothing(deployment):
    d = deployment()
    d.sync()
    cases = {
        "resources: [a\n": "malformed YAML",
        "resources:\n  a: {type: disk, properties: {}}\n": "resource 'a': unknown type 'disk'",
        "resources:\n  a: {type: share, properties: {size: 1, proto: NFS, colour: red}}\n":
            "resource 'a' property 'colour': unknown property",
        "resources:\n  a: {type: share, properties: {size: 1}}\n":
            "resource 'a': missing required property 'proto'",
        "resources:\n  s: {type: snapshot, properties: {share: {get_resource: nope}}}\n":
            "resource 's' property 'share': references unknown resource 'nope'",
        "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}, depends_on: [b]}\n"
        "  b: {type: share, properties: {size: 1, proto: NFS}, depends_on: [a]}\n":
            "dependency cycle",
        "resources:\n  a: {type: share, properties: {size: 1, proto: NFS, backend: x}}\n":
            "resource 'a' property 'backend': unknown backend 'x'",
        "resources:\n  t: {type: snapshot, properties: {share: not-a-uuid}}\n":
            "resource 't' property 'share': no share with id 'not-a-uuid'",
    }
    paths = [_write(d, f"bad{i}", text) for i, text in enumerate(cases)]
    with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:  # sharectl start-up is slow
        outs = list(pool.map(lambda p: d.sharectl("stack", "create", Path(p).stem, "-t", p,
                                                  check=False), paths))
    for needle, out in zip(cases.values(), outs, strict=True):
        assert out.returncode == 2, (needle, out.stderr)
        assert needle in out.stderr and "Traceback" not in out.stderr, (needle, out.stderr)
    db, _ = database(d)
    with db.session() as session:
        counts = [session.scalar(select(func.count()).select_from(m)) for m in (
            models.Stack, models.StackTemplate, models.StackResource, models.Request)]
    db.dispose()
    assert counts == [0, 0, 0, 0]


def _gated(deployment, request, **kw):
    """A deployment whose dummy backends wait at gate files in ``gates``."""
    d = _setup(deployment, request, **kw)
    gates = d.root / "gates"
    gates.mkdir()
    for opts in d.sections.values():
        if "dummy_state_path" in opts:
            opts["dummy_gate_dir"] = str(gates)
    d.write_config()
    return d, gates


def test_update_while_create_runs_and_live_lock_retrigger(deployment, servers):
    """The create of 'data' waits at a gate on one engine while the stack is
    updated: the update's check of 'data' bails out (the lock is held by a
    live engine), the holder finishes and retriggers it, and the stack ends
    with the new template's resources, each made exactly once."""
    d, gates = _gated(deployment, servers, extra={"DEFAULT": {"request_workers": "4"}})
    d.sync()
    d.start()
    d.start()
    (gates / "create_share.web-data-").write_text("")
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", V1))
    wait_until(lambda: any(c["method"] == "create_share" for c in d.backend("calls")),
               what="data's create to reach the gate")
    d.sharectl("stack", "update", "web", "-t", _write(d, "v2", V2))
    db, _ = database(d)
    stack = _stack(d, "web")

    def bailed():
        return [r for r in stack_work.stack_requests(db, stack.id, stack.current_traversal)
                if "locked by live engine" in (r.error or "")]

    wait_until(bailed, what="the update's check of data to bail out")
    (gates / "create_share.web-data-").unlink()
    wait_until(lambda: _settled(d, "web", "UPDATE"), timeout=60, what="the update")
    assert _stack(d, "web").status == "COMPLETE"
    data_id = str(stacks.resource_list(db, stack.id)[0].id)
    ran = [r for r in stack_work.stack_requests(db, stack.id, stack.current_traversal)
           if r.resource_id == data_id and r.args["is_update"] and not r.error]
    assert ran and ran[-1].id > bailed()[0].id  # retriggered after the holder finished
    db.dispose()

    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-data", "web-logs", "web-snap"]
    assert all(len(v) == 1 for v in objs.values()), objs
    assert objs["web-data"][0]["size"] == 2
    per_name = collections.Counter(n.rsplit("-", 1)[0] for m, n in _create_calls(d)
                                   if m.startswith("create_"))
    assert per_name == {"web-data": 1, "web-snap": 1, "web-logs": 1}  # copy never made
    assert_backend_agrees(d)


def test_racing_updates_one_wins(deployment, setup):
    """Two updates prepared from the same view of the stack: exactly one
    traversal wins, the loser leaves no rows, the winner converges."""
    d, gates = _gated(deployment, setup)
    d.sync()
    d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", V1), "--wait")
    db, conf = database(d)
    seen = stacks.stack_lookup(db, "web")
    # Hold the winner's traversal (both templates extend data) while the rows
    # are counted: its completion would delete its SyncPoints.
    (gates / "extend_share").write_text("")
    templates = {"a": V2, "b": V2.replace("size: 1, proto: CIFS", "size: 3, proto: NFS")}

    def count():
        with db.session() as session:
            return {m.__table__.name: session.scalar(select(func.count()).select_from(m))
                    for m in (models.StackTemplate, models.StackResource, models.SyncPoint,
                              models.Request)}

    before = count()
    barrier = threading.Barrier(2)
    results: dict = {}

    def race(key):
        template = actions.load_template(templates[key], conf.enabled_share_backends)
        barrier.wait()
        try:
            results[key] = lifecycle.prepare_traversal(db, seen, "UPDATE", template)
        except prepare.TraversalLost as exc:
            results[key] = exc

    threads = [threading.Thread(target=race, args=(k,)) for k in templates]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [k for k, v in results.items() if isinstance(v, prepare.Traversal)]
    lost = [k for k, v in results.items() if isinstance(v, prepare.TraversalLost)]
    assert len(won) == 1 and len(lost) == 1, results
    winner = results[won[0]]
    after = count()
    # Only the winner's rows: one template, its new resource row, one
    # SyncPoint per node plus the stack's and one per root (its report to
    # the stack), one check request per leaf.
    assert after["stack_templates"] - before["stack_templates"] == 1
    assert after["stack_resources"] - before["stack_resources"] == len(winner.created) == 1
    assert after["sync_points"] == len(winner.graph) + 1 + len(winner.graph.roots())
    assert after["requests"] - before["requests"] >= len(winner.leaves)
    assert stacks.stack_get(db, winner.stack_id).current_traversal == winner.traversal_id
    (gates / "extend_share").unlink()
    wait_until(lambda: _settled(d, "web", "UPDATE"), timeout=60, what="the winner")
    logs = _by_stack_resource(d)["web-logs"]
    assert [o["size"] for o in logs] == [1 if won == ["a"] else 3]
    db.dispose()
    assert_backend_agrees(d)


def test_dead_engines_lock_is_broken(deployment):
    d = deployment()
    d.sync()
    d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", V1), "--wait")
    db, _ = database(d)
    stack = stacks.stack_lookup(db, "web")
    data = [r for r in stacks.resource_list(db, stack.id) if r.name == "data"][0]
    ghost = "hostA.00000000-0000-0000-0000-000000000000"  # never a member
    assert resource_locks.resource_lock_acquire(db, data.id, ghost).acquired
    shown = d.json("stack", "update", "web", "-t", _write(d, "v2", V2), "--wait")
    assert shown["status"] == "COMPLETE"
    row = stacks.resource_get(db, data.id)
    assert row.engine_id is None and row.properties["size"] == 2
    db.dispose()
    d.engines[0].wait_for_log(f"broke the lock of dead engine {ghost}")


@pytest.mark.parametrize("crash, kind", [("sigkill-at-gate", EMBEDDED),
                                         ("crash-after-create", SERVERS)])
def test_killed_manager_resumes_after_restart(deployment, request, crash, kind):
    """A manager dies mid-traversal; after a restart reconciliation settles
    the physical resource, the engine resumes the cut check, and the stack
    completes with the right resources, none twice."""
    # A killed engine's Redis locks live until tooz's lock_timeout (30 s by
    # default); reconciliation skips a locked resource, so keep it short.
    kw = {"extra": {"DEFAULT": {"startup_reconciliation_wait_seconds": "1"}},
          "redis_options": "lock_timeout=5"}
    d, gates = _gated(deployment, (kind, request), **kw)
    d.sync()
    if crash == "crash-after-create":
        crash_point = "create_share_from_snapshot.web-copy-"
        crashing = d.write_config(d.root / "crash.conf",
                                  dummy={"dummy_crash_after": crash_point})
        engine = d.start(config=crashing)
    else:
        (gates / "create_snapshot.web-snap-").write_text("")
        engine = d.start()
    d.sharectl("stack", "create", "web", "-t", _write(d, "v1", V1))
    if crash == "crash-after-create":
        assert engine.proc.wait(60) == 137
    else:
        wait_until(lambda: any(c["method"] == "create_snapshot" for c in d.backend("calls")),
                   what="the snapshot's create to reach the gate")
        engine.kill()
        (gates / "create_snapshot.web-snap-").unlink()
    assert _stack(d, "web").status == "IN_PROGRESS"

    restarted = d.start()
    wait_until(lambda: _settled(d, "web", "CREATE"), timeout=90, what="the stack to complete")
    assert _stack(d, "web").status == "COMPLETE"
    restarted.wait_for_log("was stalled; retriggered")
    objs = _by_stack_resource(d)
    assert sorted(objs) == ["web-copy", "web-data", "web-snap"]
    assert all(len(v) == 1 for v in objs.values()), objs
    assert all(o["status"] == "available" for v in objs.values() for o in v)
    if crash == "crash-after-create":
        # The copy reached the backend before the crash: kept, not made again.
        made = [n for m, n in _create_calls(d) if m == "create_share_from_snapshot"]
        assert len(made) == 1
    rows = d.json("stack", "resource", "list", "web")
    assert sorted(r["name"] for r in rows) == ["copy", "data", "snap"]
    assert all(r["status"] == "COMPLETE" for r in rows)
    db, _ = database(d)
    abandoned = [r for r in api.request_list(db) if r.status == "abandoned"
                 and r.action == vocab.ACTION_CHECK]
    db.dispose()
    assert abandoned  # the dead engine's check, retriggered by the watchdog
    assert_backend_agrees(d)
