"""Benchmark: converging stacks with the real daemon (dummy driver, no delay).

Starts ``share-manager`` engines (as tests/functional/harness.py does), then
for each shape creates a stack with ``sharectl stack create NAME -t FILE
--wait`` and measures the nodes of its traversal per second, with the SQL
statements and commits per node the engines made (``SHAREMGR_SQL_STATS``,
db/stats.py: the idle engines' rate over the same time is subtracted).

Shapes: ``independent`` (N shares), ``chain`` (share i depends on share
i-1), ``fanin`` (N shares, then one that depends on all of them).

The reference, measured in the same run, is the raw commit rate of the same
database: single-row INSERTs into a scratch table, one commit each.

    .venv/bin/python benchmarks/bench_stack.py [--setup sqlite|servers]
        [--engines 1|2|1,2] [--shapes independent,chain,fanin]
        [--independent 300] [--chain 100] [--fanin 200] [--profile DIR]

Prints one JSON line per (engines, shape) and a summary line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, profile_summary  # noqa: E402
from tests.functional.harness import Deployment  # noqa: E402

ENGINE_OPTIONS = {
    "DEFAULT": {
        "startup_reconciliation_wait_seconds": "0",
        "graceful_shutdown_timeout": "5",
        "request_workers": "4",
        "request_poll_interval": "0.1",
    },
}

SHARE = "{type: share, properties: {size: 1, proto: NFS}%s}"


def template(shape: str, n: int) -> tuple[str, int]:
    """YAML of the shape and its number of resources."""
    lines = ["resources:"]
    if shape == "independent":
        lines += [f"  s{i}: " + SHARE % "" for i in range(n)]
    elif shape == "chain":
        lines.append("  s0: " + SHARE % "")
        lines += [f"  s{i}: " + SHARE % f", depends_on: [s{i - 1}]" for i in range(1, n)]
    elif shape == "fanin":
        lines += [f"  s{i}: " + SHARE % "" for i in range(n)]
        deps = ", ".join(f"s{i}" for i in range(n))
        lines.append("  sink: " + SHARE % f", depends_on: [{deps}]")
        n += 1
    else:
        raise ValueError(shape)
    return "\n".join(lines) + "\n", n


class Stats:
    """The SQL counts of the running engines (files written by db/stats.py)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files

    def read(self) -> dict:
        time.sleep(1.2)  # the engines flush every second while they run statements
        total = {"statements": 0, "commits": 0, "write_commits": 0, "seconds": 0.0,
                 "by_kind": {}}
        for f in self.files:
            s = json.loads(f.read_text())
            for k in ("statements", "commits", "write_commits"):
                total[k] += s[k]
            total["seconds"] = max(total["seconds"], s["seconds"])
            for k, v in s["by_kind"].items():
                total["by_kind"][k] = total["by_kind"].get(k, 0) + v
        return total


def diff(a: dict, b: dict) -> dict:
    kinds = {k: b["by_kind"].get(k, 0) - a["by_kind"].get(k, 0)
             for k in set(a["by_kind"]) | set(b["by_kind"])}
    return {**{k: b[k] - a[k] for k in ("statements", "commits", "write_commits", "seconds")},
            "by_kind": {k: v for k, v in kinds.items() if v}}


def memory_kib(pid: int) -> dict[str, int]:
    """A process's resident memory now and at its peak (Linux /proc)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return {"rss_kib": fields["VmRSS"], "peak_rss_kib": fields["VmHWM"]}


def machine_cpu() -> tuple[float, float]:
    """The machine's (busy, total) CPU seconds so far, all cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


def graph_nodes(url: str, name: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT current_deps FROM stacks WHERE name = :n"),
                               {"n": name}).first()
    finally:
        engine.dispose()
    deps = row[0]
    if isinstance(deps, str):
        deps = json.loads(deps)
    return len((deps or {}).get("nodes", []))


def traversal_seconds(url: str, name: str) -> float | None:
    """From the first check request of the stack's traversal (written by
    the preparation's transaction) to the stack's end (its ``updated_at``):
    the engines' part of the command's time, without sharectl's start, its
    preparation and its ``--wait`` polling. Database timestamps, one clock."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            stack = conn.execute(sa.text(
                "SELECT id, current_traversal, updated_at FROM stacks WHERE name = :n"),
                {"n": name}).first()
            rows = conn.execute(sa.text(
                "SELECT created_at, args FROM requests WHERE resource_type = 'stack_resource'"
                " AND action = 'check_resource'")).all()
    finally:
        engine.dispose()

    def parse(value):
        return value if not isinstance(value, str) else datetime.datetime.fromisoformat(value)

    starts = []
    for created, args in rows:
        args = json.loads(args) if isinstance(args, str) else args
        if args.get("stack_id") == stack[0] and args.get("traversal") == stack[1]:
            starts.append(parse(created))
    if not starts:
        return None
    return (parse(stack[2]) - min(starts)).total_seconds()


def stack_seconds(url: str, name: str) -> float:
    """The issue's measure of a stack's time: from its row's ``created_at``
    (the preparation's first write) to its end (``updated_at``), without
    ``sharectl``'s start and ``--wait``'s polling. Database timestamps."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            created, ended = conn.execute(sa.text(
                "SELECT created_at, updated_at FROM stacks WHERE name = :n"), {"n": name}).one()
    finally:
        engine.dispose()

    def parse(value):
        return value if not isinstance(value, str) else datetime.datetime.fromisoformat(value)
    return (parse(ended) - parse(created)).total_seconds()


