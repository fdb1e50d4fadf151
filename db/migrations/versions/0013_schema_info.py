"""Schema facts for rolling upgrades

``schema_info``: what ``sharectl db sync`` records about the schema it
left, by name. ``engine_floor``: the oldest schema head whose engines
still work on it (every migration since is an expand: new tables,
nullable columns, indexes), read by an engine at start when the database
is newer than its own head (db/migration.py, doc/operations.rst "Rolling
upgrades").

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None
# A new table nobody reads before this revision: engines at 0012 work on it.
compat = "expand"


def upgrade() -> None:
    op.create_table(
        "schema_info",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("schema_info")
