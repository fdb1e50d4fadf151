"""sharectl db sync | db version."""

from __future__ import annotations

import argparse

from sharemgr.cli import base


class DbSync(base.Command):
    """Create or upgrade the database schema to the newest revision."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.db import migration  # alembic is slow to import: only here

        db = self.app.context.database(create=True)
        before = migration.current(db)
        migration.upgrade(db)
        self.app.stdout.write(
            f"database at revision {migration.current(db)} (was {before or 'empty'})\n"
        )
        return 0


class DbVersion(base.ShowOne):
    """Show the schema revision of the database and the newest one."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import migration

        db = self.app.context.db
        current = migration.current(db)
        head = migration.head()
        return ("current", "head", "up_to_date"), (current, head, current == head)
