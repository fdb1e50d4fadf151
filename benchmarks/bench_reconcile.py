"""Benchmark: reconciliation passes with the dummy driver and tooz file locks,
on SQLite or PostgreSQL.

Prints JSON, one object per figure, each with its inputs and the ratio to a
reference measured in the same run (the machine-independent figure):

``stuck``
    a pass over N share instances stuck in ``creating``, healthy on the
    backend, zero driver delay: resources per second with ``--workers``
    workers; reference: the same pass with one worker.
``delay``
    the same with ``--delay`` seconds per ``get_share_status`` call and the
    driver's batch method switched off (every resource is one slow call):
    seconds; reference: the bound ``1.3 * N * delay / workers`` plus the
    zero-delay pass of this run (ratio <= 1 meets it). Also the pass with
    the batch method on (one slow call per batch).
``healthy``
    a pass over ``--healthy`` available instances, nothing stuck: seconds
    and SQL statements; reference: the same over a tenth as many (the same
    statement count shows it is constant), and the plan of the scan query.
``redis``
    the ``stuck`` pass with a Redis coordinator (tooz's heart on: every held
    lock renewed in each heartbeat, so a pass holds at most
    ``locks_held_limit`` of them and its batches are smaller); reference: the
    same pass with the file coordinator.
``daemon``
    the startup pass of a real ``share-manager`` (four reconciliation
    workers by default) over N instances a crash left in ``creating``, as
    the daemon records it (``sharectl reconcile show``): resources per
    second; reference: the same pass run in this process.
``memory``
    peak resident memory (``getrusage``) of a ``stuck`` pass over N and over
    N/2, each in a process of its own; the pass's own growth is the peak
    after the pass minus the peak before it.

    .venv/bin/python benchmarks/bench_reconcile.py --db sqlite --resources 10000 \\
        --workers 4 --delay 0.02 [--figures stuck,delay,healthy,memory]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sharemgr.db import migration, models
from sharemgr.db.engine import Database
from sharemgr.db.stats import SqlStats
from sharemgr.drivers.base import STATUS_METHODS

try:
    from sharemgr.drivers.base import BATCH_STATUS_METHODS
except ImportError:  # the code before batches: the same script measures "before"
    BATCH_STATUS_METHODS = {}
from sharemgr.common import vocab
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.testing import build_driver
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.handlers import HANDLERS
from sharemgr.manager.operations import Operations, lock_name
from sharemgr.reconcile.reconciler import Reconciler

PG_ADMIN = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379"
HOST = "bench@be"


def fill(db: Database, driver: DummyDriver, count: int, status: str, host: str,
         coord: Coordinator | None) -> None:
    """``count`` shares with one instance each in ``status``, all of them
    available on the backend (bulk inserts: the setup is not measured).
    ``coord``: a file coordinator whose lock files the crashed operations
    left (creating 10,000 files is the setup's cost, not the pass's)."""
    shares, insts = [], []
    for i in range(count):
        share_id, inst_id = models.new_id(), models.new_id()
        shares.append({"id": share_id, "name": f"b{i}", "size": 1, "share_proto": "NFS"})
        insts.append({"id": inst_id, "share_id": share_id, "host": host, "status": status,
                      "export_locations": []})
    for start in range(0, count, 5000):
        with db.session() as session:
            session.execute(sa.insert(models.Share), shares[start:start + 5000])
            session.execute(sa.insert(models.ShareInstance), insts[start:start + 5000])
    if status != "creating":
        return
    for inst in insts if coord else []:
        with coord.try_lock(lock_name(vocab.SHARE_INSTANCE, inst["id"])):
            pass
    with driver.state.transaction() as tx:
        for share, inst in zip(shares, insts, strict=True):
            tx.insert(id=inst["id"], kind="share", share_id=share["id"], name=share["name"],
                      size=1, status="available",
                      export_locations=[{"path": f"h:/shares/{inst['id']}",
                                         "is_admin_only": False, "preferred": True}])


class Setup:
    """A fresh database (SQLite file or PostgreSQL database of its own), a
    dummy backend and an engine's reconciler over them."""

    def __init__(self, root: Path, dbkind: str, workers: int, delay: float = 0.0,
                 batch_method: bool = True, coordination: str = "file") -> None:
        self.root = root
        self.coordination = coordination
        self.pg_name = None
        if dbkind == "postgresql":
            self.pg_name = f"bench_{uuid.uuid4().hex[:12]}"
            self._admin(f"CREATE DATABASE {self.pg_name}")
            url = sa.engine.make_url(PG_ADMIN).set(database=self.pg_name)
            self.db = Database(url.render_as_string(False))
        else:
            self.db = Database(f"sqlite:///{root}/bench.sqlite")
        migration.upgrade(self.db)
        methods = list(STATUS_METHODS)
        if batch_method and BATCH_STATUS_METHODS:
            methods.append("get_share_statuses")
        options: dict[str, Any] = {"dummy_status_methods": methods}
        if delay:
            options["dummy_method_delays"] = {"get_share_status": delay}
            if BATCH_STATUS_METHODS:
                options["dummy_method_delays"]["get_share_statuses"] = delay
        self.driver = build_driver(DummyDriver, root, backend="be", **options)
        self.engine = f"bench.{uuid.uuid4()}"
        if coordination == "redis":
            # The heart on, as in the daemon: its renewals are the cost.
            # The daemon's URL with the default membership_timeout (10 s).
            self.coord = Coordinator(f"{REDIS}?namespace=bench_{uuid.uuid4().hex[:12]}"
                                     "&membership_timeout=10&lock_timeout=10", self.engine)
            self.coord.start(heartbeat=True)
        else:
            self.coord = Coordinator(f"file://{root}/coord?timeout=30", self.engine)
            self.coord.start(heartbeat=False)
        self.coord.join_engines()
        ops = Operations(self.db, {"be": self.driver}, self.coord, self.engine, HANDLERS)
        self.rec = Reconciler(self.db, {"be": self.driver}, self.coord, ops, "bench",
                              self.engine, workers)

    @staticmethod
    def _admin(sql: str) -> None:
        engine = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(sql)
        engine.dispose()

    def populate(self, count: int, status: str) -> None:
        fill(self.db, self.driver, count, status, HOST,
             self.coord if self.coordination == "file" else None)

    def run(self) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        result = self.rec.run("bench")
        return time.perf_counter() - started, result

    def close(self) -> None:
        self.coord.stop()
        self.db.dispose()
        if self.pg_name:
            self._admin(f"DROP DATABASE IF EXISTS {self.pg_name} WITH (FORCE)")


