"""Concurrent ``db sync`` runs take turns (db/migration.py): two hosts'
playbooks syncing one fresh database at once used to fail with a
UniqueViolation on PostgreSQL (issue 32). On PostgreSQL and MariaDB."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from sharemgr.db import migration
from sharemgr.db.engine import Database


@pytest.fixture(params=["postgresql", "mysql"])
def server_url(request):
    return request.getfixturevalue({"postgresql": "pg_url", "mysql": "mysql_url"}[request.param])


def _waiting_for_the_lock(admin: sa.Connection, dialect: str) -> bool:
    if dialect == "postgresql":
        return bool(admin.execute(sa.text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )).scalar())
    return bool(admin.execute(sa.text(
        "SELECT count(*) FROM information_schema.PROCESSLIST "
        "WHERE INFO LIKE 'SELECT GET_LOCK(%' AND ID <> CONNECTION_ID()")).scalar())


def test_a_sync_waits_for_the_one_holding_the_lock(server_url):
    db = Database(server_url)
    holder = sa.create_engine(server_url)
    try:
        with holder.connect() as admin:
            admin.begin()
            migration._take_sync_lock(admin, db.dialect)  # another 'db sync' under way
            errors: list[BaseException] = []

            def sync() -> None:
                try:
                    migration.upgrade(db)
                except BaseException as exc:  # the assertion below reports it
                    errors.append(exc)

            thread = threading.Thread(target=sync)
            thread.start()
            deadline = time.monotonic() + 30
            while not _waiting_for_the_lock(admin, db.dialect):
                assert thread.is_alive() and time.monotonic() < deadline, \
                    f"the sync did not wait for the lock: {errors}"
                time.sleep(0.05)
            assert migration.current(db) is None
            migration._drop_sync_lock(admin, db.dialect)
            admin.rollback()
        thread.join(120)
        assert not errors and migration.is_current(db)
    finally:
        holder.dispose()
        db.dispose()


def test_concurrent_syncs_of_a_fresh_database_all_succeed(server_url):
    """Three processes, as three hosts' ``db sync``."""
    code = ("import sys; from sharemgr.db import engine, migration; "
            "migration.upgrade(engine.Database(sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, server_url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = [(p.wait(180), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in results), [err[-800:] for _, err in results]
    db = Database(server_url)
    try:
        assert migration.is_current(db)
    finally:
        db.dispose()
