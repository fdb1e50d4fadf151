"""stack_templates and stack_resources never reuse ids on SQLite

Both tables are purged as stacks complete. Without AUTOINCREMENT SQLite hands
out the largest id again once its row is gone, so a stale reference
(requires, replaces, a template id) could point at an unrelated new row.
PostgreSQL sequences and MariaDB's persisted AUTO_INCREMENT never reuse ids:
nothing to do there.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 08:30:00
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = ("stack_templates", "stack_resources")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": False}
        ):
            pass
