"""The claim of pending requests seeks each of its hosts (and the rows of no
host) on an index in id order and stops after the rows it takes, on SQLite,
MariaDB and PostgreSQL (whatever its statistics say):
no sort of every pending row (a stack's preparation writes one pending
request per leaf, 50,000 for a stack of 50,000 independent shares, and each
claim sorted them all), and no walk of every pending row to test its host
(a lane of hosts whose requests were few read all 50,000 at each claim)."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa
from sharemgr.db import migration, request_queue
from sharemgr.db.engine import Database


def _plan(db: Database, any_host: bool) -> list[tuple[int, int, str]]:
    pick, _take, _read = request_queue._claim_statements(any_host, 2, False, True)
    sql = str(pick.params(host0="h@dummy", host1="h@other", limit=4).compile(
        db.engine, compile_kwargs={"literal_binds": True}))
    with db.engine.connect() as conn:
        return [(int(r[0]), int(r[1]), str(r[-1]))
                for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]


def test_the_claim_walks_an_index_in_id_order(sqlite_url):
    db = Database(sqlite_url)
    try:
        migration.upgrade(db)
        with db.engine.begin() as conn:  # pending and done rows, as a traversal leaves them
            for status in ("pending", "done"):
                conn.execute(sa.text(
                    "INSERT INTO requests (created_at, resource_type, resource_id, action, "
                    "args, host, status) VALUES ('2026-11-27', 'stack_resource', '1', "
                    "'check', '{}', NULL, :s)"), [{"s": status}] * 50)
        for any_host in (True, False):
            plan = _plan(db, any_host)
            # One part per host (and one for no host): a seek on (status,
            # host) in the index's order, nothing sorted in it; only the
            # few rows the parts give are merged.
            parts = [i for i, _p, step in plan if step.startswith("CO-ROUTINE")]
            assert len(parts) == 2 + any_host, plan
            for part in parts:
                inside = [step for _i, p, step in plan if p == part]
                assert len(inside) == 1, plan
                assert "ix_requests_status_host_id (status=? AND host=?)" in inside[0], plan
            assert not any("ix_requests_status_id" in step for *_ids, step in plan), plan
    finally:
        db.dispose()


def test_mariadb_walks_the_pending_in_id_order_for_the_lane_of_no_host(mysql_url):
    """MariaDB's planner took the primary key (through every request done
    before the first pending one: 60 ms a claim after 100,000) or sorted
    every pending row of no host; the claim of that lane walks
    ``(status, id)``."""
    db = Database(mysql_url)
    try:
        migration.upgrade(db)
        with db.engine.begin() as conn:  # done rows first, as a long-lived engine leaves them
            for status, n in (("done", 300), ("pending", 100)):
                conn.execute(sa.text(
                    "INSERT INTO requests (created_at, resource_type, resource_id, action, "
                    "args, host, status) VALUES ('2026-11-27', 'stack_resource', '1', "
                    "'check', '{}', NULL, :s)"), [{"s": status}] * n)
            conn.exec_driver_sql("ANALYZE TABLE requests")
        pick, _take, _read = request_queue._claim_statements(True, 1, True, False)
        sql = str(pick.params(host0="h@dummy", limit=4).compile(
            db.engine, compile_kwargs={"literal_binds": True}))
        with db.engine.connect() as conn:
            keys = [r._mapping["key"] for r in conn.exec_driver_sql("EXPLAIN " + sql)]
        assert keys == ["ix_requests_status_id"], keys
    finally:
        db.dispose()


@pytest.mark.parametrize("hosts, any_host, action", [
    (0, True, "check"),  # a report's take of the next check (request_queue.take_checks_tx)
    (2, True, None),  # the request loop's lane: two hosts and the rows of no host
])
def test_postgresql_walks_each_part_in_id_order_whatever_its_statistics_say(
        pg_url, hosts, any_host, action):
    """Right after a preparation wrote its pending checks, PostgreSQL's
    statistics still said the table was empty, and its planner read every
    pending row of no host and sorted them, at each claim (50,000 at a
    50,000-share stack's create: 23 ms a claim); the update then found the
    ids taken by a walk of every pending row too. Each part of the claim
    (a host, the rows of no host) now stops after the rows it takes, and
    the update reads those by key."""
    db = Database(pg_url)
    try:
        migration.upgrade(db)
        with db.engine.begin() as conn:  # no ANALYZE since: the statistics are the empty table's
            conn.execute(sa.text(
                "INSERT INTO requests (created_at, resource_type, resource_id, action, "
                "args, host, status) VALUES ('2026-12-06', 'stack_resource', '1', "
                "'check', '{}', :h, 'pending')"),
                [{"h": None}] * 3000 + [{"h": "h@dummy"}] * 1000 + [{"h": "h@other"}] * 1000)
        _pick, take, _read = request_queue._claim_statements(any_host, hosts, True, True, action)
        params = {"host0": "h@dummy", "host1": "h@other", "limit": 4, "engine": "e",
                  "now": datetime.datetime(2026, 12, 6)}
        with db.engine.connect() as conn:
            # The claim as the engine sends it, explained by the server.
            def explain(_conn, _cursor, statement, parameters, _context, _many):
                return "EXPLAIN ANALYZE " + statement, parameters

            sa.event.listen(conn, "before_cursor_execute", explain, retval=True)
            plan = [r[0] for r in conn.execute(take, params)]
            conn.rollback()
        # Every read of the table: the parts' walks, and the update's rows by key.
        scans = [line for line in plan if "Scan" in line and " on requests" in line]
        assert scans, plan
        read = [int(line.split("rows=")[-1].split()[0]) for line in scans]
        assert max(read) <= 4, plan
    finally:
        db.dispose()
