"""The connection pool's options ([database], oslo.db's names) reach the
engine share-manager opens, on each database; SQLite has no pool to shape.
A transaction left idle is ended by the server (PostgreSQL, MariaDB)."""

from __future__ import annotations

import contextlib

import pytest
import sqlalchemy as sa
from oslo_config import cfg
from sharemgr.daemon.database import open_database
from sharemgr.db.engine import Database
from sharemgr.manager import config
from sharemgr.manager.outage import is_outage


@contextlib.contextmanager
def _opened(tmp_path, url, options=""):
    """The daemon's database, as ``[database]`` with ``options`` opens it."""
    conf_file = tmp_path / "sharemgr.conf"
    conf_file.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\n"
                         f"connection = {url}\n{options}")
    made = Database(url)  # as db sync leaves it: the daemon makes no SQLite file
    made.check()
    made.dispose()
    db = open_database(config.load([], config_file=str(conf_file), conf=cfg.ConfigOpts()))
    try:
        yield db
    finally:
        db.dispose()


def test_the_pool_options_reach_the_engine(tmp_path, db_url):
    with _opened(tmp_path, db_url, "max_pool_size = 3\nmax_overflow = 1\npool_timeout = 7\n"
                 "connection_recycle_time = 100\n") as db:
        pool = db.engine.pool
        if db.dialect == "sqlite":
            return
        assert (pool.size(), pool._max_overflow, pool._timeout, pool._recycle) == (3, 1, 7, 100)


def test_the_defaults(tmp_path, db_url):
    with _opened(tmp_path, db_url) as db:
        if db.dialect != "sqlite":
            pool = db.engine.pool
            assert (pool.size(), pool._max_overflow, pool._timeout, pool._recycle) == \
                (10, 20, 30, 3600)


# How a peer is made to give up, rather than wait for ever, on a row
# another transaction holds (so that the test fails, not hangs, without
# the limit below).
_PEER_LOCK_WAIT = {"postgresql": "SET lock_timeout = '15s'",
                   "mysql": "SET SESSION innodb_lock_wait_timeout = 15"}


@pytest.mark.parametrize("server", ["postgresql", "mysql"])
def test_a_transaction_left_idle_is_ended_and_its_rows_freed(request, server):
    """An engine paused (SIGSTOP) or cut off inside a transaction held its
    row locks for as long as it stayed so, and a peer's write of one of
    those rows (the stack watchdog abandoning its checks) waited with it,
    holding up the peer's every periodic task. With
    ``idle_transaction_timeout`` the server ends that transaction: the
    peer's write goes through, and the paused engine finds its
    transaction gone (an outage, which it handles as one)."""
    url = request.getfixturevalue("pg_url" if server == "postgresql" else "mysql_url")
    paused, peer = Database(url, idle_transaction_timeout=1), Database(url)
    try:
        with peer.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE held (id INTEGER PRIMARY KEY, v INTEGER)")
            conn.exec_driver_sql("INSERT INTO held VALUES (1, 0)")
        with paused.engine.connect() as mine:
            mine.begin()
            mine.exec_driver_sql("UPDATE held SET v = 1 WHERE id = 1")
            # Paused here: no statement for longer than the limit.
            with peer.engine.begin() as conn:
                conn.exec_driver_sql(_PEER_LOCK_WAIT[server])
                conn.exec_driver_sql("UPDATE held SET v = 2 WHERE id = 1")
            with pytest.raises(sa.exc.DBAPIError) as ended:
                mine.exec_driver_sql("UPDATE held SET v = 3 WHERE id = 1")
                mine.commit()
            assert is_outage(ended.value)
        with peer.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT v FROM held").scalar() == 2
    finally:
        paused.dispose()
        peer.dispose()


def test_the_idle_transaction_limit_is_the_daemons_option(tmp_path, pg_url):
    with _opened(tmp_path, pg_url, "idle_transaction_timeout = 7\n") as db, \
            db.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "7s"
