"""A new request wakes an idle engine: it does not wait for the poll.

The engines here poll only every 60 s (and less often once idle), so a
request they start within the test's 20 s bound was started by a wake-up: a
NOTIFY on PostgreSQL, the wake file beside the database on SQLite
(db/notify.py). MariaDB has neither and waits for its poll; a short poll
there still starts it.
"""

from __future__ import annotations

import pytest

SLOW_POLL = {"DEFAULT": {"request_poll_interval": "60", "request_poll_max_interval": "300"}}


def _idle_then_create(d) -> dict:
    d.sync()
    engine = d.start()
    engine.wait_for_log("(startup) on", timeout=60)  # the pass ran: the loop is idle
    share = d.json("share", "create", "1", "--proto", "NFS", "--wait", "--timeout", "20")
    snap = d.json("snapshot", "create", share["id"], "--wait", "--timeout", "20")
    return {"share": share["status"], "snapshot": snap["status"]}


def test_sqlite_wakes_on_the_wake_file(deployment):
    d = deployment(extra={**SLOW_POLL, "DEFAULT": {**SLOW_POLL["DEFAULT"],
                                                   "startup_reconciliation_wait_seconds": "0"}})
    assert _idle_then_create(d) == {"share": "available", "snapshot": "available"}


def test_postgresql_wakes_on_notify(deployment, pg_url, redis_url):
    d = deployment(db_url=pg_url, coordination_url=redis_url,
                   extra={"DEFAULT": {**SLOW_POLL["DEFAULT"],
                                      "startup_reconciliation_wait_seconds": "0"}})
    assert _idle_then_create(d) == {"share": "available", "snapshot": "available"}


@pytest.mark.parametrize("poll", ["60", "0.5"])
def test_mariadb_polls(deployment, mysql_url, poll):
    """No wake-up across processes on MariaDB: with a 60 s poll the request
    is still pending after the bound; with a short one it is done."""
    d = deployment(db_url=mysql_url, extra={"DEFAULT": {
        "request_poll_interval": poll, "request_poll_max_interval": poll,
        "startup_reconciliation_wait_seconds": "0"}})
    if poll == "0.5":
        assert _idle_then_create(d) == {"share": "available", "snapshot": "available"}
        return
    d.sync()
    engine = d.start()
    engine.wait_for_log("(startup) on", timeout=60)
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--wait", "--timeout", "5",
                     check=False)
    assert out.returncode == 1 and "still creating" in out.stderr, out.stderr
