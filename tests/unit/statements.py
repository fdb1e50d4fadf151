"""The SQL a database is sent, recorded by tests that count statements."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa


@contextlib.contextmanager
def sent(db, *starts: str) -> Iterator[list[tuple[str, object]]]:
    """The statements (text, parameters) ``db`` is sent inside the block
    whose text starts with one of ``starts``."""
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().startswith(starts):
            seen.append((statement, parameters))

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
