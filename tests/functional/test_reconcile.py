"""Startup reconciliation with real share-manager processes: resources put into
each transient status (reset-state and real crashes) are settled after a
restart, and the dummy backend agrees with the database."""

from __future__ import annotations

import collections
import datetime
import time

import pytest
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import lock_name

from tests.functional.harness import (
    assert_backend_agrees,
    database,
    intake,
    wait_until,
)
from tests.functional.test_reconcile_parity import (
    DATABASES,
    PEER_PASSES,
    crash_a_peer,
    deployment_servers,
)

pytestmark = pytest.mark.functional


@pytest.fixture(params=DATABASES)
def servers(request) -> dict:
    """The representative tests run on SQLite + file locks and on
    PostgreSQL/MariaDB + Redis (the peer takeover: test_reconcile_parity)."""
    return deployment_servers(request, request.param)


BACKENDS = {
    "dummy": {},
    "dhss": {"share_driver": "dummy", "driver_handles_share_servers": "True"},
}
# The wait is at least the membership timeout (2 s in the harness), so the
# engine that crashed is known dead when the pass starts.
FAST = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2"}}

# Share instance transient status → expected status after the pass (the
# dummy backend has every object and implements every status method).
SHARE_CASES = {
    "creating": "available",
    "creating_from_snapshot": "available",
    "extending": "available",
    "shrinking": "available",
    "deleting": "deleted",
    "deferred_deleting": "deleted",
    "manage_starting": "manage_error",
    "unmanage_starting": "unmanage_error",
    "restoring": "error",
    "reverting": "error",
    "replication_change": "error",
    "backup_creating": "error",
    "backup_restoring": "error",
}
SNAPSHOT_CASES = {
    "creating": "available",
    "deleting": "deleted",
    "manage_starting": "manage_error",
    "unmanage_starting": "unmanage_error",
    "restoring": "error",
}
SERVER_CASES = {
    "creating": "error",
    "manage_starting": "manage_error",
    "unmanage_starting": "unmanage_error",
    "network_change": "error",
    "deleting": "deleted",
}


def _status(db, rtype, ident):
    """What `sharectl <noun> show` reports as the status."""
    from sharemgr.cli.nouns import NOUNS

    return NOUNS[rtype.replace("_", "-")].status(db, ident)


def _wait_statuses(db, rtype, ids, timeout=60):
    wait_until(
        lambda: all(_status(db, rtype, i) not in vocab.TRANSIENT_STATUSES for i in ids),
        timeout=timeout, what=f"{rtype}s settled",
    )


def _settle(d, db, resources_by_type):
    for rtype, ids in resources_by_type.items():
        _wait_statuses(db, rtype, ids)


def _synced(d):
    """Sync the deployment's schema; its database and configuration."""
    d.sync()
    return database(d)


def _stuck_shares(d, count):
    """``count`` shares an engine made, put back to 'creating' once every
    engine stopped (what a crash mid-create leaves)."""
    db, conf = _synced(d)
    api = intake(d)
    d.start()
    shares = [api.create_share(1, "NFS").id for _ in range(count)]
    _wait_statuses(db, vocab.SHARE, shares)
    d.stop_all()
    for share in shares:
        api.reset_state(vocab.SHARE, share, "creating")
    return api, db, conf, shares


