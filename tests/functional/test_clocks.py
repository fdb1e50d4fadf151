"""Engines whose clocks disagree (issue 44, "Leases on one clock").

Two real engines on PostgreSQL + Redis, engine B's wall clock two minutes
ahead of engine A's (PyPI's libfaketime: its bundled library shifts the
wall clock only, so timed waits still work). Leases are written and judged
by the database's clock (db/clock.py), so B's clock changes nothing.
The embedded setup is one host with one clock (SQLite's clock is the
process's own), so it is not run here.
"""

from __future__ import annotations

import datetime

import pytest

from tests.functional.clocks import shifted_clock
from tests.functional.harness import Deployment, servers, wait_until
from tests.functional.test_pauses import FAST, _calls, _engine_id, _instance, _requests


@pytest.fixture(params=["postgresql+redis"])
def redis_setup(request):
    return servers(request)


def test_an_engine_two_minutes_ahead_takes_over_no_live_call(deployment, redis_setup):
    """A's extend runs 12 s on a lease renewed 2 s ahead by the database's
    clock; B, whose clock is two minutes ahead, starts meanwhile and runs
    its passes. B leaves the call alone (it took it over, fenced A's call
    and abandoned A's request while leases were judged by each engine's
    clock); A's request ends done, with the size A's call made."""
    env = shifted_clock("+120s")
    d: Deployment = deployment(extra={"DEFAULT": FAST}, backends={"dummy": {}}, **redis_setup)
    d.sync()
    config_a = d.write_config(d.root / "engine-a.conf",
                              dummy={"dummy_method_delays": "extend_share:12"})
    a = d.start(config=config_a, name="a")
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait")["id"]
    inst = _instance(d, share)
    d.sharectl("share", "extend", share, "2")
    eid_a = _engine_id(a)
    wait_until(lambda: any(c["engine_id"] == eid_a for c in _calls(d, "extend_share", inst)),
               what="A inside its extend")
    b = d.start(name="b", env=env)
    # B's log lines carry B's clock: two minutes ahead of this one.
    stamp = datetime.datetime.strptime(b.text()[:23], "%Y-%m-%d %H:%M:%S.%f")
    assert stamp - datetime.datetime.now() > datetime.timedelta(seconds=100), stamp
    # B's startup pass sees A's request in progress, while A's call runs.
    b.wait_for_log("in progress=1", timeout=30)
    wait_until(lambda: d.json("share", "show", share)["status"] == "available",
               timeout=60, what="A ends its extend")
    assert d.json("share", "show", share)["size"] == 2
    calls = _calls(d, "extend_share", inst)
    assert [(c["engine_id"], c["fenced"]) for c in calls] == [(eid_a, False)], calls
    [extend] = [r for r in _requests(d, share) if r["action"] == "extend"]
    assert (extend["status"], extend["engine_id"]) == ("done", eid_a), extend
    assert "is stuck" not in b.text()
    # B's clock is ahead: its passes ran on it, and B serves.
    d.sharectl("share", "extend", share, "3", "--wait")
    assert d.json("share", "show", share)["size"] == 3
