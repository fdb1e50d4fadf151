"""Stack events

``stack_events``: one row per status change of a stack or of one of its
resource rows, written in the transaction of the change (db/stack_events.py,
doc/convergence.rst "Events"); the newest ``max_events_per_stack`` of each
stack are kept, all of them go with the stack.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 01:40:00
"""

import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None
# A new table engines at 0014 never read or write (their status changes
# simply leave no event).
compat = "expand"


def _datetime() -> "sa.types.TypeEngine[datetime.datetime]":
    return (sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb")
            .with_variant(mysql.DATETIME(fsp=6), "mysql"))


def upgrade() -> None:
    op.create_table(
        "stack_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("stack_id", sa.String(length=36), nullable=False),
        sa.Column("resource_name", sa.String(length=255), nullable=True),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("physical_id", sa.String(length=64), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("traversal_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", _datetime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("stack_events") as batch:
        batch.create_index("ix_stack_events_stack", ["stack_id", "id"], unique=False)
        batch.create_index("ix_stack_events_resource", ["stack_id", "resource_name", "id"],
                           unique=False)


def downgrade() -> None:
    with op.batch_alter_table("stack_events") as batch:
        batch.drop_index("ix_stack_events_resource")
        batch.drop_index("ix_stack_events_stack")
    op.drop_table("stack_events")
