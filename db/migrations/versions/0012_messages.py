"""User messages

``messages``: what a user's failed or abandoned request left for them to
read (``sharectl message list``), kept until ``expires_at``
(``message_ttl``); action and detail by fixed ids (common/messages.py).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 08:00:00
"""

import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _datetime() -> "sa.types.TypeEngine[datetime.datetime]":
    return (sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb")
            .with_variant(mysql.DATETIME(fsp=6), "mysql"))


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", _datetime(), nullable=False),
        sa.Column("expires_at", _datetime(), nullable=False),
        sa.Column("resource_type", sa.String(length=32), nullable=False),
        sa.Column("resource_id", sa.String(length=64), nullable=False),
        sa.Column("action_id", sa.String(length=3), nullable=False),
        sa.Column("detail_id", sa.String(length=3), nullable=False),
        sa.Column("message_level", sa.String(length=16), nullable=False),
        sa.Column("request_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("messages") as batch:
        batch.create_index("ix_messages_resource", ["resource_id"], unique=False)
        batch.create_index("ix_messages_expires", ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_index("ix_messages_expires")
        batch.drop_index("ix_messages_resource")
    op.drop_table("messages")
