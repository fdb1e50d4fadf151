"""The size an extend under way asks for

``share_instances.pending_size``: written with the ``extending`` status by
the extend's plan, so that a pool's allocation counts an extend under way
at its new size (db/capacity.py) before the driver has made it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 12:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
# A nullable column engines at 0013 never read or write.
compat = "expand"


def upgrade() -> None:
    with op.batch_alter_table("share_instances") as batch:
        batch.add_column(sa.Column("pending_size", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("share_instances") as batch:
        batch.drop_column("pending_size")
