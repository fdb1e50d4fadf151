"""Per-backend state of each engine

``service_backends``: one row per (engine, backend) an engine has enabled,
with the backend's state: ``initializing`` until its first set-up ends,
``up`` once ``do_setup`` and ``check_for_setup_error`` passed, ``failed``
with the reason while the engine retries the set-up with back-off.
``sharectl service list`` shows them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 01:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "service_backends",
        sa.Column("engine_id", sa.String(320), primary_key=True),
        sa.Column("backend", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(1024)),
        sa.Column("updated_at", DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_backends")