def test_every_type_and_transient_status(deployment, servers):
    """reset-state puts resources of every type into every transient status of
    the reconciliation table; after a restart each ends where the table says."""
    d = deployment(backends=BACKENDS, extra=FAST, **servers)
    db, _ = _synced(d)
    api = intake(d)
    engine = d.start()
    shares = {s: api.create_share(3, "NFS", name=f"s-{s}").id for s in SHARE_CASES}
    snap_shares = {s: api.create_share(1, "NFS", name=f"p-{s}").id for s in SNAPSHOT_CASES}
    servers = {s: api.create_share_server("dhss").id for s in SERVER_CASES}
    groups = {s: api.create_share_group(name=f"g-{s}").id for s in ("creating", "deleting")}
    rep_share = api.create_share(1, "NFS", name="rep").id
    backup_share = api.create_share(1, "NFS", name="bk").id
    _wait_statuses(db, "share", [*shares.values(), *snap_shares.values(), rep_share,
                                 backup_share])
    _wait_statuses(db, vocab.SHARE_SERVER, servers.values())
    _wait_statuses(db, vocab.SHARE_GROUP, groups.values())
    snaps = {s: api.create_snapshot(snap_shares[s]).id for s in SNAPSHOT_CASES}
    replicas = {s: api.create_replica(rep_share).id for s in ("creating", "deleting")}
    gsnap_group = api.create_share_group(name="gs").id
    _wait_statuses(db, vocab.SHARE_GROUP, [gsnap_group])
    gsnaps = {s: api.create_group_snapshot(gsnap_group).id for s in ("creating", "deleting")}
    lost = api.create_share(1, "NFS", name="lost").id
    _wait_statuses(db, vocab.SHARE, [lost])
    backup = api.create_backup(backup_share).id
    for rtype, ids in ((vocab.SNAPSHOT, snaps.values()), (vocab.REPLICA, replicas.values()),
                       (vocab.GROUP_SNAPSHOT, gsnaps.values()), (vocab.BACKUP, [backup])):
        _wait_statuses(db, rtype, ids)
    assert engine.terminate() == 0

    # Into the transient statuses, the first through sharectl as a user would.
    first = next(iter(SHARE_CASES))
    d.sharectl("share", "reset-state", shares[first], "--state", first)
    plan = [(vocab.SHARE, shares, SHARE_CASES), (vocab.SNAPSHOT, snaps, SNAPSHOT_CASES),
            (vocab.SHARE_SERVER, servers, SERVER_CASES),
            (vocab.SHARE_GROUP, groups, {"creating": "available", "deleting": "deleted"}),
            (vocab.GROUP_SNAPSHOT, gsnaps, {"creating": "available", "deleting": "deleted"}),
            (vocab.REPLICA, replicas, {"creating": "available", "deleting": "deleted"}),
            (vocab.BACKUP, {"deleting": backup}, {"deleting": "deleted"})]
    for rtype, ids, _ in plan:
        for status, ident in ids.items():
            api.reset_state(rtype, ident, status)
    # Drift: the backend lost one share; that one must end in error.
    api.reset_state(vocab.SHARE, lost, "creating")
    inst = resources_instance(db, lost)
    d.backend("remove", inst)

    d.start()
    for rtype, ids, _ in plan:
        _wait_statuses(db, rtype, ids.values())
    _wait_statuses(db, vocab.SHARE, [lost])
    wrong = []
    for rtype, ids, expected in plan:
        for status, ident in ids.items():
            got = _status(db, rtype, ident)
            if got != expected[status]:
                wrong.append(f"{rtype} {ident} from {status}: expected {expected[status]}, "
                             f"got {got}")
    assert not wrong, "\n".join(wrong)
    assert _status(db, vocab.SHARE, lost) == "error"
    # The extend/shrink outcome carries the backend's size.
    assert d.json("share", "show", shares["extending"])["size"] == 3
    assert_backend_agrees(d)
    rec = d.json("reconcile", "show")
    assert rec["trigger"] == "startup" and rec["failures"] == 0
    db.dispose()


# Real crashes: the dummy driver exits the process before or after the backend
# change; after a restart the pass settles the resource from the backend's
# ground truth.
CRASHES = [
    ("create_share", "before", vocab.SHARE, "error"),
    ("create_share", "after", vocab.SHARE, "available"),
    ("delete_share", "before", vocab.SHARE, "deleted"),
    ("extend_share", "after", vocab.SHARE, "available"),
    ("create_snapshot", "after", vocab.SNAPSHOT, "available"),
    ("create_replica", "after", vocab.REPLICA, "available"),
    ("setup_server", "after", vocab.SHARE_SERVER, "error"),
    ("create_share_group_snapshot", "before", vocab.GROUP_SNAPSHOT, "error"),
    ("delete_backup", "before", vocab.BACKUP, "deleted"),
]


def _prepare_crash(api, db, method):
    """Make what the crashing request needs; return a function that issues it."""
    if method in ("create_share",):
        return lambda: api.create_share(2, "NFS", name="crash").id
    if method == "setup_server":
        return lambda: api.create_share_server("dhss").id
    if method == "create_share_group":
        return lambda: api.create_share_group(name="crash").id
    if method == "create_share_group_snapshot":
        group = api.create_share_group(name="g").id
        _wait_statuses(db, vocab.SHARE_GROUP, [group])
        return lambda: api.create_group_snapshot(group).id
    share = api.create_share(2, "NFS", name="crash").id
    _wait_statuses(db, vocab.SHARE, [share])
    if method == "delete_share":
        return lambda: api.delete_share(share).id
    if method == "extend_share":
        return lambda: api.resize_share(share, 5, extend=True).id
    if method == "create_snapshot":
        return lambda: api.create_snapshot(share).id
    if method == "create_replica":
        return lambda: api.create_replica(share).id
    if method == "delete_backup":
        backup = api.create_backup(share).id
        _wait_statuses(db, vocab.BACKUP, [backup])
        return lambda: api.delete_backup(backup).id
    raise AssertionError(method)


@pytest.mark.parametrize("method,when,rtype,expected", CRASHES,
                         ids=[f"{m}-{w}" for m, w, _, _ in CRASHES])
