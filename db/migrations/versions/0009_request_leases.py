"""Request leases and drift records

``requests.lease_expires_at``: the deadline of a running operation's driver
call (doc/reconciliation.rst, "Leases"). The periodic pass finds expired
leases with one query on (status, lease_expires_at).

``share_instances.drift``: what the last drift check found about the
instance on its backend (NULL: nothing), shown by ``sharectl share show``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 01:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("lease_expires_at", DateTime, nullable=True))
    op.create_index("ix_requests_status_lease", "requests", ["status", "lease_expires_at"])
    with op.batch_alter_table("share_instances") as batch:
        batch.add_column(sa.Column("drift", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("share_instances") as batch:
        batch.drop_column("drift")
    op.drop_index("ix_requests_status_lease", table_name="requests")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("lease_expires_at")
