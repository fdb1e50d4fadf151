"""What the benchmarks share: a deployment of the real daemon (the
functional tests' harness) on SQLite or on PostgreSQL + Redis, and reading
the counts ``SHAREMGR_SQL_STATS`` makes a process write (db/stats.py)."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sharemgr.db.engine import Database

from tests.functional import harness
from tests.functional.harness import Deployment, wait_until

if TYPE_CHECKING:  # the counts' type; the benchmarks also run older code (doc/performance.rst)
    from sharemgr.db.stats import Snapshot

PG_ADMIN = os.environ.get("SHAREMGR_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHAREMGR_TEST_REDIS", "redis://127.0.0.1:6379")

# Engines as a user starts them: exec'ed, with no more than the daemon
# imports (the tests fork them from a process that imported the whole
# package: tests/functional/forks.py).
os.environ.setdefault("SHAREMGR_TEST_DAEMON", "exec")

# The daemon's own defaults (the test harness shortens some of them).
DEFAULTS = {"request_poll_interval": "0.2", "heartbeat_interval": "10",
            "request_poll_max_interval": "5"}


def _admin(sql: str) -> None:
    engine = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(sql)
    engine.dispose()


@contextlib.contextmanager
def deployment(root: Path, setup: str, defaults: bool = False,
               extra: dict[str, dict] | None = None, host: str = "hostA"
               ) -> Iterator[Deployment]:
    """A synced deployment; on 'servers' a fresh PostgreSQL database and the
    Redis server, dropped afterwards."""
    extra = {k: dict(v) for k, v in (extra or {}).items()}
    if defaults:
        extra.setdefault("DEFAULT", {}).update(DEFAULTS)
    db_url = coordination = name = None
    if setup == "servers":
        name = f"sm_bench_{uuid.uuid4().hex[:10]}"
        _admin(f"CREATE DATABASE {name}")
        db_url = sa.engine.make_url(PG_ADMIN).set(database=name).render_as_string(False)
        coordination = REDIS_URL
    d = Deployment(root, db_url=db_url, coordination_url=coordination, host=host,
                   extra=extra)
    try:
        d.sync()
        yield d
    finally:
        d.stop_all()
        if name:
            _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database(d: Deployment) -> Database:
    return harness.database(d)[0]


def wait_settled(d: Deployment, timeout: float = 120) -> None:
    """Until every engine has logged its startup pass (and a moment more)."""
    for engine in d.engines:
        engine.wait_for_log("(startup) on", timeout=timeout)
    time.sleep(1)


def read_stats(path: Path, after: float | None = None, timeout: float = 60) -> Snapshot:
    """The counts a process last wrote; with ``after``, wait for counts
    written after that time (a process writes them when it runs a
    statement, at most once a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stats = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # not yet, or replaced while read
            stats = None
        if stats is not None and (after is None or stats["at"] >= after):
            return stats
        time.sleep(0.05)
    raise RuntimeError(f"no counts in {path} written after {after}")


def rate(before: Snapshot, after: Snapshot) -> dict[str, object]:
    seconds = max(after["seconds"] - before["seconds"], 1e-9)
    kinds = {k: round((n - before["by_kind"].get(k, 0)) / seconds, 3)
             for k, n in after["by_kind"].items() if n != before["by_kind"].get(k, 0)}
    return {"seconds": round(seconds, 3),
            "statements": after["statements"] - before["statements"],
            "commits": after["commits"] - before["commits"],
            "statements_per_second": round((after["statements"] - before["statements"])
                                           / seconds, 3),
            "commits_per_second": round((after["commits"] - before["commits"]) / seconds, 3),
            "by_kind_per_second": dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}


def claim_latency(d: Deployment, share: dict[str, Any], timeout: float = 30) -> float:
    """Seconds between a share's create request being written and claimed."""
    from sharemgr.db import models

    db = database(d)
    try:
        def claimed() -> Any:
            with db.session() as s:
                req = s.scalars(sa.select(models.Request).where(
                    models.Request.resource_id == share["instance_id"])).first()
                return req if req is not None and req.claimed_at is not None else None

        req = wait_until(claimed, timeout=timeout, interval=0.05, what="the claim")
        return (req.claimed_at - req.created_at).total_seconds()
    finally:
        db.dispose()


def round_trip(d: Deployment, n: int = 200) -> float:
    """Median seconds of a ``SELECT 1`` on the deployment's database."""
    db = database(d)
    try:
        times = []
        with db.engine.connect() as conn:
            for _ in range(n):
                t = time.perf_counter()
                conn.exec_driver_sql("SELECT 1").all()
                times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2]
    finally:
        db.dispose()


def database_url(d: Deployment) -> str:
    return d.sections["database"].get("connection") or f"sqlite:///{d.state}/sharemgr.sqlite"


def commit_rate(url: str, commits: int) -> float:
    """Tiny single-row commits per second into a scratch table (dropped
    afterwards): the reference for per-node costs."""
    engine = sa.create_engine(url)
    table = f"bench_scratch_{uuid.uuid4().hex[:8]}"
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v INTEGER)")
        with engine.connect() as conn:
            started = time.perf_counter()
            for i in range(commits):
                conn.exec_driver_sql(f"INSERT INTO {table} (id, v) VALUES ({i}, {i})")
                conn.commit()
            elapsed = time.perf_counter() - started
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {table}")
    finally:
        engine.dispose()
    return commits / elapsed


def python_cpu_ms(rounds: int = 5) -> float:
    """The CPU milliseconds of a fixed pure-Python workload (dicts, strings,
    JSON: the kind of work an engine does around its statements), the
    fastest of ``rounds``: how fast this machine runs interpreted code now,
    so that CPU per unit of work compares across machines and runs."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for i in range(20_000):
            row = {"id": i, "name": f"s{i}", "size": i % 7, "tags": [i, str(i)]}
            json.loads(json.dumps(row))
        best = min(best, time.process_time() - start)
    return round(1000 * best, 2)
