"""What a group snapshot holds

A group snapshot now records the shares of its group it was taken of, one
row each (Manila's share group snapshot members): the driver is given them
and a share one holds is not deleted while it lives.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 15:30:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None
# A new table: engines at 0019 neither read nor write it.
compat = "expand"


def upgrade() -> None:
    op.create_table(
        "share_group_snapshot_members",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("share_group_snapshot_id", sa.String(36),
                  sa.ForeignKey("share_group_snapshots.id"), nullable=False),
        sa.Column("share_id", sa.String(36), sa.ForeignKey("shares.id"), nullable=False),
        sa.Column("share_instance_id", sa.String(36), sa.ForeignKey("share_instances.id"),
                  nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("share_proto", sa.String(16), nullable=False),
        # Microseconds on MariaDB too, as every time column since 0017.
        sa.Column("created_at", sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql",
                                                           "mariadb"), nullable=False),
    )
    op.create_index("ix_group_snapshot_members_snapshot", "share_group_snapshot_members",
                    ["share_group_snapshot_id"])
    op.create_index("ix_group_snapshot_members_share", "share_group_snapshot_members",
                    ["share_id"])


def downgrade() -> None:
    op.drop_table("share_group_snapshot_members")
