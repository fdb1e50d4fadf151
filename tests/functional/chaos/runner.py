"""A run: the chaos, settling, every invariant, the teardown (every stack
left can be deleted, and leaves nothing behind), and the command line."""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TextIO

import sqlalchemy as sa
from sharemgr.common import vocab

from tests.functional.chaos.checker import Checker
from tests.functional.chaos.fleet import EngineRecord, Fleet
from tests.functional.chaos.operations import Operator
from tests.functional.chaos.options import (
    ENGINE_OPTIONS,
    PG_ADMIN,
    REDIS_URL,
    SETUPS,
    STACK_MADE,
    Log,
    Options,
    Result,
    kept_resource,
    reproduce_command,
)
from tests.functional.chaos.reader import Reader, backend_now, stale_rows, transient_resources
from tests.functional.harness import Deployment


def settle(reader: Reader, fleet: Fleet, timeout: float, log: Log) -> tuple[bool, float]:
    """Wait (bounded) until nothing is transient, no stack is IN_PROGRESS, no
    row is IN_PROGRESS in a stack that is not, and no request is pending,
    steadily for 3 s."""
    started = time.monotonic()
    calm_since = None
    last = None
    while time.monotonic() - started < timeout:
        fleet.watch()
        try:
            world = reader.world()
        except Exception as exc:
            log(f"settle: read failed: {exc}")
            time.sleep(0.5)
            continue
        busy = (len(transient_resources(world)),
                sum(1 for s in world["stacks"] if s["status"] == "IN_PROGRESS"
                    and s["deleted_at"] is None),
                world["requests"].get("pending", 0), len(stale_rows(world)))
        if busy != last:
            log(f"settle: transient {busy[0]}, stacks in progress {busy[1]}, "
                f"pending requests {busy[2]}, rows left in progress {busy[3]}")
            last = busy
        if not any(busy):
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since >= 3:
                return True, time.monotonic() - started
        else:
            calm_since = None
        time.sleep(0.5)
    return False, time.monotonic() - started


# ---------------------------------------------------------------------------
# Teardown: every stack left can be deleted, and leaves nothing behind


# Deletes of a stack whose own timeout cut them short, at most (teardown).
DELETE_TRIES = 8


