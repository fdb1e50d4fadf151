"""Run every benchmark (``make bench``) and write their JSON to one file.

Each benchmark runs as its own process, one after another (the machine's
cores are the bound being measured). The sizes are the issue's: pass
``--quick`` for small ones that finish in a few minutes.

    .venv/bin/python benchmarks/run_all.py [--quick] [--out bench-results.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = [
    ["bench_cli.py", "--shares", "100", "--runs", "15"],
    ["bench_transaction.py", "--count", "3000"],
    ["bench_idle.py", "--setup", "sqlite", "--seconds", "30"],
    ["bench_idle.py", "--setup", "servers", "--seconds", "30"],
    ["bench_reconcile.py", "--db", "sqlite", "--resources", "10000", "--workers", "4",
     "--figures", "stuck,healthy,memory"],
    ["bench_reconcile.py", "--db", "sqlite", "--resources", "10000", "--workers", "64",
     "--delay", "0.02", "--figures", "delay"],
    ["bench_reconcile.py", "--db", "postgresql", "--resources", "10000", "--workers", "4",
     "--figures", "stuck,healthy"],
    ["bench_stack.py", "--setup", "sqlite", "--independent", "1000", "--chain", "200",
     "--fanin", "500"],
    ["bench_stack.py", "--setup", "servers", "--engines", "1,2", "--independent", "1000",
     "--chain", "200", "--fanin", "500"],
]
QUICK = [
    ["bench_cli.py", "--runs", "5"],
    ["bench_transaction.py", "--count", "500"],
    ["bench_idle.py", "--seconds", "10", "--requests", "5"],
    ["bench_reconcile.py", "--resources", "1000", "--healthy", "10000",
     "--figures", "stuck,healthy"],
    ["bench_stack.py", "--independent", "100", "--chain", "50", "--fanin", "50"],
]


def parse(out: str) -> list:
    """Every JSON object a benchmark printed, one per line or indented, in
    order; other text between them (progress lines) is skipped."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (start := out.find("{", at)) >= 0:
        try:
            value, at = decoder.raw_decode(out, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        values.append(value)
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench-results.json")
    args = ap.parse_args()
    results, failed = [], 0
    for cmd in QUICK if args.quick else FULL:
        shown = " ".join(["benchmarks/" + cmd[0], *cmd[1:]])
        print(f"== {shown}", flush=True)
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:]],
                              capture_output=True, text=True)
        seconds = round(time.monotonic() - started, 1)
        if done.returncode != 0:
            failed += 1
            print(done.stderr[-2000:], file=sys.stderr)
            results.append({"command": shown, "seconds": seconds, "failed": done.returncode})
            continue
        output = parse(done.stdout)
        print(json.dumps(output, indent=1), flush=True)
        results.append({"command": shown, "seconds": seconds, "output": output})
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
