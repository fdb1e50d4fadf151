"""What the benchmarks count (db/stats.py) and the read-only transaction
(``Database.reading``) the hot paths use, on every database."""

from __future__ import annotations

import json
import threading

from sharemgr.db import api, migration, models, stats
from sharemgr.db.engine import Database


def _request(db: Database) -> int:
    with db.session() as session:
        return api.request_add_tx(session, "share", "r1", "create", "h@dummy").id


def test_counts_statements_commits_and_the_commits_that_wrote(db, tmp_path):
    counts = stats.SqlStats(db.engine, str(tmp_path / "stats.json"))
    rid = _request(db)
    assert api.get(db, models.Request, rid) is not None  # a read-only transaction
    claimed = api.request_claim(db, ["h@dummy"], "e1", limit=4)
    assert [r.id for r in claimed] == [rid]
    counts.write()
    snap = json.loads((tmp_path / "stats.json").read_text())
    assert snap["commits"] == 3 and snap["write_commits"] == 2, snap
    assert snap["by_kind"]["INSERT requests"] == 1
    assert snap["by_kind"]["SELECT requests"] >= 1
    # The claim's CTE is counted as the UPDATE it serves, where it is one statement.
    assert snap["by_kind"]["UPDATE requests"] == 1


def test_a_statement_with_a_cte_counts_as_its_main_statement():
    sql = ("WITH claimable AS MATERIALIZED (SELECT requests.id FROM requests LIMIT 4) "
           "UPDATE requests SET status=? WHERE requests.id IN (SELECT claimable.id "
           "FROM claimable) RETURNING id")
    assert stats._key(sql) == "UPDATE requests"
    assert stats._key("SELECT stacks.id FROM stacks") == "SELECT stacks"


def test_a_read_does_not_wait_for_a_writer_on_sqlite(sqlite_url):
    """SQLite serializes writers with BEGIN IMMEDIATE; a read-only
    transaction begins deferred, so in WAL mode it reads while a writer
    holds the lock instead of queueing behind it."""
    db = Database(sqlite_url)
    migration.upgrade(db)
    try:
        rid = _request(db)
        writing, release = threading.Event(), threading.Event()

        def writer() -> None:
            with db.session() as session:
                api.conditional_update_tx(session, models.Request, rid,
                                          {"status": "pending"}, {"status": "running"})
                writing.set()
                release.wait(30)

        t = threading.Thread(target=writer)
        t.start()
        try:
            assert writing.wait(30)
            with db.reading() as session:  # would wait 30 s (busy_timeout) if immediate
                begins = session.connection().get_execution_options()
                row = session.get(models.Request, rid)
            # The reader sees the last committed state, not the writer's.
            assert row.status == "pending"
            assert "DEFERRED" in begins.values()
        finally:
            release.set()
            t.join()
        assert api.get(db, models.Request, rid).status == "running"
    finally:
        db.dispose()
