"""Counting what a process asks of its database, for the benchmarks.

Off unless asked for: ``SHAREMGR_SQL_STATS=<file>`` in a process's
environment makes each of its databases count statements (by verb and
table), commits and rollbacks, and write the counts to ``<file>`` as JSON
when the database is disposed (the daemon does on shutdown) and every
``FLUSH_SECONDS``, so a benchmark reads what a daemon did without a
profiler. doc/performance.rst says how the figures are made.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from sqlalchemy import event

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext

ENV = "SHAREMGR_SQL_STATS"
# ``SHAREMGR_SQL_TRACE=<file>`` as well: every statement, one line each with
# its thread, appended to ``<file>`` (to see which step of a path sends what).
TRACE_ENV = "SHAREMGR_SQL_TRACE"
FLUSH_SECONDS = 1.0

_TABLE = {  # where each verb names its table
    "SELECT": re.compile(r"\bFROM\s+[`\"]?(\w+)", re.IGNORECASE),
    "INSERT": re.compile(r"\bINTO\s+[`\"]?(\w+)", re.IGNORECASE),
    "UPDATE": re.compile(r"^\s*UPDATE\s+[`\"]?(\w+)", re.IGNORECASE),
    "DELETE": re.compile(r"\bFROM\s+[`\"]?(\w+)", re.IGNORECASE),
}


_MAIN = re.compile(r"\)\s*(UPDATE|DELETE|INSERT|SELECT)\b", re.IGNORECASE)


_WRITES = ("INSERT", "UPDATE", "DELETE")
_WROTE = "sharemgr_stats_wrote"  # in a connection's info: its transaction wrote


@functools.lru_cache(maxsize=1024)  # a process sends few distinct texts, many times
def _key(statement: str) -> str:
    verb = statement.split(None, 1)[0].upper() if statement.strip() else "?"
    if verb == "WITH":  # counted as the statement the CTE serves
        main = list(_MAIN.finditer(statement))
        if main:
            statement = statement[main[-1].start(1):]
            verb = main[-1].group(1).upper()
    m = _TABLE[verb].search(statement) if verb in _TABLE else None
    return f"{verb} {m.group(1)}" if m else verb


class Snapshot(TypedDict):
    """The counts as written: since ``at - seconds`` (epoch seconds)."""

    pid: int
    at: float
    seconds: float
    statements: int
    commits: int
    write_commits: int
    rollbacks: int
    by_kind: dict[str, int]  # "SELECT shares": how many


class SqlStats:
    def __init__(self, engine: sa.Engine, path: str | None = None,
                 trace: str | None = None) -> None:
        self.path = path
        self.trace = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
        self.started = time.time()
        self.statements: collections.Counter[str] = collections.Counter()
        self.commits = 0
        self.write_commits = 0  # commits of transactions that wrote something
        self.rollbacks = 0
        self._lock = threading.Lock()
        self._flushed = 0.0
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)

    def _statement(self, conn: sa.Connection, cursor: DBAPICursor, statement: str,
                   parameters: object, context: ExecutionContext | None,
                   executemany: bool) -> None:
        key = _key(statement)
        if key.split(None, 1)[0] in _WRITES:
            conn.info[_WROTE] = True
        with self._lock:
            self.statements[key] += 1
            if self.trace is not None:
                self.trace.write(f"{time.time():.4f} {threading.current_thread().name} | "
                                 f"{' '.join(statement.split())[:160]}\n")
        self._maybe_flush()

    def _commit(self, conn: sa.Connection) -> None:
        wrote = conn.info.pop(_WROTE, False)
        with self._lock:
            self.commits += 1
            self.write_commits += wrote

    def _rollback(self, conn: sa.Connection) -> None:
        conn.info.pop(_WROTE, None)
        with self._lock:
            self.rollbacks += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = time.time()
            return {"pid": os.getpid(), "at": round(now, 3),
                    "seconds": round(now - self.started, 3),
                    "statements": sum(self.statements.values()), "commits": self.commits,
                    "write_commits": self.write_commits,
                    "rollbacks": self.rollbacks, "by_kind": dict(self.statements)}

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if self.path and now - self._flushed >= FLUSH_SECONDS:
            self._flushed = now
            self.write()

    def write(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.snapshot(), f)
        os.replace(tmp, self.path)


def from_environment(engine: sa.Engine) -> SqlStats | None:
    path = os.environ.get(ENV)
    return SqlStats(engine, path, os.environ.get(TRACE_ENV)) if path else None