def teardown(d: Deployment, reader: Reader, records: list[EngineRecord], timeout: float,
             log: Log) -> tuple[list[str], float]:
    """Delete every stack still there (FAILED ones included), engines calm,
    and check that each goes and takes everything it made with it. A delete
    that fails on the stack's own traversal timeout (``--timeout`` sticks to
    a stack: 6 to 30 s, which a delete of slow calls can take) is asked
    again, up to DELETE_TRIES times, as a user of such a stack would."""
    started = time.monotonic()
    problems: list[str] = []
    asked: collections.Counter = collections.Counter()

    def delete(name: str) -> None:
        asked[name] += 1
        out = d.sharectl("stack", "delete", name, check=False, timeout=120)
        if out.returncode != 0:
            log(f"teardown: stack delete {name} exited {out.returncode}: {out.stderr.strip()}")

    def remaining(world: dict | None = None) -> list[dict]:
        latest = {s["name"]: s for s in (world or reader.world())["stacks"]}
        return [s for s in latest.values() if s["deleted_at"] is None]

    def fire(names: list[str]) -> None:
        threads = [threading.Thread(target=delete, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)

    fire([s["name"] for s in remaining()])
    while time.monotonic() - started < timeout:
        left = remaining()
        retry = [s["name"] for s in left
                 if s["status"] != "IN_PROGRESS" and asked[s["name"]] < DELETE_TRIES
                 and "timed out" in (s["status_reason"] or "")]
        if not left or (not retry and all(s["status"] != "IN_PROGRESS" for s in left)):
            break
        if retry:
            fire(retry)
        time.sleep(0.5)
    world = reader.world()
    rows = world["rows"]
    instances: dict[str, list[str]] = collections.defaultdict(list)
    for inst in world["instances"]:
        instances[inst["share_id"]].append(inst["id"])
    for st in remaining(world):
        problems.append(f"teardown: stack {st['name']} could not be deleted: {st['action']} "
                        f"{st['status']} ({st['status_reason']!r}) after {asked[st['name']]} "
                        "delete(s)")
        # What its rows say, and the requests about what they hold: the
        # report keeps it (the logs may not outlive the machine).
        mine = [r for r in rows if r["stack_id"] == st["id"]]
        log(f"teardown: stack {st['name']} rows: " + "; ".join(
            f"{r['name']} #{r['id']} {r['action']} {r['status']} engine {r['engine_id']} "
            f"physical {r['physical_id']} ({(r['status_reason'] or '')[:160]!r})"
            for r in mine))
        for r in mine:
            if r["physical_id"] and r["status"] != "COMPLETE":
                ids = [r["physical_id"], *instances.get(r["physical_id"], [])]
                for req in reader.requests(resource_id=ids)[-4:]:
                    log(f"teardown:   request {req['id']} {req['action']} {req['status']} "
                        f"engine {req['engine_id']} {(req['error'] or '')[:160]!r}")
    for kind, row in transient_resources(world):
        problems.append(f"teardown: {kind} {row['id']} stuck in {row['status']!r}")
    problems += leftovers(world, backend_now(d))
    checker = Checker(d, reader, records, {})
    checker.check_backend()
    problems += [f"teardown: {v}" for v in checker.violations]
    return problems, time.monotonic() - started


def leftovers(world: dict, backend: dict[str, dict]) -> list[str]:
    """What a deleted stack left: its shares and snapshots in the database
    and its objects on the backend, but for the shares it keeps
    (``deletion_policy: retain``, templates.py's "keep" shares: available,
    usable) — a kept share's backend object by the share it belongs to, as
    an update may have renamed the share (its ``name`` property) after the
    backend named the object."""
    problems: list[str] = []
    deleted = {s["name"] for s in world["stacks"] if s["deleted_at"] is not None}
    kept_ids = {sid for sid, share in world["shares"].items()
                if share["status"] == vocab.AVAILABLE and kept_resource(share["name"])}
    kept = {world["shares"][sid]["name"] for sid in kept_ids}
    for sid, share in world["shares"].items():
        m = STACK_MADE.match(share["name"] or "")
        if m and m.group(1) in deleted and share["name"] not in kept:
            problems.append(f"teardown: share {sid} ({share['name']}, {share['status']}) "
                            f"outlived its deleted stack {m.group(1)}")
    for sid, snap in world["snapshots"].items():
        m = STACK_MADE.match(snap["name"] or "")
        if m and m.group(1) in deleted:
            problems.append(f"teardown: snapshot {sid} ({snap['name']}, {snap['status']}) "
                            f"outlived its deleted stack {m.group(1)}")
    for obj in backend.values():
        m = STACK_MADE.match(obj["name"] or "")
        if m and m.group(1) in deleted and obj["name"] not in kept \
                and obj.get("share_id") not in kept_ids:
            problems.append(f"teardown: backend {obj['kind']} {obj['id']} ({obj['name']}) "
                            f"outlived its deleted stack {m.group(1)}")
    return problems


# ---------------------------------------------------------------------------
# A run


def _fresh_pg_database(admin_url: str) -> str:
    name = f"sm_chaos_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return sa.engine.make_url(admin_url).set(database=name).render_as_string(False)


def _drop_pg_database(admin_url: str, url: str) -> None:
    name = sa.engine.make_url(url).database
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    engine.dispose()


def open_narrative(path: Path, echo: bool) -> tuple[TextIO, Log]:
    """A run's narrative file and the function that writes a line to it,
    each stamped with the seconds since the run began (and, with ``echo``,
    to stderr too). The caller closes the file."""
    narrative = open(path, "a", buffering=1)
    t0 = time.monotonic()

    def log(text: str) -> None:
        line = f"{time.monotonic() - t0:8.2f} {text}"
        narrative.write(line + "\n")
        if echo:
            print(line, file=sys.stderr, flush=True)

    return narrative, log


def run(opts: Options) -> Result:
    if opts.setup not in SETUPS:
        raise ValueError(f"setup must be one of {SETUPS}, not {opts.setup!r}")
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(10**9)
    root = Path(opts.root or tempfile.mkdtemp(prefix=f"chaos-{opts.setup}-{seed}-"))
    root.mkdir(parents=True, exist_ok=True)
    repro = reproduce_command(opts, seed)
    print(f"chaos: seed {seed}, setup {opts.setup}, kills {opts.kills}, root {root}\n"
          f"chaos: reproduce with: {repro}", file=sys.stderr, flush=True)
    narrative, log = open_narrative(root / "chaos.log", opts.echo)
    t0 = time.monotonic()

    made_db = None
    if opts.setup == "servers":
        db_url = opts.db_url
        if db_url is None:
            db_url = made_db = _fresh_pg_database(PG_ADMIN)
        coordination = opts.redis_url or REDIS_URL
        slots = 2
    else:
        db_url, coordination, slots = None, None, 1
    # A host of its own: engines of other deployments on the same Redis are
    # never taken for peers.
    d = Deployment(root / "deployment", db_url=db_url, coordination_url=coordination,
                   host=f"chaos{uuid.uuid4().hex[:6]}", extra=ENGINE_OPTIONS)
    d.sync()
    reader = Reader(db_url or f"sqlite:///{d.state}/sharemgr.sqlite")
    operator = Operator(d, reader, opts, seed, log)
    fleet = Fleet(d, slots, random.Random(f"{seed}:fleet"), opts, log, operator.busy)
    timings: dict[str, float] = {}
    violations: list[str] = []
    notes: list[str] = []
    checker = None
    try:
        for slot in range(slots):
            fleet.start(slot, {})
        for rec in fleet.current:
            assert rec is not None  # each slot started above
            rec.engine.wait_for_log("share-manager up", timeout=60)
        operator.probe()
        stop_ops = threading.Event()
        refresher = threading.Thread(target=operator.refresh, args=(stop_ops,), daemon=True)
        refresher.start()
        workers = [threading.Thread(target=operator.work, args=(i, stop_ops), daemon=True)
                   for i in range(opts.workers)]
        for w in workers:
            w.start()
        mean = sum(opts.kill_interval) / 2
        cap = opts.max_duration or max(120.0, opts.kills * mean * 3 + 60)
        fleet.run(threading.Event(), time.monotonic() + cap)
        timings["chaos"] = round(time.monotonic() - t0, 1)
        log(f"chaos over: {fleet.kills} kills, {operator.total} operations")
        stop_ops.set()
        for w in workers:
            w.join(150)
        refresher.join(10)
        try:
            fleet.calm()
        except AssertionError as exc:  # an engine died before it was up
            violations.append(f"engine: could not bring every engine up: {exc}")
        settled, took = settle(reader, fleet, opts.settle_timeout, log)
        timings["settle"] = round(took, 1)
        if fleet.kills < opts.kills:
            violations.append(f"chaos: only {fleet.kills} kills of {opts.kills} within "
                              f"{cap:.0f}s (engines too slow to start?)")
        if not settled:
            violations.append(f"settle: not settled within {opts.settle_timeout:.0f}s "
                              "(details below)")
        checker = Checker(d, reader, fleet.records, operator.stacks)
        checker.seen_during_chaos = dict(operator.made_but_error)
        checker.run_all()
        violations += checker.violations
        notes += checker.notes
        fleet.watch()
        if opts.teardown:
            gone, took = teardown(d, reader, fleet.records, opts.settle_timeout, log)
            timings["teardown"] = round(took, 1)
            violations += gone
            fleet.watch()
        violations += fleet.unexpected
        violations += operator.problems
        timings["total"] = round(time.monotonic() - t0, 1)
    finally:
        fleet.stop_all()
        reader.dispose()
        operator.oplog.close()
        if made_db is not None:
            try:
                _drop_pg_database(PG_ADMIN, made_db)
            except Exception as exc:
                log(f"could not drop {made_db}: {exc}")

    kills = {k: fleet.counts[k] for k in ("sigkill", "crash-point", "sigterm", "sigterm-cut",
                                         "starts")}
    kills["total"] = fleet.kills
    stacks_final = getattr(checker, "final_states", {})
    result = Result(
        seed=seed, setup=opts.setup, engines=slots, kills=kills,
        operations={"total": operator.total, "by_exit_code": dict(operator.outcomes),
                    "by_operation": {k: dict(v) for k, v in sorted(operator.per_op.items())},
                    "backend_calls": getattr(checker, "calls_total", None),
                    "requests": getattr(checker, "request_counts", None)},
        stacks={"created": len(operator.stacks), "final": stacks_final,
                "actions_accepted": sum(len(m.accepted) for m in operator.stacks.values())},
        time=timings, violations=violations, notes=notes, root=str(root), reproduce=repro,
    )
    report = {**result.summary(),
              "engines_run": [r.describe() for r in fleet.records],
              "stack_history": {n: [(a, t) for a, _, t in m.accepted]
                                for n, m in sorted(operator.stacks.items())},
              "diagnostics": checker.diagnostics if checker else {}}
    (root / "chaos-report.json").write_text(json.dumps(report, indent=2, default=str))
    narrative.close()
    if not violations and not opts.keep:
        shutil.rmtree(root, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    # A long run from the command line starts its engines as a user does:
    # each its own interpreter (its own hash seed), not forked from the
    # test worker's server (tests/functional/forks.py) as in the suite.
    os.environ.setdefault("SHAREMGR_TEST_DAEMON", "exec")
    p = argparse.ArgumentParser(
        prog="python -m tests.functional.chaos",
        description="Crash chaos: random share operations and stack actions while "
                    "share-manager engines are killed; then every invariant is checked.")
    p.add_argument("--kills", type=int, default=30,
                   help="SIGKILLs plus crash-point exits before the chaos stops (default 30)")
    p.add_argument("--seed", type=int, help="seed of every random choice (default: random)")
    p.add_argument("--setup", choices=SETUPS, default="sqlite",
                   help="sqlite: SQLite + file locks, one engine; servers: PostgreSQL + "
                        "Redis, two engines on one host")
    p.add_argument("--root", type=Path, help="folder for state, logs and the report "
                                             "(default: a new temporary folder)")
    p.add_argument("--workers", type=int, default=3, help="parallel sharectl threads")
    p.add_argument("--kill-interval", type=float, nargs=2, default=(1.0, 4.0),
                   metavar=("MIN", "MAX"), help="seconds between two kills (default 1 4)")
    p.add_argument("--settle-timeout", type=float, default=180.0,
                   help="seconds to wait for everything to settle at the end")
    p.add_argument("--db-url", help="servers: an empty database (default: a new one on "
                                    "$SHAREMGR_TEST_PG's server, dropped afterwards)")
    p.add_argument("--redis-url", help=f"servers: Redis (default {REDIS_URL})")
    p.add_argument("--no-teardown", action="store_true",
                   help="skip the final phase that deletes every stack and checks that "
                        "nothing is left")
    p.add_argument("--no-keep", action="store_true",
                   help="remove the folder after a run without violations")
    p.add_argument("-v", "--verbose", action="store_true", help="narrate on stderr")
    args = p.parse_args(argv)
    opts = Options(kills=args.kills, seed=args.seed, setup=args.setup, root=args.root,
                   workers=args.workers, settle_timeout=args.settle_timeout,
                   kill_interval=tuple(args.kill_interval),
                   db_url=args.db_url, redis_url=args.redis_url, keep=not args.no_keep,
                   teardown=not args.no_teardown,
                   echo=args.verbose)
    result = run(opts)
    print(json.dumps(result.summary(), indent=2, default=str))
    if result.violations:
        print(result.report(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
