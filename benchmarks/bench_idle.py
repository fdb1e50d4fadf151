"""Benchmark: what an idle share-manager asks of its database, and how soon
it starts a request written by another process.

Starts the real daemon with default intervals and ``SHAREMGR_SQL_STATS``
(db/stats.py), lets it settle (the startup pass), then counts its
statements over ``--seconds`` of idleness; then writes ``--requests``
share creates with ``sharectl`` one at a time and reads, from the requests
table, how long each waited between being written and being claimed.
Prints JSON: statements/s by kind, claim latency (min/median/max), and the
reference measured in the same run: the latency of a plain ``SELECT 1``
round trip on the same database.

    .venv/bin/python benchmarks/bench_idle.py [--setup sqlite|servers] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", choices=("sqlite", "servers"), default="sqlite")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, common.deployment(Path(tmp), args.setup,
                                                                 defaults=True) as d:
        stats = Path(tmp) / "sql-stats.json"
        d.start(env={"SHAREMGR_SQL_STATS": str(stats)})
        common.wait_settled(d)
        before = common.read_stats(stats, after=time.time())
        time.sleep(args.seconds)
        after = common.read_stats(stats, after=time.time())
        idle = common.rate(before, after)
        latencies = []
        for i in range(args.requests):
            share = d.json("share", "create", "1", "--proto", "NFS", "--name", f"idle{i}")
            latencies.append(common.claim_latency(d, share))
            time.sleep(0.5)  # idle again between requests, as a user would be
        reference = common.round_trip(d)
        d.stop_all()
    print(json.dumps({
        "benchmark": "idle", "setup": args.setup,
        "inputs": {"seconds": args.seconds, "requests": args.requests},
        "idle_statements_per_second": idle["statements_per_second"],
        "idle_commits_per_second": idle["commits_per_second"],
        "idle_by_kind_per_second": idle["by_kind_per_second"],
        "claim_latency_ms": {"min": round(min(latencies) * 1000, 1),
                             "median": round(statistics.median(latencies) * 1000, 1),
                             "max": round(max(latencies) * 1000, 1)},
        "reference_round_trip_ms": round(reference * 1000, 3),
        "ratio_median_latency_to_round_trip": round(statistics.median(latencies)
                                                    / reference, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