def test_real_crash_is_settled(deployment, tmp_path, method, when, rtype, expected):
    d = deployment(backends=BACKENDS, extra=FAST)
    db, _ = _synced(d)
    api = intake(d)
    d.start()
    issue = _prepare_crash(api, db, method)
    d.stop_all()
    crashing = d.write_config(tmp_path / "crash.conf", dummy={f"dummy_crash_{when}": method},
                              dhss={f"dummy_crash_{when}": method})
    engine = d.start(config=crashing, name="crashing")
    ident = issue()
    assert engine.proc.wait(60) == 137, engine.text()[-2000:]
    assert _status(db, rtype, ident) in vocab.TRANSIENT_STATUSES
    d.start()
    _wait_statuses(db, rtype, [ident])
    assert _status(db, rtype, ident) == expected
    if method == "extend_share":
        assert d.json("share", "show", ident)["size"] == 5
    assert_backend_agrees(d)
    # The crashed engine's request was marked abandoned by the pass.
    reqs = [r for r in d.json("request", "list") if r["status"] == "abandoned"]
    assert len(reqs) == 1 and "died" in reqs[0]["error"]
    # ... and the user is told (issue 30: an extend that ends at the old size).
    (msg,) = d.json("message", "list", "--resource", ident)
    assert (msg["resource_id"], msg["detail_id"], msg["request_id"]) == (ident, "003",
                                                                          reqs[0]["id"])
    assert "the engine running it stopped" in msg["user_message"]
    db.dispose()


def test_status_methods_not_implemented_mean_error(deployment):
    d = deployment(backends={"dummy": {"dummy_status_methods": ""}}, extra=FAST)
    _, db, _, (share,) = _stuck_shares(d, 1)
    engine = d.start()
    _wait_statuses(db, vocab.SHARE, [share])
    assert _status(db, vocab.SHARE, share) == "error"
    wait_until(lambda: "does not implement get_share_status" in engine.text(),
               what="the reason in the log")
    db.dispose()


def test_disabled_changes_nothing_and_wait_is_honoured(deployment, tmp_path):
    # No peer pass either: only the startup pass, after its wait, may act.
    d = deployment(extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "6",
                                      "peer_reconciliation_grace_seconds": "3600"}})
    api, db, _, stuck = _stuck_shares(d, 3)
    # One create left running by a dead engine, its lease run out: disabled,
    # not even the periodic look for stuck operations starts a pass.
    [req] = [r for r in db_api.query(db, models.Request,
                                     {"resource_id": resources_instance(db, stuck[0])})
             if r.action == vocab.ACTION_CREATE]
    db_api.conditional_update(db, models.Request, req.id, {}, {
        "status": vocab.REQUEST_RUNNING, "engine_id": "hostA.dead",
        "lease_expires_at": models.utcnow() - datetime.timedelta(minutes=5)})

    disabled = d.write_config(tmp_path / "off.conf",
                              DEFAULT={"startup_reconciliation_enabled": "False",
                                       "startup_reconciliation_wait_seconds": "0",
                                       "periodic_reconciliation_interval": "1"})
    engine = d.start(config=disabled, name="disabled")
    # The daemon serves requests meanwhile.
    fresh = api.create_share(1, "NFS").id
    _wait_statuses(db, vocab.SHARE, [fresh])
    time.sleep(3)
    assert {_status(db, vocab.SHARE, s) for s in stuck} == {"creating"}
    assert "startup reconciliation disabled" in engine.text()
    assert d.json("reconcile", "list") == []
    engine.terminate()

    started = time.monotonic()
    engine = d.start()
    # Not before the wait: the daemon is up and serving, the stuck ones untouched.
    other = api.create_share(1, "NFS").id
    _wait_statuses(db, vocab.SHARE, [other])
    if time.monotonic() - started < 5:
        assert {_status(db, vocab.SHARE, s) for s in stuck} == {"creating"}
    _wait_statuses(db, vocab.SHARE, stuck, timeout=30)
    assert {_status(db, vocab.SHARE, s) for s in stuck} == {"available"}
    db.dispose()


