"""Indexes for the claim and for share deletes

``requests (status, id)``: a claim takes the oldest pending requests; with
only ``(status, host)`` SQLite sorted every pending row at each claim, and
a stack's preparation writes one pending request per leaf (50,000 for a
stack of 50,000 independent shares). In this index's order the claim stops
after the few it takes.

``share_snapshots (share_id)``: every share delete counts the share's live
snapshots (``resources.share_to_delete``), which without it read the whole
table on SQLite and PostgreSQL (MariaDB has one already, for the foreign
key).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 04:20:00
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None
# Indexes only: engines at 0015 read and write the tables as before.
compat = "expand"


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.create_index("ix_requests_status_id", ["status", "id"], unique=False)
    with op.batch_alter_table("share_snapshots") as batch:
        batch.create_index("ix_share_snapshots_share_id", ["share_id"], unique=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        # The foreign key needs an index, and MariaDB dropped the one it had
        # made for it (named after the column) when this one came: back first.
        op.create_index("share_id", "share_snapshots", ["share_id"])
    with op.batch_alter_table("share_snapshots") as batch:
        batch.drop_index("ix_share_snapshots_share_id")
    with op.batch_alter_table("requests") as batch:
        batch.drop_index("ix_requests_status_id")
