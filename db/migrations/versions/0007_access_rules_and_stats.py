"""Share access rules and backend capabilities

``share_access_rules``: who may mount a share (Manila's share access map),
one row per rule with its state (``queued_to_apply`` ... ``error``), kept
after a deny with ``deleted_at`` set. ``share_instances.access_rules_status``
is Manila's summary of an instance's rules (``active``, ``syncing``,
``error``).

``backend_stats``: what each backend's driver last reported from
``get_share_stats()`` (capabilities and pools), refreshed periodically by the
engines that serve it; intake reads it to refuse what a backend cannot do.

An access_to holds an IP or CIDR (IPv6 with prefix: 43), a user or group
name, or a certificate's common name: Manila's 255.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 00:40:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "share_access_rules",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("share_id", sa.String(36), sa.ForeignKey("shares.id"), nullable=False),
        sa.Column("access_type", sa.String(32), nullable=False),
        sa.Column("access_to", sa.String(255), nullable=False),
        sa.Column("access_level", sa.String(2), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("created_at", DateTime, nullable=False),
        sa.Column("updated_at", DateTime),
        sa.Column("deleted_at", DateTime),
    )
    op.create_index("ix_share_access_rules_share", "share_access_rules", ["share_id"])
    op.create_index("ix_share_access_rules_state", "share_access_rules", ["state"])
    with op.batch_alter_table("share_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("access_rules_status", sa.String(32),
                                      nullable=False, server_default="active"))
    op.create_table(
        "backend_stats",
        sa.Column("host", sa.String(512), primary_key=True),
        sa.Column("stats", sa.JSON, nullable=False),
        sa.Column("engine_id", sa.String(320)),
        sa.Column("updated_at", DateTime),
    )


def downgrade() -> None:
    op.drop_table("backend_stats")
    with op.batch_alter_table("share_instances", schema=None) as batch_op:
        batch_op.drop_column("access_rules_status")
    op.drop_index("ix_share_access_rules_state", table_name="share_access_rules")
    op.drop_index("ix_share_access_rules_share", table_name="share_access_rules")
    op.drop_table("share_access_rules")