def stuck_pass(dbkind: str, resources: int, workers: int, delay: float = 0.0,
               batch_method: bool = True, coordination: str = "file"
               ) -> tuple[float, dict[str, Any]]:
    """Seconds of a pass over ``resources`` stuck instances, and its SQL counts."""
    with tempfile.TemporaryDirectory() as tmp:
        setup = Setup(Path(tmp), dbkind, workers, delay, batch_method, coordination)
        try:
            setup.populate(resources, "creating")
            stats = SqlStats(setup.db.engine)
            elapsed, result = setup.run()
            assert result["outcomes"] == {"share_instance": {"available": resources}}, result
            snap = stats.snapshot()
            return elapsed, {"statements": snap["statements"], "commits": snap["commits"],
                             "by_kind": snap["by_kind"]}
        finally:
            setup.close()


def _stuck_figure(args: argparse.Namespace, benchmark: str, seconds: float,
                  sql: dict[str, object], reference: str, reference_seconds: float,
                  coordination: str) -> dict[str, object]:
    """A stuck pass's figure beside the reference pass of the same run."""
    return {
        "benchmark": benchmark,
        "figure": {"resources_per_second": round(args.resources / seconds, 1),
                   "seconds": round(seconds, 3), "sql": sql},
        "reference": {f"{reference}_resources_per_second":
                      round(args.resources / reference_seconds, 1),
                      f"{reference}_seconds": round(reference_seconds, 3)},
        "ratio_to_reference": round(seconds / reference_seconds, 3),
        "inputs": {"resources": args.resources, "workers": args.workers, "delay": 0.0,
                   "database": args.db, "coordination": coordination, "driver": "dummy"},
    }


