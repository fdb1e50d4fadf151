"""The claim of pending requests on SQLite walks an index in id order and
stops after the rows it takes: no sort of every pending row (a stack's
preparation writes one pending request per leaf, 50,000 for a stack of
50,000 independent shares, and each claim sorted them all)."""

from __future__ import annotations

import sqlalchemy as sa
from sharemgr.db import api, migration
from sharemgr.db.engine import Database


def _plan(db: Database, any_host: bool) -> list[str]:
    pick, _take, _read = api._claim_statements(any_host, False, True)
    sql = str(pick.params(hosts=["h@dummy", "h@other"], limit=4).compile(
        db.engine, compile_kwargs={"literal_binds": True}))
    with db.engine.connect() as conn:
        return [str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]


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
            assert not any("TEMP B-TREE" in step for step in plan), plan
            assert any("ix_requests_status_id" in step for step in plan), plan
    finally:
        db.dispose()
