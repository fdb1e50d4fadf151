"""stack_templates.stack_id: which stack a template belongs to

Without it a template an update superseded cannot be found again once no
row refers to it, and every stack update would leak one template row.
Nullable (templates stored before this revision have none) and without a
foreign key, so a stack row and its templates can be purged in any order.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("stack_templates", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stack_id", sa.String(length=36), nullable=True))
        batch_op.create_index("ix_stack_templates_stack", ["stack_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("stack_templates", schema=None) as batch_op:
        batch_op.drop_index("ix_stack_templates_stack")
        batch_op.drop_column("stack_id")
