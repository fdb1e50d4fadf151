"""The claim's walks on PostgreSQL

Right after a stack's preparation wrote 50,000 pending checks, PostgreSQL's
statistics still said ``requests`` was nearly empty, and its planner sorted
every pending row at each claim (23 ms a claim, at every node of the
stack). The claim now walks an index in id order for each host and for the
rows of no host, whatever the statistics say:

* ``requests (status, host, id)`` in place of ``(status, host)``: for a
  host, the id order PostgreSQL's index did not keep (SQLite's and
  InnoDB's indexes end in the primary key: the same index there);
* on PostgreSQL, a partial index of the pending requests of no host, by
  id: its planner reads no order from ``host IS NULL`` in an index.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 02:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
# Indexes only: engines at 0018 read and write the tables as before.
compat = "expand"


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.create_index("ix_requests_status_host_id", ["status", "host", "id"], unique=False)
        batch.drop_index("ix_requests_status_host")
    if op.get_bind().dialect.name == "postgresql":
        op.create_index("ix_requests_pending_hostless", "requests", ["id"],
                        postgresql_where=sa.text("status = 'pending' AND host IS NULL"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_requests_pending_hostless", table_name="requests")
    with op.batch_alter_table("requests") as batch:
        batch.create_index("ix_requests_status_host", ["status", "host"], unique=False)
        batch.drop_index("ix_requests_status_host_id")
