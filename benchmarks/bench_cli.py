"""Benchmark: how long a ``sharectl`` call takes, as a user runs it.

Times whole processes: ``sharectl --help`` and ``sharectl share list`` over
``--shares`` shares (written through the intake, as ``share create`` writes
them), ``--runs`` times each. Prints JSON with min/median seconds and the
reference measured in the same run: the start-up of a bare
``python -c pass`` of the same interpreter.

    .venv/bin/python benchmarks/bench_cli.py [--shares 100] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.functional import harness  # noqa: E402
from tests.functional.harness import Deployment  # noqa: E402


def timed(cmd: list[str], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return {"min": round(min(times), 4), "median": round(statistics.median(times), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", type=int, default=100)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Deployment(Path(tmp))
        d.sync()
        intake = harness.intake(d)
        for i in range(args.shares):
            intake.create_share(1, "NFS", name=f"cli{i}")
        intake.db.dispose()
        sharectl = [harness.tool("sharectl"), "--config-file", str(d.config)]
        listed = subprocess.run(sharectl + ["share", "list", "-f", "json"], check=True,
                                capture_output=True, text=True).stdout
        assert len(json.loads(listed)) == args.shares
        reference = timed([sys.executable, "-c", "pass"], args.runs)
        help_ = timed(sharectl + ["--help"], args.runs)
        share_list = timed(sharectl + ["share", "list"], args.runs)
    print(json.dumps({
        "benchmark": "cli", "inputs": {"shares": args.shares, "runs": args.runs},
        "help_seconds": help_, "share_list_seconds": share_list,
        "reference_python_seconds": reference,
        "ratio_help_to_python": round(help_["median"] / reference["median"], 1),
        "ratio_share_list_to_python": round(share_list["median"] / reference["median"], 1),
    }, indent=1))


if __name__ == "__main__":
    main()
