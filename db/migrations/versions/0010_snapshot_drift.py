"""Drift records of snapshots

``share_snapshot_instances.drift``: what the last drift check found about
the snapshot on its backend (NULL: nothing), shown by ``sharectl snapshot
show``; replicas keep theirs in ``share_instances.drift`` (0009).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 04:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("share_snapshot_instances") as batch:
        batch.add_column(sa.Column("drift", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("share_snapshot_instances") as batch:
        batch.drop_column("drift")
