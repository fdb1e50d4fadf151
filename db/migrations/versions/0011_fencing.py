"""Fencing tokens and call deadlines

``fence`` on every table of a resource an operation acts on: the fencing
token an outcome is written under and a driver call carries
(doc/reconciliation.rst, "Fencing"). ``requests.lease_deadline``: the
running call's hard deadline, which a take-over of a backend that cannot
fence waits for. ``services.out_of_group``: why an engine is out of the
engines group, as it last said.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 05:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

FENCED = ("share_servers", "share_instances", "share_snapshot_instances", "share_groups",
          "share_group_snapshots", "share_backups")


def upgrade() -> None:
    for table in FENCED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("fence", sa.BigInteger(), server_default="0",
                                       nullable=False))
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("lease_deadline", sa.DateTime(), nullable=True))
    with op.batch_alter_table("services") as batch:
        batch.add_column(sa.Column("out_of_group", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.drop_column("out_of_group")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("lease_deadline")
    for table in FENCED:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("fence")
