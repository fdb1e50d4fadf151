"""Alembic environment: runs on the connection that db/migration.py hands it."""

from alembic import context
from sharemgr.db import models

config = context.config
target_metadata = models.Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
