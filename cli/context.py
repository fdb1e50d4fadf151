"""What a sharectl command works with: config, database, coordination."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from oslo_config import cfg
from sharemgr.manager import config

if TYPE_CHECKING:
    from sharemgr.db.engine import Database
    from sharemgr.manager.coordination import Coordinator

# The database (SQLAlchemy) and coordination (tooz) modules are imported on
# first use: most commands need one of them, none needs both.


class Context:
    def __init__(self, config_file: str | None) -> None:
        self.conf = cfg.ConfigOpts()
        config.load([], config_file=config_file, conf=self.conf, prog="sharectl")
        self._db: Database | None = None
        self._coordinator: Coordinator | None = None

    @property
    def db(self) -> Database:
        """The database, which must be there (an SQLite file is not made)
        with a schema this release may use."""
        return self.database(create=False)

    def database(self, create: bool, schema: bool = True) -> Database:
        """The database; ``create``: an SQLite file that is not there is made
        (``db sync`` only); ``schema``: refused (DatabaseUnavailable) unless
        its schema is one this release may use, as the daemon refuses it
        (a sharectl of another release wrote rows into a schema it was not
        built for, and said so only when a query happened to fail)."""
        if self._db is None:
            from sharemgr.db.engine import Database

            db = Database(
                config.database_url(self.conf),
                connect_timeout=self.conf.database.connect_timeout,
                pool_size=2,
                create=create,
            )
            db.retry = config.retry_policy(self.conf)
            db.max_events_per_stack = self.conf.max_events_per_stack
            db.check()
            if schema and not create:
                _check_schema(db)
            self._db = db
        return self._db

    @property
    def coordinator(self) -> Coordinator:
        """A coordinator that never joins the engines group (it only looks)."""
        if self._coordinator is None:
            from sharemgr.manager.coordination import Coordinator

            coord = Coordinator(
                config.coordination_url(self.conf), f"sharectl.{uuid.uuid4()}"
            )
            coord.start(heartbeat=False)
            self._coordinator = coord
        return self._coordinator

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.stop()
        if self._db is not None:
            self._db.dispose()


def _check_schema(db: Database) -> None:
    from sharemgr.db import schema_rev

    if schema_rev.current(db) == schema_rev.HEAD:  # without alembic: nearly always
        return
    from sharemgr.db import migration
    from sharemgr.db.engine import DatabaseUnavailable, safe_url

    runs, why = migration.can_run(db, who="sharectl")
    if not runs:
        db.dispose()
        raise DatabaseUnavailable(f"database {safe_url(db.url)}: {why}")
