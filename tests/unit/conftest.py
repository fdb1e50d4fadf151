"""Fixtures of the reconciliation unit tests (the engine itself, ``engine``,
``any_engine`` and ``runner``, is in tests/conftest.py: the functional
test_limits_races_and_logged_errors.py uses it too), and of the tests that
run sharectl in-process (``sharectl_conf``, ``sharectl``)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory):
    """An SQLite database file at the head revision, migrated once per session."""
    from tests.unit.reconcile_harness import migrated_template

    return migrated_template(tmp_path_factory.mktemp("schema"))


@pytest.fixture
def engine_db(sqlite_template, tmp_path):
    """The ``engine`` fixture's database: a copy of the migrated template."""
    from tests.unit.reconcile_harness import sqlite_copy

    database = sqlite_copy(sqlite_template, tmp_path)
    yield database
    database.dispose()


@pytest.fixture
def sharectl_conf(tmp_path):
    """A factory: write the config ``sharemgr.conf`` in the test's folder,
    ``text`` after ``[DEFAULT]`` and its ``state_path`` (the embedded
    SQLite database is there), and return its path; ``synced``: the
    database made at the head revision, as ``sharectl db sync`` does."""
    root = logging.getLogger()  # cliff adds a console handler per run: taken off after
    handlers = list(root.handlers)

    def write(text: str, synced: bool = False):
        from sharemgr.db import migration
        from sharemgr.db.engine import Database

        path = tmp_path / "sharemgr.conf"
        path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n{text}")
        if synced:
            db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
            migration.upgrade(db)
            db.dispose()
        return path

    yield write
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)


@pytest.fixture
def sharectl(capsys):
    """Run ``sharectl --config-file CONF ARGS...`` in-process: (exit code,
    stdout, stderr)."""
    from sharemgr.cli import app

    def run(conf, *args: str) -> tuple[int, str, str]:
        code = app.main(["--config-file", str(conf), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
