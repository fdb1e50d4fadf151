"""Benchmark: one stack of N independent shares, at several N (issue 29).

For each size, on a fresh engine (so its peak RSS is this size's): ``stack
create`` of N shares, an ``update`` that resizes 1 % of them, a ``delete``;
each ``--wait``-ed through ``sharectl`` against the real daemon (SQLite or
PostgreSQL + Redis, the dummy driver with no delay, one engine). Per step:
seconds, nodes of the traversal, nodes/s, SQL statements and commits per
node (``SHAREMGR_SQL_STATS``); per size, the engine's idle and peak RSS.

Ratios measured in the same run (the machine is shared: compare these, not
absolute figures across runs):

* ``create_rate_vs_first``: nodes/s of this size's create over the smallest
  size's (the target: ≥ 0.8 at 10,000, ≥ 0.7 at 50,000);
* ``update_over_create``: the 1 % update's seconds over the create's (≤ 0.05);
* ``delete_over_create``: the delete's seconds over the create's (≤ 1);
* ``rss_growth_kib_per_resource``: peak RSS above idle over N (≤ 10).

    .venv/bin/python benchmarks/bench_scale.py --sizes 1000,10000
        [--setup sqlite|servers] [--profile DIR] [--steps create,update,delete]

Prints one JSON line per step, one per size, and a summary line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common, profile_summary  # noqa: E402
from benchmarks.bench_stack import (  # noqa: E402
    ENGINE_OPTIONS,
    Stats,
    diff,
    graph_nodes,
    memory_kib,
    profile,
    traversal_seconds,
)
from tests.functional.harness import Deployment  # noqa: E402


def template(n: int, resized: int = 0) -> str:
    """N independent shares; the first ``resized`` of size 2, the rest 1."""
    return "resources:\n" + "".join(
        f"  s{i}: {{type: share, properties: {{size: {2 if i < resized else 1}, proto: NFS}}}}\n"
        for i in range(n))


def step(d: Deployment, url: str, stats: Stats, idle: dict, args: list[str], name: str,
         what: str, n: int) -> dict:
    before = stats.read()
    cpu0 = common.cpu_seconds(d.engines[0].proc.pid)
    started = time.perf_counter()
    proc = d.sharectl(*args, check=False, timeout=7200)
    elapsed = time.perf_counter() - started
    cpu = common.cpu_seconds(d.engines[0].proc.pid) - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    work = diff(before, stats.read())
    nodes = graph_nodes(url, name) if what != "delete" else 2 * n
    # The engine's part (first check request to the stack's end), the rest
    # being sharectl's start, the preparation and --wait's polling.
    traversal = traversal_seconds(url, name)
    idle_stmt = idle["statements"] / idle["seconds"]
    idle_commits = idle["commits"] / idle["seconds"]
    stmts = work["statements"] - idle_stmt * work["seconds"]
    commits = work["commits"] - idle_commits * work["seconds"]
    return {"step": what, "resources": n, "nodes": nodes, "seconds": round(elapsed, 3),
            "nodes_per_s": round(nodes / elapsed, 1),
            "traversal_seconds": None if traversal is None else round(traversal, 3),
            "resources_per_s": round(n / elapsed, 1),
            "statements_per_resource": round(stmts / n, 2),
            "commits_per_resource": round(commits / n, 2),
            "engine_cpu_ms_per_resource": round(1000 * cpu / n, 3),
            "by_kind_per_resource": {k: round(v / n, 2)
                                     for k, v in sorted(work["by_kind"].items())}}


def run_size(d: Deployment, url: str, root: Path, n: int, steps: list[str],
             profile_dir: Path | None, idle_seconds: float) -> dict:
    tag = f"n{n}"
    stats_file = root / f"sqlstats-{tag}.json"
    engine = d.start(env={"SHAREMGR_SQL_STATS": str(stats_file)}, name=f"{tag}-engine")
    spy = None
    if profile_dir is not None:
        out_file = profile_dir / f"{tag}.txt"
        spy = (profile(engine.proc.pid, out_file), out_file)
    results: dict = {"resources": n, "steps": {}}
    try:
        stats = Stats([stats_file])
        a = stats.read()
        time.sleep(idle_seconds)
        idle = diff(a, stats.read())
        idle_rss = memory_kib(engine.proc.pid)["rss_kib"]
        name = f"scale{n}"
        create = root / f"{tag}-create.yaml"
        create.write_text(template(n))
        update = root / f"{tag}-update.yaml"
        update.write_text(template(n, max(1, n // 100)))
        commands = {
            "create": ["stack", "create", name, "-t", str(create), "--wait"],
            "update": ["stack", "update", name, "-t", str(update), "--wait"],
            "delete": ["stack", "delete", name, "--wait"],
        }
        for what in ("create", "update", "delete"):
            if what not in steps:
                continue
            r = step(d, url, stats, idle, commands[what], name, what, n)
            results["steps"][what] = r
            print(json.dumps(r), flush=True)
        peak = memory_kib(engine.proc.pid)["peak_rss_kib"]
        results.update(engine_idle_rss_kib=idle_rss, engine_peak_rss_kib=peak,
                       rss_growth_kib_per_resource=round((peak - idle_rss) / n, 2))
    finally:
        d.stop_all()
        d.engines.clear()
        if spy is not None:
            spy[0].wait(60)
            if spy[1].exists():
                print(json.dumps(profile_summary.summarize(spy[1])), flush=True)
    s = results["steps"]
    if "create" in s and "update" in s:
        results["update_over_create"] = round(s["update"]["seconds"] / s["create"]["seconds"], 4)
    if "create" in s and "delete" in s:
        results["delete_over_create"] = round(s["delete"]["seconds"] / s["create"]["seconds"], 3)
    print(json.dumps({k: v for k, v in results.items() if k != "steps"}), flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setup", choices=("sqlite", "servers"), default="sqlite")
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--steps", default="create,update,delete")
    p.add_argument("--idle-seconds", type=float, default=3.0)
    p.add_argument("--root", help="work folder (default: a fresh temporary one)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="sample the engine with py-spy into DIR (profile_summary.py)")
    args = p.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    steps = args.steps.split(",")
    root = Path(args.root or tempfile.mkdtemp(prefix=f"bench-scale-{args.setup}-"))
    with common.deployment(root / "deployment", args.setup, extra=ENGINE_OPTIONS,
                           host=f"bench{uuid.uuid4().hex[:6]}") as d:
        url = common.database_url(d)
        python_ms = common.python_cpu_ms()
        results = [run_size(d, url, root, n, steps, args.profile, args.idle_seconds)
                   for n in sizes]
    first = results[0]["steps"].get("create")
    summary: dict = {"setup": args.setup, "reference_python_cpu_ms": python_ms,
                     "sizes": sizes, "by_size": {}}
    for r in results:
        s = r["steps"]
        row = {k: r[k] for k in ("update_over_create", "delete_over_create",
                                 "rss_growth_kib_per_resource") if k in r}
        for what, v in s.items():
            row[f"{what}_seconds"] = v["seconds"]
            row[f"{what}_nodes_per_s"] = v["nodes_per_s"]
            row[f"{what}_statements_per_resource"] = v["statements_per_resource"]
        if first is not None and "create" in s:
            row["create_rate_vs_first"] = round(s["create"]["nodes_per_s"]
                                                / first["nodes_per_s"], 3)
        summary["by_size"][str(r["resources"])] = row
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
