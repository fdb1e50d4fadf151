"""Benchmark: the CPU one transaction costs, by how it is opened.

Runs ``--count`` transactions of one trivial SELECT each through
``Database.reading()`` and ``Database.session()`` (ORM sessions) and
``Database.connect()`` (a plain connection), taking turns, in this process, on a fresh
SQLite database (or ``--url``), and prints JSON: CPU microseconds per
transaction for each; the reference, measured in the same run, is the plain
connection (the ratios are the machine-independent figures).

    .venv/bin/python benchmarks/bench_transaction.py [--count 3000] [--url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sharemgr.db import migration  # noqa: E402
from sharemgr.db.engine import Database  # noqa: E402


def cpu_us_per_transaction(openers: dict, count: int, rounds: int = 10) -> dict[str, float]:
    """Each opener's CPU per transaction: the median of ``rounds`` rounds,
    the openers taking turns in every round (the machine's drift falls on
    all of them alike)."""
    stmt = sa.select(sa.literal(1))
    per_round = max(count // rounds, 1)
    times: dict[str, list[float]] = {name: [] for name in openers}
    for opener in openers.values():  # warm the pool and the statement cache
        for _ in range(50):
            with opener() as tx:
                tx.execute(stmt).first()
    for _ in range(rounds):
        for name, opener in openers.items():
            start = time.process_time()
            for _ in range(per_round):
                with opener() as tx:
                    tx.execute(stmt).first()
            times[name].append((time.process_time() - start) / per_round)
    return {name: round(statistics.median(t) * 1e6, 1) for name, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--url", help="database URL (default: a fresh SQLite file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(args.url or f"sqlite:///{tmp}/bench.sqlite")
        migration.upgrade(db)
        try:
            figures = cpu_us_per_transaction(
                {"orm_session_reading": db.reading, "orm_session_writing": db.session,
                 "plain_connection": db.connect}, args.count)
        finally:
            db.dispose()
    reference = figures["plain_connection"]
    print(json.dumps({
        "benchmark": "transaction_cpu", "inputs": {"count": args.count, "database": db.dialect},
        "figure": {"cpu_us_per_transaction": figures},
        "reference": {"plain_connection_cpu_us": reference},
        "ratio_to_reference": {k: round(v / reference, 2) for k, v in figures.items()},
    }))


if __name__ == "__main__":
    main()