def profile(pid: int, output: Path, gil: bool = False) -> subprocess.Popen:
    """py-spy sampling a running engine until it exits (``pip install
    py-spy``); its raw output is what profile_summary.py reads. With ``gil``
    only the thread holding the GIL is sampled: where the Python CPU goes."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw",
                             "--rate", "200", "--output", str(output), "--nonblocking",
                             *(["--gil"] if gil else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_engines(d: Deployment, url: str, root: Path, engines: int, shapes: dict[str, int],
                idle_seconds: float, tag: str, profile_dir: Path | None = None,
                profile_gil: bool = False) -> list[dict]:
    files = [root / f"sqlstats-{tag}-{i}.json" for i in range(engines)]
    spies = []
    for i in range(engines):
        engine = d.start(env={"SHAREMGR_SQL_STATS": str(files[i])}, name=f"{tag}-engine")
        if profile_dir is not None:
            spies.append((profile(engine.proc.pid, profile_dir / f"{tag}-engine{i}.txt",
                                  profile_gil),
                          profile_dir / f"{tag}-engine{i}.txt"))
    out = []
    try:
        stats = Stats(files)
        a = stats.read()
        time.sleep(idle_seconds)
        idle = diff(a, stats.read())
        idle_stmt = idle["statements"] / idle["seconds"]
        idle_commits = idle["commits"] / idle["seconds"]
        idle_writes = idle["write_commits"] / idle["seconds"]
        idle_rss = max(memory_kib(e.proc.pid)["rss_kib"] for e in d.engines)
        for shape, n in shapes.items():
            text, resources = template(shape, n)
            path = root / f"{tag}-{shape}.yaml"
            path.write_text(text)
            name = f"b{tag}{shape}"
            before = stats.read()
            cpu0 = [common.cpu_seconds(e.proc.pid) for e in d.engines]
            busy0, total0 = machine_cpu()
            started = time.perf_counter()
            proc = d.sharectl("stack", "create", name, "-t", str(path), "--wait",
                              check=False, timeout=3600)
            elapsed = time.perf_counter() - started
            cpu = sum(common.cpu_seconds(e.proc.pid) for e in d.engines) - sum(cpu0)
            busy1, total1 = machine_cpu()
            after = stats.read()
            if proc.returncode != 0:
                raise RuntimeError(f"stack create {name} failed:\n{proc.stdout}\n{proc.stderr}")
            work = diff(before, after)
            nodes = graph_nodes(url, name)
            traversal = traversal_seconds(url, name)
            stack_time = stack_seconds(url, name)
            # Peak since the engine started: shapes run in order, so a later
            # shape's figure covers the earlier ones (run one shape for its own).
            peak = max(memory_kib(e.proc.pid)["peak_rss_kib"] for e in d.engines)
            stmts = work["statements"] - idle_stmt * work["seconds"]
            commits = work["commits"] - idle_commits * work["seconds"]
            writes = work["write_commits"] - idle_writes * work["seconds"]
            begins = work["by_kind"].get("BEGIN", 0) - (
                idle["by_kind"].get("BEGIN", 0) / idle["seconds"] * work["seconds"])
            out.append({
                "shape": shape, "engines": engines, "resources": resources, "nodes": nodes,
                "seconds": round(elapsed, 3), "nodes_per_s": round(nodes / elapsed, 1),
                # The stack's own time (created_at to its end) and resources a second in it.
                "stack_seconds": round(stack_time, 3),
                "resources_per_s": round(resources / stack_time, 1),
                # The engines' part: from the traversal's first request to its end.
                "traversal_seconds": None if traversal is None else round(traversal, 3),
                "traversal_nodes_per_s": None if not traversal else round(nodes / traversal, 1),
                "statements_per_node": round(stmts / nodes, 2),
                "commits_per_node": round(commits / nodes, 2),
                # SQLite's BEGINs apart (PostgreSQL's driver sends none the counter
                # sees), and only the commits of transactions that wrote.
                "statements_per_node_without_begin": round((stmts - begins) / nodes, 2),
                "write_commits_per_node": round(writes / nodes, 2),
                "raw_statements_per_node": round(work["statements"] / nodes, 2),
                "raw_commits_per_node": round(work["commits"] / nodes, 2),
                # What bounds it: the engines' CPU per node, and how busy the
                # machine's cores were (the database server and sharectl too).
                "engine_cpu_ms_per_node": round(1000 * cpu / nodes, 2),
                "engine_cpu_percent_of_one_core": round(100 * cpu / elapsed, 1),
                "machine_cpu_busy_percent": round(
                    100 * (busy1 - busy0) / max(total1 - total0, 1e-9), 1),
                "machine_cores": os.cpu_count(),
                # Every process's busy CPU (engines, database server, sharectl,
                # Redis) per node: the machine cannot go faster than its cores
                # over this, whatever the engines do.
                "machine_cpu_ms_per_node": round(
                    1000 * (busy1 - busy0) / nodes, 2),
                "idle_statements_per_s": round(idle_stmt, 1),
                "engine_idle_rss_kib": idle_rss, "engine_peak_rss_kib": peak,
                "by_kind_per_node": {k: round(v / nodes, 2)
                                     for k, v in sorted(work["by_kind"].items())},
            })
            print(json.dumps(out[-1]), flush=True)
    finally:
        d.stop_all()
        d.engines.clear()
        for spy, output in spies:
            spy.wait(60)
            if output.exists():
                print(json.dumps(profile_summary.summarize(output)), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setup", choices=("sqlite", "servers"), default="sqlite")
    p.add_argument("--engines", default=None,
                   help="engine counts to run, comma separated (default: 1; servers: 1,2)")
    p.add_argument("--shapes", default="independent,chain,fanin")
    p.add_argument("--independent", type=int, default=300, help="shares of 'independent'")
    p.add_argument("--chain", type=int, default=100, help="length of 'chain'")
    p.add_argument("--fanin", type=int, default=200, help="N of the N->1 'fanin'")
    p.add_argument("--idle-seconds", type=float, default=3.0)
    p.add_argument("--reference-commits", type=int, default=2000)
    p.add_argument("--root", help="work folder (default: a fresh temporary one)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="sample each engine with py-spy into DIR and print where its "
                   "time went (profile_summary.py); the figures then include py-spy's cost")
    p.add_argument("--profile-gil", action="store_true",
                   help="with --profile: sample only the thread holding the GIL (where the "
                   "engine's Python CPU goes, waits in the database left out)")
    args = p.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    engines = [int(e) for e in (args.engines or ("1,2" if args.setup == "servers" else "1"))
               .split(",")]
    sizes = {"independent": args.independent, "chain": args.chain, "fanin": args.fanin}
    shapes = {s: sizes[s] for s in args.shapes.split(",")}

    root = Path(args.root or tempfile.mkdtemp(prefix=f"bench-stack-{args.setup}-"))
    with common.deployment(root / "deployment", args.setup, extra=ENGINE_OPTIONS,
                           host=f"bench{uuid.uuid4().hex[:6]}") as d:
        url = common.database_url(d)
        reference = common.commit_rate(url, args.reference_commits)
        python_ms = common.python_cpu_ms()
        results = []
        for n in engines:
            results += run_engines(d, url, root, n, shapes, args.idle_seconds, f"e{n}",
                                   args.profile, args.profile_gil)
        for r in results:
            r["reference_commits_per_s"] = round(reference, 1)
            r["nodes_per_s_per_1000_commits_per_s"] = round(r["nodes_per_s"] / reference * 1000,
                                                           3)
            # The engine's CPU per node in units of this machine's speed now
            # (common.python_cpu_ms): comparable across machines and runs.
            r["reference_python_cpu_ms"] = python_ms
            r["engine_cpu_per_node_in_python_references"] = round(
                r["engine_cpu_ms_per_node"] / python_ms, 4)
        summary: dict = {"setup": args.setup, "reference_commits_per_s": round(reference, 1),
                         "reference_python_cpu_ms": python_ms,
                         "inputs": {"engines": engines, "shapes": shapes,
                                    "idle_seconds": args.idle_seconds,
                                    "reference_commits": args.reference_commits},
                         "results": {f"{r['shape']}/{r['engines']}": {
                             k: r[k] for k in ("nodes", "nodes_per_s", "traversal_nodes_per_s",
                                               "resources_per_s",
                                               "statements_per_node",
                                               "commits_per_node", "engine_idle_rss_kib",
                                               "engine_peak_rss_kib", "engine_cpu_ms_per_node",
                                               "engine_cpu_per_node_in_python_references",
                                               "machine_cpu_ms_per_node")}
                             for r in results}}
        if 1 in engines and 2 in engines:
            summary["two_engines_speedup"] = {
                s: round(summary["results"][f"{s}/2"]["nodes_per_s"]
                         / summary["results"][f"{s}/1"]["nodes_per_s"], 2) for s in shapes}
            # The most two engines could gain on this machine: all its cores
            # busy at the two-engine run's CPU per node, over one engine's rate.
            by = summary["results"]
            summary["two_engines_cpu_ceiling"] = {
                s: round(1000 * (os.cpu_count() or 1) / by[f"{s}/2"]["machine_cpu_ms_per_node"]
                         / by[f"{s}/1"]["nodes_per_s"], 2) for s in shapes}
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
