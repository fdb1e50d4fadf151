"""sharectl db sync | db version."""

from __future__ import annotations

import argparse

from sharemgr.cli import base


class DbSync(base.Command):
    """Create or upgrade the database schema to the newest revision."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.db import migration  # alembic is slow to import: only here

        db = self.app.context.database(create=True)
        before, scripts = migration.current(db), migration.script()
        if migration.is_newer(before, scripts):  # a later release's: not this one's to change
            from sharemgr.db.engine import DatabaseUnavailable, safe_url

            runs, why = migration.can_run(db, who="sharectl", scripts=scripts)
            if not runs:
                raise DatabaseUnavailable(f"database {safe_url(db.url)}: {why}")
            self.app.stdout.write(f"database at revision {before}, newer than this "
                                  f"release's {migration.head(scripts)}: nothing to do\n")
            return 0
        migration.upgrade(db)
        self.app.stdout.write(
            f"database at revision {migration.current(db)} (was {before or 'empty'})\n"
        )
        return 0


class DbVersion(base.ShowOne):
    """Show the schema revision of the database and the newest one."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import migration

        db = self.app.context.database(create=False, schema=False)  # whatever it is at
        current = migration.current(db)
        head = migration.head()
        return ("current", "head", "up_to_date"), (current, head, current == head)