def test_resource_locked_by_live_engine_is_untouched(deployment):
    # No peer pass (the first engine's leave would trigger one): only the
    # manual pass below may settle the resource once the holder is done.
    d = deployment(extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "2",
                                      "peer_reconciliation_grace_seconds": "3600"}})
    _, db, conf, shares = _stuck_shares(d, 4)
    from sharemgr.manager import config

    holder = Coordinator(config.coordination_url(conf), "hostA.holder")
    holder.start(heartbeat=True)
    held = resources_instance(db, shares[0])
    with holder.hold(lock_name(vocab.SHARE_INSTANCE, held)):
        d.start()
        _wait_statuses(db, vocab.SHARE, shares[1:])
        # A pass's row is written as it starts (status running, nothing
        # skipped yet): the one that has ended (seen in CI: the shares it
        # settled were read before its end was written).
        rec = wait_until(lambda: next((p for p in d.json("reconcile", "list")
                                       if p["status"] != "running"), None),
                         what="a pass that has ended")
        assert rec["skipped"] == {"locked by another engine": 1}
        assert _status(db, vocab.SHARE, shares[0]) == "creating"
    holder.stop()
    # Once the holder is done, an on-demand pass settles it.
    out = d.json("reconcile", "run")
    assert out[0]["outcomes"] == {"share_instance": {"available": 1}}
    assert _status(db, vocab.SHARE, shares[0]) == "available"
    db.dispose()


def resources_instance(db, share_id):
    from sharemgr.db import resources

    return resources.primary_instance(db, share_id).id


def test_dry_run_prints_the_plan_and_changes_nothing(deployment, servers):
    d = deployment(extra={"DEFAULT": {"startup_reconciliation_enabled": "False"}}, **servers)
    db, _ = _synced(d)
    api = intake(d)
    d.start()
    share = api.create_share(1, "NFS").id
    _wait_statuses(db, vocab.SHARE, [share])
    d.sharectl("share", "reset-state", share, "--state", "extending")
    plan = d.json("reconcile", "run", "--dry-run")
    assert plan == [{"type": "share_instance", "id": resources_instance(db, share),
                     "status": "extending", "action": "query get_share_status",
                     "outcome": "available or extending_error"}]
    assert _status(db, vocab.SHARE, share) == "extending"
    db.dispose()


def test_two_engines_settle_300_resources_once(deployment, pg_url, redis_url):
    d = deployment(db_url=pg_url, coordination_url=redis_url,
                   extra={"DEFAULT": {"startup_reconciliation_wait_seconds": "2",
                                      "reconciliation_workers": "8"}})
    db, _ = _synced(d)
    api = intake(d)
    shares = [api.create_share(1, "NFS", name=f"r{i}").id for i in range(300)]
    d.start()
    wait_until(lambda: all(s["status"] == "available" for s in d.json("share", "list")),
               timeout=120, what="300 shares")
    d.stop_all()
    plan = {}
    for i, share in enumerate(shares):
        status = ("creating", "deleting", "extending")[i % 3]
        api.reset_state(vocab.SHARE, share, status)
        plan[resources_instance(db, share)] = status
    before = len(d.backend("calls"))
    d.start(wait=False)
    d.start(wait=False)
    for engine in d.engines[-2:]:
        engine.wait_for_log("share-manager up")
    def left():
        return db_api.query(db, models.ShareInstance,
                            {"status": ["creating", "deleting", "extending"]})

    try:
        wait_until(lambda: not left(), timeout=180, interval=1, what="all settled")
    except AssertionError as exc:  # what was left, and what the passes said
        raise AssertionError(f"{exc}; left: {[(r.id, r.status) for r in left()][:5]}; "
                             f"passes: {d.json('reconcile', 'list')}") from None
    calls = d.backend("calls")[before:]
    acted = collections.Counter(
        c["resource_id"] for c in calls
        if c["method"] in ("get_share_status", "get_share_statuses", "delete_share")
        and c["resource_id"] in plan
    )
    assert set(acted) == set(plan) and set(acted.values()) == {1}, \
        [r for r, n in acted.items() if n != 1][:5]
    engines = {c["engine_id"] for c in calls if c["resource_id"] in plan}
    passes = d.json("reconcile", "list", "--limit", "100")
    assert {p["engine_id"] for p in passes if p["trigger"] == "startup"} >= engines_of(d)
    # Each resource settled once, by whichever pass got it: the two startup
    # passes, or a peer pass and a pass run again if an engine dropped out
    # of the group under load (its passes then end interrupted).
    total = sum(n for p in passes for t in p["outcomes"].values() for n in t.values())
    assert total == 300, [(p["trigger"], p["outcomes"], p.get("error")) for p in passes]
    assert len(engines) >= 1
    assert_backend_agrees(d)
    db.dispose()


def engines_of(d):
    return {s["engine_id"] for s in d.json("service", "list")}


def test_peer_crash_is_reconciled_without_restart(deployment, tmp_path):
    d = deployment(extra=PEER_PASSES)
    db, _ = _synced(d)
    share, _, _ = crash_a_peer(d, tmp_path)
    _wait_statuses(db, vocab.SHARE, [share], timeout=60)
    assert _status(db, vocab.SHARE, share) == "available"
    triggers = [p["trigger"] for p in d.json("reconcile", "list")]
    assert any(t.startswith("peer:") for t in triggers), triggers
    db.dispose()
