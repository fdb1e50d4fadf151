"""The connection pool's options ([database], oslo.db's names) reach the
engine share-manager opens, on each database; SQLite has no pool to shape."""

from __future__ import annotations

from oslo_config import cfg
from sharemgr.daemon.database import open_database
from sharemgr.manager import config


def test_the_pool_options_reach_the_engine(tmp_path, db_url):
    conf_file = tmp_path / "sharemgr.conf"
    conf_file.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {db_url}\n"
        "max_pool_size = 3\nmax_overflow = 1\npool_timeout = 7\n"
        "connection_recycle_time = 100\n")
    conf = config.load([], config_file=str(conf_file), conf=cfg.ConfigOpts())
    db = open_database(conf)
    try:
        pool = db.engine.pool
        if db.dialect == "sqlite":
            return
        assert (pool.size(), pool._max_overflow, pool._timeout, pool._recycle) == (3, 1, 7, 100)
    finally:
        db.dispose()


def test_the_defaults(tmp_path, db_url):
    conf_file = tmp_path / "sharemgr.conf"
    conf_file.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\n"
                         f"connection = {db_url}\n")
    conf = config.load([], config_file=str(conf_file), conf=cfg.ConfigOpts())
    db = open_database(conf)
    try:
        if db.dialect != "sqlite":
            pool = db.engine.pool
            assert (pool.size(), pool._max_overflow, pool._timeout, pool._recycle) == \
                (10, 20, 30, 3600)
    finally:
        db.dispose()
