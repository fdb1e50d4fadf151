"""Benchmark: a reconciliation pass over N share instances stuck in creating,
with the dummy driver, on SQLite + tooz file locks.

Prints JSON: seconds per resource with ``reconciliation_workers`` workers,
and the ratio to a one-worker pass over the same number of resources
measured in the same run (the machine-independent figure).

    .venv/bin/python benchmarks/bench_reconcile.py [--resources 200] [--workers 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from sharemgr.db import migration, models
from sharemgr.db.engine import Database
from sharemgr.drivers.testing import build_driver
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.operations import Operations
from sharemgr.reconcile.reconciler import Reconciler


def one_pass(root: Path, resources: int, workers: int) -> float:
    driver = build_driver("dummy", root, backend="be")
    db = Database(f"sqlite:///{root}/bench.sqlite")
    migration.upgrade(db)
    host = "bench@be"
    shares = []
    rows = []
    for i in range(resources):
        share = models.Share(id=models.new_id(), name=f"b{i}", size=1, share_proto="NFS")
        inst = models.ShareInstance(
            id=models.new_id(), share_id=share.id, host=host, status="creating", export_locations=[]
        )
        rows += [share, inst]
        shares.append((share, inst))
    with db.session() as session:
        session.add_all(rows)
    # The backend has every share: the pass finds them healthy.
    from sharemgr.manager import views

    for share, inst in shares:
        driver.create_share(views.share(inst, share))
    engine = f"bench.{uuid.uuid4()}"
    coord = Coordinator(f"file://{root}/coord?timeout=30", engine)
    coord.start(heartbeat=False)
    coord.join_engines()
    ops = Operations(db, {"be": driver}, coord, engine)
    rec = Reconciler(db, {"be": driver}, coord, ops, "bench", engine, workers)
    started = time.perf_counter()
    result = rec.run("bench")
    elapsed = time.perf_counter() - started
    assert result["outcomes"] == {"share_instance": {"available": resources}}, result
    coord.stop()
    db.dispose()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        serial = one_pass(Path(a), args.resources, 1)
        parallel = one_pass(Path(b), args.resources, args.workers)
    print(json.dumps({
        "benchmark": "reconcile_pass_sqlite_file_locks",
        "figure": {"seconds_per_resource": round(parallel / args.resources, 6)},
        "reference": {"one_worker_seconds_per_resource": round(serial / args.resources, 6)},
        "ratio_parallel_to_one_worker": round(parallel / serial, 3),
        "inputs": {"resources": args.resources, "workers": args.workers,
                   "database": "sqlite", "coordination": "file", "driver": "dummy"},
    }, indent=2))


if __name__ == "__main__":
    main()
