"""A database that fails over (issue 44): PostgreSQL primary and synchronous
standby of the test's own (tests/functional/pg_pair.py), engines and
sharectl on the multi-host URL (``?host=…&host=…&target_session_attrs=
read-write``), Redis for coordination. The primary is killed while
requests are in flight and the standby promoted: engines reconnect and go
on, and nothing sharectl was told was accepted is lost."""

from __future__ import annotations

import pytest

from tests.functional.harness import Deployment, wait_until
from tests.functional.pg_pair import Pair


@pytest.fixture
def pg_pair():
    pair = Pair()
    try:
        yield pair.start()
    finally:
        pair.stop()


@pytest.mark.long(60)
def test_engines_go_on_after_the_primary_dies_and_the_standby_is_promoted(
        pg_pair, redis_url, deployment):
    """The engines stop before the servers (fixtures end in reverse order)."""
    d: Deployment = deployment(
        db_url=pg_pair.url(), coordination_url=redis_url,
        backends={"dummy": {"dummy_method_delays": "create_share:15"}})
    d.sync()
    a = d.start(name="a")
    b = d.start(name="b")
    accepted = [d.json("share", "create", "1", "--proto", "NFS")["id"] for _ in range(6)]
    # Creates in flight (each driver call takes 15 s: six sharectl runs on a
    # loaded machine took longer than 5) when the primary dies.
    assert any(s["status"] == "creating" for s in d.json("share", "list"))
    pg_pair.kill_primary()
    pg_pair.promote()
    accepted += [d.json("share", "create", "1", "--proto", "NFS")["id"] for _ in range(4)]
    wait_until(lambda: all(s["status"] == "available" for s in d.json("share", "list")),
               timeout=90, what="every accepted share available")
    assert sorted(s["id"] for s in d.json("share", "list")) == sorted(accepted)
    # Database and backend agree: every share once, none left behind.
    assert len([o for o in d.backend("list") if o["kind"] == "share"]) == len(accepted)
    for engine in (a, b):
        assert engine.proc.poll() is None, engine.text()[-3000:]
    wait_until(lambda: sum(1 for s in d.json("service", "list") if s["alive"]) == 2,
               what="both engines members")
    # Both serve on the new primary.
    d.json("share", "create", "1", "--proto", "NFS", "--wait")
    # The deposed primary, rebuilt as the new one's standby, takes over in turn.
    pg_pair.rebuild_standby()
    pg_pair.kill_primary()
    pg_pair.promote()
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait", timeout=120)
    assert share["status"] == "available"
