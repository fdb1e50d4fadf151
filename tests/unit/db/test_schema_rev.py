"""The schema revision read without alembic (db/schema_rev.py), and what
sharectl does with it: a command runs only on a schema this release may
use, as the daemon; ``db version`` shows any; ``db sync`` says a later
release's schema is not its to change."""

from __future__ import annotations

import pytest
from sharemgr.cli.base import EXIT_ERROR_STATUS
from sharemgr.db import migration, schema_rev
from sharemgr.db.engine import Database

from tests.unit.db.test_migration import _set


def test_the_head_from_the_file_names_is_alembics():
    assert schema_rev.HEAD == migration.head()


def test_the_revision_read_without_alembic_is_alembics(db):
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as conn:
        alembics = MigrationContext.configure(conn).get_current_revision()
    assert schema_rev.current(db) == alembics == schema_rev.HEAD


@pytest.fixture
def conf(sharectl_conf):
    return sharectl_conf("enabled_share_backends = dummy\n[dummy]\nshare_driver = dummy\n")


def _stamp(tmp_path, revision, floor=None):
    db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    _set(db, revision, floor)
    db.dispose()


def test_sharectl_runs_only_on_a_schema_this_release_may_use(tmp_path, conf, sharectl):
    """Before, a sharectl of another release listed and wrote rows on any
    schema, and said so only when a query happened to fail."""
    db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    migration.upgrade(db, "0017")  # an older release's
    db.dispose()
    code, _out, err = sharectl(conf, "share", "create", "1", "--proto", "NFS")
    assert code == EXIT_ERROR_STATUS and err.strip().endswith(
        f"is at revision 0017, not {schema_rev.HEAD}: run 'sharectl db sync'"), err
    code, out, _err = sharectl(conf, "db", "version", "-f", "value")
    assert code == 0 and out.split() == ["0017", schema_rev.HEAD, "False"]
    assert sharectl(conf, "db", "sync")[0] == 0
    assert sharectl(conf, "share", "list")[0] == 0

    _stamp(tmp_path, "9999", "9998")  # a later release's, past a contract
    code, _out, err = sharectl(conf, "share", "list")
    assert code == EXIT_ERROR_STATUS and "newer than this sharectl's" in err \
        and "upgrade this sharectl" in err, err
    code, _out, err = sharectl(conf, "db", "sync")  # was "unexpected error"
    assert code == EXIT_ERROR_STATUS and "unexpected" not in err \
        and "upgrade this sharectl" in err, err

    _stamp(tmp_path, "9999", schema_rev.HEAD)  # later, expand migrations only: usable
    assert sharectl(conf, "share", "list")[0] == 0
    code, out, _err = sharectl(conf, "db", "sync")
    assert code == 0 and "newer than this release's" in out and "nothing to do" in out


def test_sharectl_on_an_empty_database_says_it_is_empty(tmp_path, conf, sharectl):
    empty = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    empty.check()  # a file, no schema
    empty.dispose()
    code, _out, err = sharectl(conf, "share", "list")
    assert code == EXIT_ERROR_STATUS and "has no schema (it is empty)" in err, err
