"""An access rule's key

A cephx rule of a CephFS share is answered with the key the client mounts
with (Manila's ``access_key``): the driver returns it from
``update_access`` and ``sharectl access list`` shows it. NULL for every
other rule.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 21:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
# A new nullable column: engines at 0017 neither read nor write it.
compat = "expand"


def upgrade() -> None:
    op.add_column("share_access_rules", sa.Column("access_key", sa.String(255), nullable=True))


def downgrade() -> None:
    op.drop_column("share_access_rules", "access_key")
