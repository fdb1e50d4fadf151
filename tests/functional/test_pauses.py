"""Engines that stop and come back (issue 27): an engine frozen with SIGSTOP
inside a slow driver call while a peer takes over, then resumed.

Each test runs two real engines through ``sharectl``, on the embedded setup
(SQLite + file locks) and on PostgreSQL + Redis. Engine A's driver calls
wait at a gate before the backend changes, so A is frozen inside the call;
engine B's do not (its own config file).
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sharemgr.drivers.dummy_state import DB_NAME

from tests.functional.harness import SETUPS, Deployment, servers, wait_until
from tests.functional.netfault import Proxy, through
from tests.functional.test_health import _get, _url

FAST = {
    # A frozen engine's lease is stuck two seconds after its last renewal;
    # every second the peer looks for such leases.
    "operation_heartbeat_seconds": "2",
    "operation_lease_seconds": "120",
    "periodic_reconciliation_interval": "1",
    "peer_reconciliation_grace_seconds": "1",
    "startup_reconciliation_wait_seconds": "2",
}


@pytest.fixture(params=SETUPS)
def setup(request):
    return servers(request)


@pytest.fixture(params=["postgresql+redis", "postgresql+etcd"])
def redis_setup(request):
    """Locks that expire (on Redis or etcd): on the embedded setup a frozen
    engine's file locks stay held until it resumes, so a new operation on
    its resource waits for it (doc/reconciliation.rst, "Fencing")."""
    return servers(request)


def _engine_id(engine) -> str:
    match = re.search(r"share-manager up: host \S+, engine (\S+),", engine.text())
    assert match, engine.text()[-2000:]
    return match.group(1)


def _engine_a(deployment, setup, slow: str, backend_opts: dict | None = None,
              opts: dict | None = None):
    """Engine A, whose ``slow`` calls wait at a gate (a file) before the
    backend changes; engine B (fast, its own config) starts once A is inside
    such a call. A gate, not a delay: however long B takes to start under
    load, A is still inside the call when it is frozen."""
    d: Deployment = deployment(extra={"DEFAULT": {**FAST, **(opts or {})}},
                               backends={"dummy": dict(backend_opts or {})}, **setup)
    d.sync()
    _gate(d).mkdir()
    (_gate(d) / slow).touch()
    config_a = d.write_config(d.root / "engine-a.conf",
                              dummy={"dummy_gate_dir": str(_gate(d))})
    return d, d.start(config=config_a, name="a")


def _gate(d: Deployment):
    return d.root / "gates-a"


def _instance(d: Deployment, share: str) -> str:
    return next(i["id"] for i in d.json("share-instance", "list") if i["share_id"] == share)


def _calls(d: Deployment, method: str, rid: str) -> list[dict]:
    return [c for c in d.backend("calls") if c["method"] == method and c["resource_id"] == rid]


def _frozen_in_call(d: Deployment, engine, method: str, rid: str):
    """Wait until ``engine`` is inside ``method`` for ``rid`` (at its gate),
    start engine B, then freeze A and open the gate: resumed, A goes on
    with the call. B is returned."""
    eid = _engine_id(engine)
    wait_until(lambda: any(c["engine_id"] == eid for c in _calls(d, method, rid)),
               what=f"{method} of {rid} on engine A")
    b = d.start(name="b")
    _freeze(d, engine)
    (_gate(d) / method).unlink()
    return b


def _freeze(d: Deployment, engine) -> None:
    """SIGSTOP ``engine``, outside a write transaction on any SQLite file it
    writes: frozen inside one (a lease renewal in the embedded database, a
    periodic task's call recorded by the dummy backend), it would hold that
    file's single write lock and stop every engine's writes there until it
    resumes (doc/reconciliation.rst, "Fencing") — not the pause these tests
    are about. The dummy's file is shared on every setup: B's pass, asking
    the backend, waited out its 60 s busy timeout behind a frozen A (seen in
    CI)."""
    files = [Path(s["dummy_state_path"]) / DB_NAME
             for s in d.sections.values() if "dummy_state_path" in s]
    if not d.sections["database"].get("connection", ""):
        files.append(d.state / "sharemgr.sqlite")
    while True:
        os.kill(engine.proc.pid, signal.SIGSTOP)
        _wait_stopped(engine.proc.pid)
        if all(_sqlite_writable(f) for f in files):
            return
        os.kill(engine.proc.pid, signal.SIGCONT)
        time.sleep(0.05)


def _wait_stopped(pid: int) -> None:
    """Until every thread of ``pid`` is stopped: kill() returns once the
    signal is pending, and until the thread that takes it stops the group,
    the others run on (under load, long enough for A's call to pass its
    opened gate and change the backend: seen in CI)."""
    def states() -> list[str]:
        out = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    out.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass  # a thread that ended meanwhile
        return out
    wait_until(lambda: all(state in "tT" for state in states()), timeout=10, interval=0.01,
               what=f"every thread of {pid} stopped")


def _sqlite_writable(path) -> bool:
    conn = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked"
        return False
    finally:
        conn.close()


def _resume(engine) -> None:
    os.kill(engine.proc.pid, signal.SIGCONT)


def _requests(d: Deployment, share: str) -> list[dict]:
    return d.json("request", "list", "--resource", share)


def _assert_no_overlap(calls: list[dict]) -> None:
    """No two state-changing calls the backend accepted overlap in time."""
    accepted = sorted((c for c in calls if not c["fenced"]), key=lambda c: c["time"])
    for first, second in zip(accepted, accepted[1:], strict=False):
        assert first["finished"] and first["finished"] <= second["time"], (first, second)


def _rejoined(d: Deployment, engine) -> None:
    """A is alive again; on Redis and etcd, whose group dropped it, it
    noticed and joined again (a file coordinator's membership comes back with the
    resumed engine's next heartbeat)."""
    eid = _engine_id(engine)
    wait_until(lambda: any(s["engine_id"] == eid and s["alive"]
                           for s in d.json("service", "list")),
               timeout=30, what="engine A alive again")
    if d.sections["coordination"].get("backend_url", "").startswith(("redis", "etcd")):
        engine.wait_for_log("member of the engines group again", timeout=30)


def test_late_extend_is_fenced_and_no_request_is_lost(redis_setup, deployment):
    """Cases 1-4: A frozen inside an extend; B settles the share, then runs
    the user's next extend. A's call, resumed, is refused by the backend:
    database and backend agree on B's size, A's request ends abandoned (not
    done), B's request did its work, and A is a member again."""
    d, a = _engine_a(deployment, redis_setup, "extend_share")
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    inst = _instance(d, share)
    d.sharectl("share", "extend", share, "2")
    _frozen_in_call(d, a, "extend_share", inst)
    try:
        wait_until(lambda: d.json("share", "show", share)["status"] == "available",
                   timeout=60, what="B settles the frozen extend")
        assert d.json("share", "show", share)["size"] == 1  # what the backend holds
        d.sharectl("share", "extend", share, "3", "--wait")
    finally:
        _resume(a)
    a.wait_for_log("refused the call as fenced", timeout=60)
    _rejoined(d, a)
    assert d.json("share", "show", share)["size"] == 3
    [obj] = [o for o in d.backend("list") if o["id"] == inst]
    assert obj["size"] == 3
    calls = _calls(d, "extend_share", inst)
    eid_a = _engine_id(a)
    assert [c["fenced"] for c in calls if c["engine_id"] == eid_a] == [True]
    _assert_no_overlap(calls)
    extends = [r for r in _requests(d, share) if r["action"] == "extend"]
    assert sorted(r["status"] for r in extends) == ["abandoned", "done"], extends
    assert all(not (r["error"] or "").startswith("stale") for r in extends), extends
    # The frozen engine serves again: its next request runs.
    d.sharectl("share", "extend", share, "4", "--wait")
    assert d.json("share", "show", share)["size"] == 4


def test_create_judged_missing_is_not_made_afterwards(deployment, setup):
    """Case 5: A frozen inside a create; B finds the share missing on the
    backend and marks it error. A's create, resumed, is refused: nothing
    appears on the backend behind the error row."""
    d, a = _engine_a(deployment, setup, "create_share")
    share = d.json("share", "create", "1", "--proto", "NFS")["id"]
    inst = _instance(d, share)
    _frozen_in_call(d, a, "create_share", inst)
    try:
        wait_until(lambda: d.json("share", "show", share)["status"] == "error",
                   timeout=60, what="B settles the frozen create")
    finally:
        _resume(a)
    a.wait_for_log("refused the call as fenced", timeout=60)
    assert [o for o in d.backend("list") if o["id"] == inst] == []
    assert d.json("share", "show", share)["status"] == "error"
    _rejoined(d, a)


def test_a_departed_engine_holding_its_lock_is_settled_by_its_lease(deployment, setup):
    """A frozen inside a create drops out of the group (2 s) well before its
    lease runs out (renewed 8 s ahead). B's startup pass finds A departed
    but, on the embedded setup, A's file lock still held: it leaves the
    request running, and the lease, once expired, has a periodic pass settle
    the share while A is still frozen (seen in CI: the request abandoned, the
    share skipped as locked and left `creating`)."""
    d, a = _engine_a(deployment, setup, "create_share",
                     opts={"operation_heartbeat_seconds": "8"})
    share = d.json("share", "create", "1", "--proto", "NFS")["id"]
    inst = _instance(d, share)
    b = _frozen_in_call(d, a, "create_share", inst)
    try:
        wait_until(lambda: d.json("share", "show", share)["status"] == "error",
                   timeout=60, what="B settles the frozen create")
        if not setup:  # file locks: held by the frozen A, so its lease decides
            assert "left the group but still holds its lock" in b.text()
            assert re.search(r"request \d+ \(create share_instance \S+\) of engine \S+ is "
                             r"stuck", b.text())
        # On Redis A's lock expires with its membership: B takes it over then.
    finally:
        _resume(a)
    a.wait_for_log("refused the call as fenced", timeout=60)
    assert [o for o in d.backend("list") if o["id"] == inst] == []
    _rejoined(d, a)


def test_backend_without_fencing_waits_for_the_deadline(deployment, setup):
    """A backend that cannot fence: the peer does not take the frozen call
    over before its hard deadline; the resumed call finishes it, and
    database and backend agree."""
    d, a = _engine_a(deployment, setup, "extend_share",
                     backend_opts={"dummy_honours_fencing": "False"})
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    inst = _instance(d, share)
    d.sharectl("share", "extend", share, "2")
    b = _frozen_in_call(d, a, "extend_share", inst)
    try:
        b.wait_for_log("left the group", timeout=30)
        # A pass of B after A's death (its startup pass or a peer pass, then
        # the periodic ones for the expired lease) leaves the share alone.
        wait_until(lambda: "in progress=1" in b.text().split("left the group", 1)[1],
                   timeout=30, what="a pass of B that leaves the extend alone")
        assert d.json("share", "show", share)["status"] == "extending"
    finally:
        _resume(a)
    wait_until(lambda: d.json("share", "show", share)["status"] == "available",
               timeout=60, what="A finishes its extend")
    assert d.json("share", "show", share)["size"] == 2
    [obj] = [o for o in d.backend("list") if o["id"] == inst]
    assert obj["size"] == 2
    _rejoined(d, a)


def test_wait_follows_the_database_when_coordination_is_away(deployment, tmp_path):
    """Case 7: `share create --wait` whose coordination backend cannot be
    reached still reports the accepted request and follows it to its end."""
    d = deployment()
    d.sync()
    d.start()
    away = d.write_config(tmp_path / "away.conf",
                          coordination={"backend_url": "redis://127.0.0.1:1"})
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--wait", "-f", "json",
                     config=away)
    assert "request accepted, following it through the database" in out.stderr
    assert len(d.json("share", "list")) == 1
    assert d.json("share", "list")[0]["status"] == "available"


def test_dead_engines_show_when_they_died_and_can_be_removed(deployment, setup):
    """Case 8: a killed engine is listed dead with the time it died, and
    `service cleanup` removes its record, never an alive engine's."""
    d: Deployment = deployment(**setup)
    d.sync()
    keep, dead = d.start(), d.start()
    dead_id, keep_id = _engine_id(dead), _engine_id(keep)
    dead.kill()
    wait_until(lambda: not any(s["engine_id"] == dead_id and s["alive"]
                               for s in d.json("service", "list")),
               timeout=30, what="the killed engine dead")
    [row] = [s for s in d.json("service", "list") if s["engine_id"] == dead_id]
    assert row["died_at"] and not row["stopped_at"]
    out = d.sharectl("service", "cleanup")
    assert dead_id in out.stdout
    ids = [s["engine_id"] for s in d.json("service", "list", "--all")]
    assert ids == [keep_id]
    bad = d.sharectl("service", "cleanup", "--older-than", "-1", check=False)
    assert bad.returncode == 2 and "must be at least 0: -1" in bad.stderr


def test_cut_off_engine_claims_nothing_and_comes_back(deployment, pg_url, redis_url):
    """Case 6: A cut off from Redis (packets dropped, not refused) claims no
    request while it cannot tell it is a member: B runs every request, none
    is abandoned. Healed, A is a member again and serves."""
    from urllib.parse import urlsplit

    proxy = Proxy(urlsplit(redis_url).port or 6379)
    proxy.start()
    d: Deployment = deployment(db_url=pg_url, coordination_url=redis_url,
                               extra={"DEFAULT": FAST})
    d.sync()
    config_a = d.write_config(d.root / "engine-a.conf",
                              coordination={"backend_url": through(redis_url, proxy.port)},
                              health={"enabled": "true", "port": "0"})
    a = d.start(config=config_a, name="a")
    b = d.start(name="b")
    health = _url(a) + "/healthcheck"
    assert _get(health)[0] == 200
    try:
        proxy.freeze()
        a.wait_for_log("out of the engines group", timeout=30)
        code, body = _get(health)
        assert code == 503 and "rejoining" in body, body
        # It says so where operators look (it still reaches the database).
        wait_until(lambda: any(r["engine_id"] == _engine_id(a) and r["out_of_group"]
                               for r in d.json("service", "list")),
                   what="A's reason in service list")
        shares = [d.json("share", "create", "1", "--proto", "NFS")["id"] for _ in range(4)]
        wait_until(lambda: all(d.json("share", "show", s)["status"] == "available"
                               for s in shares), timeout=60, what="B creates every share")
    finally:
        proxy.thaw()
    engines = {r["engine_id"] for s in shares for r in _requests(d, s)}
    assert engines == {_engine_id(b)}
    assert all(r["status"] == "done" for s in shares for r in _requests(d, s))
    a.wait_for_log("member of the engines group again", timeout=60)
    wait_until(lambda: not any(r["engine_id"] == _engine_id(a) and r["out_of_group"]
                               for r in d.json("service", "list")),
               what="A's reason cleared")
    assert _get(health)[0] == 200
    b.terminate()
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    assert {r["engine_id"] for r in _requests(d, share)} == {_engine_id(a)}


def test_an_outcome_waits_for_the_database(deployment, pg_url, redis_url):
    """A cut from PostgreSQL while inside a create: the
    call finishes, its outcome waits for the database and is written once
    the link heals. The share does not stay 'creating' with its request
    failed."""
    from sqlalchemy.engine import make_url

    proxy = Proxy(make_url(pg_url).port or 5432)
    proxy.start()
    d: Deployment = deployment(db_url=pg_url, coordination_url=redis_url,
                               extra={"DEFAULT": FAST})
    d.sync()
    via = make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)
    # The create waits at a gate (not a delay): the cut comes while it is
    # inside the call however slowly this test sees it get there.
    gates = d.root / "gates"
    gates.mkdir()
    (gates / "create_share").touch()
    config_a = d.write_config(d.root / "engine-a.conf", database={"connection": via},
                              dummy={"dummy_gate_dir": str(gates),
                                     "dummy_gate_poll_interval": "0.05"})
    a = d.start(config=config_a, name="a")
    share = d.json("share", "create", "1", "--proto", "NFS")["id"]
    inst = _instance(d, share)
    eid = _engine_id(a)
    wait_until(lambda: any(c["engine_id"] == eid for c in _calls(d, "create_share", inst)),
               what="A inside the create")
    # Refused, not dropped: a dropped link only makes the write wait in the
    # kernel, while a refused one fails it at once, which used to end the
    # request failed and leave the share 'creating'.
    proxy.cut()
    (gates / "create_share").unlink()
    try:
        a.wait_for_log("its outcome waits for it", timeout=30)
    finally:
        proxy.start()
    wait_until(lambda: d.json("share", "show", share)["status"] == "available", timeout=60,
               what="the outcome written after the cut")
    assert [r["status"] for r in _requests(d, share)] == ["done"]


