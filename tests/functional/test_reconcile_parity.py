"""Reconciliation passes and the peer takeover on PostgreSQL and MariaDB (with
Redis), as on SQLite (with file locks).

The peer takeover once worked on SQLite only: its pass's trigger
'peer:<engine id>' did not fit its column on the servers, the insert failed
inside the pass's future and nothing was logged. Here the host name is the
longest the configuration accepts, so every host, engine id and trigger
column holds the longest value the daemon writes, on every database.
"""

from __future__ import annotations

import pytest
from sharemgr.common import vocab

from tests.functional.harness import database, intake, wait_until

pytestmark = pytest.mark.functional

# 253 characters: what oslo.config's HostnameOpt accepts at most.
LONGEST_HOST = ".".join(["a" * 63] * 3 + ["b" * 61])


DATABASES = ["sqlite", "postgresql", "mysql"]


def deployment_servers(request, name: str) -> dict:
    """Deployment keywords for database ``name``: SQLite with file locks (the
    embedded default), or PostgreSQL/MariaDB with Redis (many machines)."""
    if name == "sqlite":
        return {}
    url = request.getfixturevalue({"postgresql": "pg_url", "mysql": "mysql_url"}[name])
    return {"db_url": url, "coordination_url": request.getfixturevalue("redis_url")}


@pytest.fixture(params=DATABASES)
def servers(request) -> dict:
    return deployment_servers(request, request.param)


def _status(db, share_id: str) -> str:
    from sharemgr.cli.nouns import NOUNS

    return NOUNS["share"].status(db, share_id)


# A peer pass comes soon after a peer's death, and no startup wait holds it back.
PEER_PASSES = {"DEFAULT": {"peer_reconciliation_grace_seconds": "1",
                           "startup_reconciliation_wait_seconds": "0"}}


def crash_a_peer(d, tmp_path):
    """Engine A dies (os._exit, as SIGKILL) right after the backend made a
    share, before the database knows: the share stays 'creating'. Engine B,
    a peer of the same host, is left to settle it. A gate holds A's create
    until B's startup pass is over, so A's death is a peer's (however slow
    a loaded machine starts B), not something B's startup pass settles.
    Returns the share's id, A's engine id and B."""
    api = intake(d)
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "create_share.peer-").touch()
    crashing = d.write_config(tmp_path / "a.conf", dummy={
        "dummy_crash_after": "create_share.peer-", "dummy_gate_dir": str(gates)})
    a = d.start(config=crashing, name="a")
    share = api.create_share(1, "NFS", name="peer-1").id
    started = wait_until(lambda: [c for c in d.backend("calls") if c["method"] == "create_share"],
                         what="A at the create's gate")
    b = d.start(name="b")
    b.wait_for_log("(startup) on", timeout=60)
    (gates / "create_share.peer-").unlink()
    assert a.proc.wait(30) == 137
    return share, started[0]["engine_id"], b


def test_peer_takeover_and_passes_with_the_longest_host(deployment, tmp_path, servers):
    d = deployment(host=LONGEST_HOST, **servers, extra=PEER_PASSES)
    d.sync()
    db, _ = database(d)
    share, dead, b = crash_a_peer(d, tmp_path)

    # B, a peer of the same host, settles it without a restart.
    wait_until(lambda: _status(db, share) not in vocab.TRANSIENT_STATUSES, timeout=60,
               what="the share settled")
    assert _status(db, share) == "available"
    trigger = f"peer:{dead}"
    peer = wait_until(lambda: [p for p in d.json("reconcile", "list")
                               if p["trigger"] == trigger and p["finished_at"]],
                      what="the peer pass recorded")[0]
    alive = {s["engine_id"] for s in d.json("service", "list")}
    assert peer["engine_id"] in alive and peer["engine_id"] != dead
    assert peer["outcomes"] == {"share_instance": {"available": 1}}
    assert (peer["abandoned_requests"], peer["failures"]) == (1, 0)
    shown = d.json("reconcile", "show", "--id", str(peer["id"]))
    assert (shown["trigger"], shown["host"]) == (trigger, LONGEST_HOST)
    assert "Traceback" not in b.text()

    # A pass on demand, then 'reconcile show' reports it as the newest.
    d.sharectl("share", "reset-state", share, "--state", "extending")
    (ran,) = d.json("reconcile", "run")
    assert ran["outcomes"] == {"share_instance": {"available": 1}}
    newest = d.json("reconcile", "show")
    assert newest["id"] == ran["id"] and newest["trigger"].startswith("manual:")
    assert (newest["host"], newest["failures"]) == (LONGEST_HOST, 0)
    assert _status(db, share) == "available"
    db.dispose()
