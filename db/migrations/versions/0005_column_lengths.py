"""Backend hosts fit any '<host>@<backend>'; snapshot provider locations any text

Every column that holds '<host>@<backend>' (requests, share servers, share
instances, share groups, backups, backend_info) was VARCHAR(255), yet a
hostname alone may be 253 characters and the backend name comes on top:
PostgreSQL and MariaDB refused the row (SQLite stored it). They are now
VARCHAR(512); ``models.BACKEND_HOST`` says why.

``share_snapshot_instances.provider_location`` is whatever a driver returns
for a snapshot it made; it becomes TEXT so a long location never fails the
record of a snapshot that exists on the backend.

On MariaDB (utf8mb4, 4 bytes a character) the widest index on these columns,
(host, status) of share_instances, takes (512 + 40) * 4 = 2208 bytes, under
InnoDB's 3072.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OLD_HOST, NEW_HOST = 255, 512

# (table, nullable) of every '<host>@<backend>' column named host.
HOST_COLUMNS = (
    ("requests", True),
    ("share_servers", False),
    ("share_instances", False),
    ("share_groups", False),
    ("share_backups", False),
    ("backend_info", False),
)


def _hosts(old: int, new: int) -> None:
    for table, nullable in HOST_COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column("host", existing_type=sa.String(length=old),
                                  type_=sa.String(length=new), existing_nullable=nullable)


def upgrade() -> None:
    _hosts(OLD_HOST, NEW_HOST)
    with op.batch_alter_table("share_snapshot_instances", schema=None) as batch_op:
        batch_op.alter_column("provider_location", existing_type=sa.String(length=255),
                              type_=sa.Text(), existing_nullable=True)


def downgrade() -> None:
    # Refused by PostgreSQL and MariaDB if a longer value is stored: nothing
    # is cut silently.
    with op.batch_alter_table("share_snapshot_instances", schema=None) as batch_op:
        batch_op.alter_column("provider_location", existing_type=sa.Text(),
                              type_=sa.String(length=255), existing_nullable=True)
    _hosts(NEW_HOST, OLD_HOST)