def figure_stuck(args: argparse.Namespace) -> dict[str, object]:
    one, _ = stuck_pass(args.db, args.resources, 1)
    many, sql = stuck_pass(args.db, args.resources, args.workers)
    return _stuck_figure(args, "reconcile_stuck_zero_delay", many, sql, "one_worker", one,
                         "file")


def figure_redis(args: argparse.Namespace) -> dict[str, object]:
    file, _ = stuck_pass(args.db, args.resources, args.workers)
    redis, sql = stuck_pass(args.db, args.resources, args.workers, coordination="redis")
    return _stuck_figure(args, "reconcile_stuck_redis_locks", redis, sql, "file_coordinator",
                         file, "redis (heart on)")


def figure_delay(args: argparse.Namespace) -> dict[str, object]:
    zero, _ = stuck_pass(args.db, args.resources, args.workers)
    single, _ = stuck_pass(args.db, args.resources, args.workers, args.delay,
                           batch_method=False)
    batched, _ = stuck_pass(args.db, args.resources, args.workers, args.delay)
    bound = 1.3 * args.resources * args.delay / args.workers + zero
    return {
        "benchmark": "reconcile_stuck_driver_delay",
        "figure": {"seconds_single_method": round(single, 3),
                   "seconds_batch_method": round(batched, 3)},
        "reference": {"bound_seconds": round(bound, 3), "zero_delay_seconds": round(zero, 3),
                      "ideal_seconds": round(args.resources * args.delay / args.workers, 3)},
        "ratio_to_reference": round(single / bound, 3),
        "inputs": {"resources": args.resources, "workers": args.workers, "delay": args.delay,
                   "database": args.db, "coordination": "file", "driver": "dummy"},
    }


