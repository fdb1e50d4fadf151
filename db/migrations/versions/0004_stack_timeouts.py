"""Stack timeouts; reconcile_passes.trigger fits any engine id

``stacks.timeout_seconds`` (nullable: no timeout) and
``stacks.traversal_started_at`` (when the current traversal was prepared)
let every engine's watchdog fail a traversal that outlives its timeout.

``reconcile_passes.trigger`` held ``peer:<engine id>``, and an engine id is
``<host>.<uuid>`` (up to 292 characters): VARCHAR(32) refused it on
PostgreSQL and MariaDB while SQLite stored it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 18:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("stacks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("timeout_seconds", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("traversal_started_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("reconcile_passes", schema=None) as batch_op:
        batch_op.alter_column("trigger", existing_type=sa.String(length=32),
                              type_=sa.String(length=400), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("reconcile_passes", schema=None) as batch_op:
        batch_op.alter_column("trigger", existing_type=sa.String(length=400),
                              type_=sa.String(length=32), existing_nullable=False)
    with op.batch_alter_table("stacks", schema=None) as batch_op:
        batch_op.drop_column("traversal_started_at")
        batch_op.drop_column("timeout_seconds")
