"""Status indexes for the reconciliation scan

The scan looks for rows in transient statuses on ``host`` or on one of its
pools (``host = :h OR host LIKE 'h#%'``); the (host, status) indexes cannot
serve that OR, so a pass with nothing stuck read every row. An index on
``status`` alone finds the few transient rows among many settled ones.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 22:30:00
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_share_instances_status", "share_instances"),
    ("ix_share_servers_status", "share_servers"),
    ("ix_share_groups_status", "share_groups"),
    ("ix_share_backups_status", "share_backups"),
)


def upgrade() -> None:
    for name, table in INDEXES:
        op.create_index(name, table, ["status"])


def downgrade() -> None:
    for name, table in INDEXES:
        op.drop_index(name, table_name=table)
