"""Fixtures of the reconciliation unit tests (the engine itself, ``engine``,
``any_engine`` and ``runner``, is in tests/conftest.py: the functional
test_limits_races_and_logged_errors.py uses it too)."""

from __future__ import annotations

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