def test_an_engine_stops_while_redis_is_away(deployment, pg_url, redis_url):
    """SIGTERM while Redis cannot be reached: the engine stops (tooz's heart
    retried the heartbeat for ever and its stop waited for the heart)."""
    from urllib.parse import urlsplit

    proxy = Proxy(urlsplit(redis_url).port or 6379)
    proxy.start()
    d: Deployment = deployment(db_url=pg_url, coordination_url=through(redis_url, proxy.port))
    d.sync()
    engine = d.start()
    proxy.cut()
    engine.wait_for_log("out of the engines group")
    assert engine.terminate(timeout=45) == 0


def _activity(admin: sa.Engine, query: sa.TextClause, **params: object):
    """One read of pg_stat_activity on a connection of its own: a
    transaction keeps the first snapshot of it that it reads, so polling
    inside one sees the same sessions and states forever (this test waited
    out a session 'active' at its first read, or none waiting yet)."""
    with admin.connect() as conn:
        return conn.execute(query, params).scalar()


def _frozen_in_transaction(d: Deployment, engine, admin: sa.Engine) -> int:
    """Freeze ``engine`` (the only engine writing) at a moment its
    PostgreSQL session is idle inside a transaction that wrote (rows locked
    until it ends); returns that session's server pid. No luck in it: the
    stack's events are locked against writers until the engine waits on
    them inside a transaction that wrote (every node's begin and report
    writes an event after its first row), the engine is frozen there, and
    the lock let go, so its statement ends on the server and its session
    sits idle inside the transaction while the engine stays frozen. Frozen
    outside the dummy's write lock, as ``_freeze`` is: B's start, asking
    the backend, stayed 30 s short of "up" in 2 of 75 runs (three at once)
    when this froze A with plain SIGSTOP, as a writer frozen inside that
    lock would make it."""
    waiting = sa.text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event = 'relation' AND backend_xid IS NOT NULL AND pid <> :holder")
    state = sa.text("SELECT state FROM pg_stat_activity WHERE pid = :pid")
    with admin.connect() as conn:
        with conn.begin():
            conn.execute(sa.text("LOCK TABLE stack_events IN SHARE ROW EXCLUSIVE MODE"))
            holder = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            pid = wait_until(lambda: _activity(admin, waiting, holder=holder), timeout=60,
                             what="the engine waiting on the events inside a transaction")
            _freeze(d, engine)  # its session keeps waiting while it thaws between tries
    # Ended already, if the server's timeout came first.
    wait_until(lambda: _activity(admin, state, pid=pid) in ("idle in transaction", None),
               timeout=30, what="the frozen engine's session idle inside its transaction")
    return int(pid)


