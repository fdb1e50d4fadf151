"""Rolling upgrades (db/migration.py): the floor db sync records, and
whether an engine of this release runs on a schema older, at or newer
than its head. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sharemgr.db import migration
from sharemgr.db.engine import Database


def _set(db: Database, revision: str, floor: str | None) -> None:
    """The database as a newer release's db sync would leave it."""
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{revision}'")
        conn.exec_driver_sql("DELETE FROM schema_info")
        if floor is not None:
            conn.execute(sa.text("INSERT INTO schema_info (name, value) VALUES (:n, :v)"),
                         {"n": migration.FLOOR, "v": floor})


def test_the_floor_walks_back_over_expand_migrations():
    head = migration.head()
    floor = migration.floor()
    script = migration.script()
    # Every migration above the floor is an expand; the floor's own is not
    # (or it is the first).
    rev = script.get_revision(head)
    while rev.revision != floor:
        assert getattr(rev.module, "compat", None) == "expand", rev.revision
        rev = script.get_revision(rev.down_revision)
    assert getattr(rev.module, "compat", "contract") != "expand" or not rev.down_revision


def test_db_sync_records_the_floor_and_an_engine_runs_at_head(db):
    with db.connect() as conn:
        stored = conn.execute(sa.text("SELECT value FROM schema_info WHERE name = :n"),
                              {"n": migration.FLOOR}).scalar()
    assert stored == migration.floor()
    assert migration.can_run(db) == (True, None)


def test_an_engine_on_a_newer_schema_runs_only_above_its_floor(db):
    _set(db, "9999", migration.head())  # a newer release's expand on our head
    runs, why = migration.can_run(db)
    assert runs and "newer than this engine's" in why and "running" in why
    _set(db, "9999", "9998")  # a contract since: engines from 9998 on only
    runs, why = migration.can_run(db)
    assert not runs and "upgrade this engine" in why and "9998" in why
    _set(db, "9999", None)  # no floor recorded: nothing says it is safe
    assert migration.can_run(db)[0] is False


def test_an_engine_never_runs_on_an_older_schema(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/old.sqlite")
    try:
        migration.upgrade(db, "0012")
        runs, why = migration.can_run(db)
        assert not runs and "run 'sharectl db sync'" in why
        empty = Database(f"sqlite:///{tmp_path}/empty.sqlite")
        assert migration.can_run(empty)[0] is False
        empty.dispose()
    finally:
        db.dispose()


def test_the_snapshot_index_downgrades_and_upgrades_again(db):
    """0016's index replaces, on MariaDB, the one the foreign key had: its
    downgrade gives that back first (MariaDB refuses to drop an index a
    foreign key needs), and the schema at head is the models' again."""
    from alembic import command

    config = migration._config()
    for target in ("0015", "head"):
        with db.engine.begin() as conn:
            config.attributes["connection"] = conn
            (command.downgrade if target == "0015" else command.upgrade)(config, target)
    with db.engine.connect() as conn:
        assert migration.schema_diff(conn) == []


def test_every_time_column_keeps_microseconds(db):
    """A lease's deadline is computed by the database to the microsecond
    (db/clock.py): MariaDB cut two columns added as plain DATETIME to the
    second (0017 widens them); its downgrade and upgrade run again."""
    from alembic import command

    def cut() -> list[tuple[str, str]]:
        with db.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND data_type = 'datetime' "
                "AND datetime_precision < 6 ORDER BY 1, 2"))]

    if db.dialect != "mysql":
        pytest.skip("SQLite and PostgreSQL keep microseconds in any timestamp")
    assert cut() == []
    config = migration._config()
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0016")
    assert cut() == [("requests", "lease_deadline"), ("stacks", "traversal_started_at")]
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    assert cut() == []