def healthy_pass(dbkind: str, count: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        setup = Setup(Path(tmp), dbkind, workers)
        try:
            setup.populate(count, "available")
            setup.run()  # warm: connections, compiled statements
            stats = SqlStats(setup.db.engine)
            elapsed, result = setup.run()
            assert result["outcomes"] == {}, result
            snap = stats.snapshot()
            return {"seconds": round(elapsed, 4), "statements": snap["statements"],
                    "by_kind": snap["by_kind"], "scan_plan": scan_plan(setup.db)}
        finally:
            setup.close()


def scan_plan(db: Database) -> list[str]:
    """The database's plan of the share-instance scan (is the index used?)."""
    from sharemgr.db.resources import host_match
    from sharemgr.manager import kinds

    m = models.ShareInstance
    stmt = sa.select(m).where(m.deleted_at.is_(None), host_match(m.host, HOST),
                              m.status.in_(list(kinds.kind(vocab.SHARE_INSTANCE).transient)))
    compiled = stmt.compile(db.engine, compile_kwargs={"literal_binds": True})
    prefix = "EXPLAIN QUERY PLAN " if db.engine.dialect.name == "sqlite" else "EXPLAIN "
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(prefix + str(compiled)).fetchall()
    return [" ".join(str(c) for c in row) for row in rows]


def figure_healthy(args: argparse.Namespace) -> dict[str, object]:
    big = healthy_pass(args.db, args.healthy, args.workers)
    small = healthy_pass(args.db, max(1, args.healthy // 10), args.workers)
    return {
        "benchmark": "reconcile_nothing_stuck",
        "figure": {"instances": args.healthy, **big},
        "reference": {"instances": max(1, args.healthy // 10),
                      **{k: v for k, v in small.items() if k != "scan_plan"}},
        "ratio_to_reference": round(big["seconds"] / max(small["seconds"], 1e-6), 3),
        "inputs": {"healthy": args.healthy, "workers": args.workers, "database": args.db},
    }


def rss_child(args: argparse.Namespace) -> None:
    """In a process of its own: peak RSS before and after a stuck pass."""
    with tempfile.TemporaryDirectory() as tmp:
        setup = Setup(Path(tmp), args.db, args.workers)
        try:
            setup.populate(args.resources, "creating")
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            setup.run()
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        finally:
            setup.close()
    print(json.dumps({"peak_rss_kib_before_pass": before, "peak_rss_kib_after_pass": after}))


def figure_memory(args: argparse.Namespace) -> dict[str, object]:
    def child(n: int) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", "--db", args.db, "--resources", str(n),
             "--workers", str(args.workers)], capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        got["pass_growth_kib"] = got["peak_rss_kib_after_pass"] - got["peak_rss_kib_before_pass"]
        return got

    half, full = child(max(1, args.resources // 2)), child(args.resources)
    return {
        "benchmark": "reconcile_peak_rss",
        "figure": {"resources": args.resources, **full},
        "reference": {"resources": max(1, args.resources // 2), **half},
        "ratio_to_reference": round(full["peak_rss_kib_after_pass"]
                                    / half["peak_rss_kib_after_pass"], 3),
        "inputs": {"workers": args.workers, "database": args.db},
    }


def daemon_pass(dbkind: str, resources: int, workers: int) -> dict[str, Any]:
    """The startup pass of a real ``share-manager`` over ``resources``
    instances a crash left in ``creating``, as the daemon records it
    (``sharectl reconcile show``), and the engine's CPU seconds until then."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import common

    setup = "sqlite" if dbkind == "sqlite" else "servers"
    extra = {"DEFAULT": {"reconciliation_workers": str(workers),
                         "startup_reconciliation_wait_seconds": "1"}}
    with tempfile.TemporaryDirectory() as tmp, \
            common.deployment(Path(tmp) / "d", setup, defaults=True, extra=extra) as d:
        db = common.database(d)
        driver = build_driver(DummyDriver, Path(tmp) / "driver", backend="dummy",
                              dummy_state_path=d.sections["dummy"]["dummy_state_path"])
        coord = None
        if setup == "sqlite":  # the lock files the crashed operations left
            coord = Coordinator(f"file://{d.state}/coordination?timeout=30", "bench.setup")
            coord.start(heartbeat=False)
        fill(db, driver, resources, "creating", f"{d.host}@dummy", coord)
        if coord:
            coord.stop()
        db.dispose()
        engine = d.start()
        engine.wait_for_log("(startup) on", timeout=max(120, resources / 50))
        cpu = common.cpu_seconds(engine.proc.pid)
        shown = d.json("reconcile", "show")
    assert shown["outcomes"] == {"share_instance": {"available": resources}}, shown
    return {"seconds": float(shown["duration_seconds"]), "engine_cpu_seconds": round(cpu, 2)}


def figure_daemon(args: argparse.Namespace) -> dict[str, object]:
    """The startup pass as the daemon records it, beside the same pass run
    in this process (the reconciler alone, no daemon around it)."""
    alone, _ = stuck_pass(args.db, args.resources, args.workers)
    daemon = daemon_pass(args.db, args.resources, args.workers)
    return {
        "benchmark": "reconcile_startup_pass_daemon",
        "figure": {"resources_per_second": round(args.resources / daemon["seconds"], 1),
                   **daemon},
        "reference": {"in_process_resources_per_second": round(args.resources / alone, 1),
                      "in_process_seconds": round(alone, 3)},
        "ratio_to_reference": round(daemon["seconds"] / alone, 3),
        "inputs": {"resources": args.resources, "workers": args.workers,
                   "database": args.db, "driver": "dummy"},
    }


FIGURES = {"stuck": figure_stuck, "delay": figure_delay, "healthy": figure_healthy,
           "redis": figure_redis, "memory": figure_memory, "daemon": figure_daemon}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--resources", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--healthy", type=int, default=100000)
    parser.add_argument("--figures", default="stuck,delay,healthy,memory")
    parser.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args)
        return
    for name in args.figures.split(","):
        print(json.dumps(FIGURES[name](args), indent=2), flush=True)


if __name__ == "__main__":
    main()