def test_an_engine_frozen_inside_a_transaction_holds_up_no_peer(deployment, pg_url, redis_url):
    """A frozen inside a transaction of its own, its rows locked on
    PostgreSQL (a check's report ending its request, writing its
    successors' SyncPoints): the server ends that transaction after
    ``[database] idle_transaction_timeout``, B converges the stack A was
    converging while A stays frozen, and A, resumed, finds its connection
    gone — an outage it handles — and serves again. Before, the
    transaction stayed open for as long as A stayed frozen, and B's
    watchdog, abandoning A's check request, waited on its row."""
    d: Deployment = deployment(db_url=pg_url, coordination_url=redis_url,
                               extra={"DEFAULT": FAST,
                                      "database": {"idle_transaction_timeout": "2"}})
    d.sync()
    template = d.root / "many.yaml"
    template.write_text("resources:\n" + "".join(
        f"  s{i}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n" for i in range(1000)))
    a = d.start(name="a")
    d.sharectl("stack", "create", "many", "-t", str(template))
    admin = sa.create_engine(pg_url)
    try:
        wait_until(lambda: d.json("stack", "show", "many")["status"] == "IN_PROGRESS",
                   what="the stack under way")
        pid = _frozen_in_transaction(d, a, admin)
        alive = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
        wait_until(lambda: _activity(admin, alive, pid=pid) == 0, timeout=30,
                   what="A's transaction ended by the server")
        d.start(name="b")
        wait_until(lambda: d.json("stack", "show", "many")["status"] != "IN_PROGRESS",
                   timeout=300, what="B converges the stack while A is frozen")
        assert d.json("stack", "show", "many")["status"] == "COMPLETE"
    finally:
        _resume(a)
        admin.dispose()
    _rejoined(d, a)
    assert a.proc.poll() is None
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")
    assert share["status"] == "available"
