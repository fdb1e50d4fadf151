"""Microseconds in the two times MariaDB kept in whole seconds

``requests.lease_deadline`` (0011) and ``stacks.traversal_started_at``
(0004) were added as plain ``DATETIME`` columns, which MariaDB cuts to the
second: a call's deadline, now computed by the database's clock
(db/clock.py), came out up to a second early. Every other time column is
``DATETIME(6)`` there already; SQLite and PostgreSQL keep microseconds
anyway, so this changes MariaDB only.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 17:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
# A wider column: engines at 0016 read and write it as before.
compat = "expand"

_COLUMNS = (("requests", "lease_deadline"), ("stacks", "traversal_started_at"))


def upgrade() -> None:
    if op.get_bind().dialect.name != "mysql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, existing_type=sa.DateTime(),
                        type_=mysql.DATETIME(fsp=6), existing_nullable=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "mysql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, existing_type=mysql.DATETIME(fsp=6),
                        type_=sa.DateTime(), existing_nullable=True)
