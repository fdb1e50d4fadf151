"""Pause and partition faults (doc/chaos.rst, "Pauses and partitions").

Two engines on PostgreSQL + Redis, share operations and stack actions fired
through ``sharectl`` (the crash chaos's operator), slow driver calls; one
fault at a time, each held longer than the membership timeout and the lease
heartbeat, then healed:

- ``pause``: the engine is frozen (SIGSTOP), preferably inside a driver
  call, then resumed (SIGCONT);
- ``redis``, ``database``, ``both``: the engine's connections to Redis, to
  PostgreSQL or to both go through a forwarder of its own that the run
  freezes: packets are dropped, not refused, until it thaws.

After the faults every engine must be a member of the group again; then,
with no engine restarted, the deployment must settle and the crash
chaos's invariants hold (no transient status, database and backend agree,
no create or delete done twice, no two accepted state-changing calls on one
object overlapping, nothing pending), and the stacks tear down.

Run: ``python -m tests.functional.faults --faults 100 [--seed N]`` (``make
faults``); a short run is in the test suite (tests/functional/test_faults.py).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from tests.functional import chaos
from tests.functional.harness import Deployment, wait_until
from tests.functional.netfault import Proxy, through

KINDS = ("pause", "redis", "database", "both")
# What a run reports (JSON).
Summary = dict[str, Any]

# Faster take-overs than the defaults: a frozen engine's lease is stuck two
# seconds after its last renewal, and every second a peer looks for such.
OPTIONS = {
    "DEFAULT": {**chaos.ENGINE_OPTIONS["DEFAULT"],
                "operation_heartbeat_seconds": "2",
                "operation_lease_seconds": "120",
                "periodic_reconciliation_interval": "1"},
    "coordination": dict(chaos.ENGINE_OPTIONS["coordination"]),
}


@dataclasses.dataclass
class Options(chaos.Options):
    """The crash chaos's options (its operator and fleet read them), with
    a fault run's own: no kills, faults held and spaced."""

    faults: int = 4
    hold: tuple[float, float] = (6.0, 12.0)  # seconds a fault lasts
    interval: tuple[float, float] = (1.0, 4.0)  # seconds between two faults
    settle_timeout: float = 180.0
    max_stacks: int = 4
    max_manual_shares: int = 8
    kills: int = 0


def _knobs(rng: random.Random) -> dict[str, str]:
    """Slow calls (delays only: no crash points, no failures), so that a
    fault finds engines inside driver calls."""
    methods = rng.sample(chaos.DELAY_METHODS, rng.randint(3, 6))
    return {"dummy_method_delays": ",".join(
        f"{m}:{rng.choice((1.0, 2.0, 3.0))}" for m in methods)}


class FaultFleet(chaos.Fleet):
    """Two engine slots, each behind forwarders of its own to Redis and to
    PostgreSQL, and the fault loop."""

    opts: Options  # a fault run's
    kinds: tuple[str, ...] = KINDS
    fault_overhead = 0.0  # seconds a fault takes besides its hold (a failover's copy)
    clock_skew = 0.0  # seconds a clock fault moves an engine's clock

    def __init__(self, d: Deployment, rng: random.Random, opts: Options, log: chaos.Log,
                 busy: Callable[[], bool], redis_url: str, db_url: str) -> None:
        super().__init__(d, 2, rng, opts, log, busy)
        self.redis_url, self.db_url = redis_url, db_url
        self.proxies = [(Proxy(urlsplit(redis_url).port or 6379),
                         Proxy(make_url(db_url).port or 5432)) for _ in range(2)]
        for pair in self.proxies:
            for proxy in pair:
                proxy.start()
        self.faults: collections.Counter = collections.Counter()
        self.in_call = 0  # pauses that caught the engine inside a driver call

    def start(self, slot: int, knobs: dict[str, str]) -> chaos.EngineRecord:
        self.generation += 1
        redis, pg = self.proxies[slot]
        path = self.d.root / f"engine-{slot}-{self.generation}.conf"
        self.d.write_config(
            path, dummy=knobs,
            coordination={"backend_url": through(self.redis_url, redis.port)},
            database={"connection": make_url(self.db_url).set(port=pg.port)
                      .render_as_string(hide_password=False)})
        engine = self.d.start(wait=False, config=path,
                              name=f"slot{slot}-gen{self.generation}")
        rec = chaos.EngineRecord(slot, engine, knobs, str(path), chaos.utcnow())
        with self.lock:
            self.records.append(rec)
            self.current[slot] = rec
        self.counts["starts"] += 1
        self.log(f"start slot {slot} ({engine.log.name}) knobs {knobs}")
        return rec

    def _in_call(self, rec: chaos.EngineRecord) -> bool:
        """Whether the engine has a state-changing call under way."""
        if rec.engine_id is None:
            return False
        path = Path(self.d.sections["dummy"]["dummy_state_path"]) / chaos.DB_NAME
        recent = (chaos.utcnow() - datetime.timedelta(seconds=4)).isoformat(
            timespec="microseconds")
        try:
            conn = sqlite3.connect(path, timeout=30)
            try:
                rows = conn.execute(
                    "SELECT method FROM calls WHERE engine_id = ? AND finished IS NULL "
                    "AND fenced = 0 AND time > ?",
                    (rec.engine_id, recent)).fetchall()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            self.log(f"cannot read the call log: {exc}")
            return False
        return any(m not in chaos.READ_METHODS for (m,) in rows)

    def fault(self, kind: str, slot: int, hold: float) -> None:
        rec = self.current[slot]
        assert rec is not None
        began = chaos.utcnow()
        try:
            self._fault(kind, slot, hold, rec)
        finally:
            rec.interrupted.append((began, chaos.utcnow()))
        self.faults[kind] += 1

    def _fault(self, kind: str, slot: int, hold: float, rec: chaos.EngineRecord) -> None:
        if kind == "pause":
            # Caught inside a driver call where one comes within a while.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not self._in_call(rec):
                time.sleep(0.05)
            caught = self._in_call(rec)
            self.in_call += caught
            os.kill(rec.engine.proc.pid, signal.SIGSTOP)
            self.log(f"SIGSTOP slot {slot} for {hold:.1f}s"
                     f"{' inside a driver call' if caught else ''}")
            try:
                time.sleep(hold)
            finally:
                os.kill(rec.engine.proc.pid, signal.SIGCONT)
            self.log(f"SIGCONT slot {slot}")
        else:
            redis, pg = self.proxies[slot]
            cut = {"redis": [redis], "database": [pg], "both": [redis, pg]}[kind]
            for proxy in cut:
                proxy.freeze()
            self.log(f"cut slot {slot} from {kind} for {hold:.1f}s")
            try:
                time.sleep(hold)
            finally:
                for proxy in cut:
                    proxy.thaw()
            self.log(f"healed slot {slot} ({kind})")

    def run(self, stop: threading.Event, deadline: float) -> None:
        rng = self.rng
        # Every kind once before any repeats, in a random order.
        plan = [self.kinds[i % len(self.kinds)] for i in range(self.opts.faults)]
        rng.shuffle(plan)
        for kind in plan:
            if stop.is_set() or time.monotonic() > deadline:
                break
            time.sleep(rng.uniform(*self.opts.interval))
            self.fault(kind, rng.randrange(len(self.current)), rng.uniform(*self.opts.hold))
            for rec in self.current:
                if rec is not None and self.reap(rec):
                    self.unexpected.append(f"engine: {rec.engine.log.name} ended ({rec.how}) "
                                           "during the faults")

    def rejoined(self, timeout: float) -> list[str]:
        """Every engine is a member of the group again (sharectl service list)."""
        ids = {r.engine_id for r in self.current if r is not None}

        def alive() -> set[str]:
            return {s["engine_id"] for s in self.d.json("service", "list") if s["alive"]}

        try:
            wait_until(lambda: ids <= alive(), timeout=timeout,
                       what="every engine a member of the group again")
        except AssertionError as exc:
            # Each engine still out logs every thread's stack (SIGUSR2), so
            # that the run's logs say where its membership check stands.
            out = [r for r in self.current if r is not None and r.engine_id not in alive()]
            for r in out:
                if r.engine.proc.poll() is None:
                    r.engine.proc.send_signal(signal.SIGUSR2)
            names = ", ".join(r.engine.log.name for r in out) or "none by now"
            return [f"membership: {exc} (out: {names}; their logs hold their threads' stacks)"]
        return []

    def close(self) -> None:
        for pair in self.proxies:
            for proxy in pair:
                proxy.thaw()


def run(opts: Options) -> Summary:
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(10**9)
    repro = f"{sys.executable} -m tests.functional.faults --faults {opts.faults} --seed {seed}"
    made_db = None
    db_url = opts.db_url
    if db_url is None:
        db_url = made_db = chaos._fresh_pg_database(chaos.PG_ADMIN)
    redis_url = opts.redis_url or chaos.REDIS_URL
    try:
        return exercise(
            opts, seed, repro, "faults", db_url, redis_url,
            lambda d, rng, log, busy: FaultFleet(d, rng, opts, log, busy, redis_url, db_url))
    finally:
        if made_db is not None:
            try:
                chaos._drop_pg_database(chaos.PG_ADMIN, made_db)
            except Exception as exc:
                print(f"could not drop {made_db}: {exc}", file=sys.stderr)


def exercise(opts: Options, seed: int, repro: str, name: str, db_url: str,
             coordination_url: str,
             fleet_of: Callable[[Deployment, random.Random, chaos.Log, Callable[[], bool]],
                                FaultFleet],
             extra: dict[str, dict[str, str]] | None = None) -> Summary:
    """One run: a deployment on these servers, the fleet ``fleet_of`` makes
    (its engines started in every slot), the crash chaos's operator firing
    while the fleet's faults run; then every engine a member again, the
    deployment settled with no engine restarted, every invariant checked,
    the stacks torn down. The summary, also written to the run's folder."""
    root = Path(opts.root or tempfile.mkdtemp(prefix=f"{name}-{seed}-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{name}: seed {seed}, {opts.faults} faults, root {root}\n{name}: reproduce with: "
          f"{repro}", file=sys.stderr, flush=True)
    narrative, log = chaos.open_narrative(root / f"{name}.log", opts.echo)
    t0 = time.monotonic()
    options = {section: {**values, **(extra or {}).get(section, {})}
               for section, values in OPTIONS.items()}
    d = Deployment(root / "deployment", db_url=db_url, coordination_url=coordination_url,
                   host=f"{name}{uuid.uuid4().hex[:6]}", extra=options)
    d.sync()
    reader = chaos.Reader(db_url)
    operator = chaos.Operator(d, reader, opts, seed, log)
    rng = random.Random(f"{seed}:faults")
    fleet = fleet_of(d, rng, log, operator.busy)
    violations: list[str] = []
    notes: list[str] = []
    timings: dict[str, float] = {}
    checker = None
    try:
        for slot in range(len(fleet.current)):
            fleet.start(slot, _knobs(rng))
        for rec in fleet.current:
            assert rec is not None
            rec.engine.wait_for_log("share-manager up", timeout=60)
        operator.probe()
        stop_ops = threading.Event()
        threads = [threading.Thread(target=operator.refresh, args=(stop_ops,), daemon=True)]
        threads += [threading.Thread(target=operator.work, args=(i, stop_ops), daemon=True)
                    for i in range(opts.workers)]
        for t in threads:
            t.start()
        cap = 60 + opts.faults * (opts.hold[1] + opts.interval[1] + 5 + fleet.fault_overhead)
        fleet.run(threading.Event(), time.monotonic() + cap)
        timings["faults"] = round(time.monotonic() - t0, 1)
        log(f"faults over: {dict(fleet.faults)}, {operator.total} operations")
        stop_ops.set()
        for t in threads:
            t.join(150)
        violations += fleet.rejoined(60)
        # No restart before settling: a restart's startup pass would settle
        # what the faults left stuck, and hide it.
        settled, took = chaos.settle(reader, fleet, opts.settle_timeout, log)
        timings["settle"] = round(took, 1)
        if not settled:
            violations.append(f"settle: not settled within {opts.settle_timeout:.0f}s")
        checker = chaos.Checker(d, reader, fleet.records, operator.stacks)
        checker.seen_during_chaos = dict(operator.made_but_error)
        checker.clock_skew = fleet.clock_skew
        checker.run_all()
        violations += checker.violations + fault_failures(checker.world)
        notes += checker.notes
        gone, took = chaos.teardown(d, reader, fleet.records, opts.settle_timeout, log)
        timings["teardown"] = round(took, 1)
        violations += gone
        violations += fleet.unexpected + operator.problems
        timings["total"] = round(time.monotonic() - t0, 1)
    finally:
        fleet.close()
        fleet.stop_all()
        reader.dispose()
        operator.oplog.close()
        narrative.close()
    calls = checker.calls() if checker else []
    summary = {
        "seed": seed, "faults": dict(fleet.faults), "faults_inside_a_call": fleet.in_call,
        "operations": {"total": operator.total, "by_exit_code": dict(operator.outcomes)},
        "stacks": {"created": len(operator.stacks),
                   "actions_accepted": sum(len(m.accepted) for m in operator.stacks.values())},
        "backend_calls": len(calls), "fenced_calls": sum(1 for c in calls if c.get("fenced")),
        "requests": getattr(checker, "request_counts", None), "time": timings,
        "violations": violations, "notes": notes, "root": str(root), "reproduce": repro,
        "diagnostics": checker.diagnostics if checker else {},
    }
    (root / f"{name}-report.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


# What an operation cut by a fault says (manager/operations.py: NotNow, Lost):
# a stack must never fail for it (convergence/act.py, Actor.cut).
CUT_BY_A_FAULT = ("not calling the driver", "changed while the driver worked",
                  "fenced by the backend")


def fault_failures(world: dict) -> list[str]:
    """Stacks and stack rows left FAILED by a pause or a partition."""
    out = []
    for kind, records in (("stack", world["stacks"]), ("stack row", world["rows"])):
        for r in records:
            reason = r.get("status_reason") or ""
            if r["status"] == "FAILED" and any(cut in reason for cut in CUT_BY_A_FAULT):
                out.append(f"{kind} {r.get('name')} #{r['id']}: {r['action']} FAILED by a "
                           f"fault: {reason[:200]}")
    return out


def main(argv: list[str] | None = None) -> int:
    # A long run from the command line starts its engines as a user does:
    # each its own interpreter (its own hash seed), not forked from the
    # test worker's server (tests/functional/forks.py) as in the suite.
    os.environ.setdefault("SHAREMGR_TEST_DAEMON", "exec")
    p = argparse.ArgumentParser(
        prog="python -m tests.functional.faults",
        description="Pause and partition faults on two engines (PostgreSQL + Redis); then "
                    "every invariant is checked.")
    p.add_argument("--faults", type=int, default=4,
                   help="faults to inject, the kinds in turn (pause, redis, database, both)")
    p.add_argument("--seed", type=int, help="seed of every random choice (default: random)")
    p.add_argument("--root", type=Path, help="folder for state, logs and the report")
    p.add_argument("-v", "--verbose", action="store_true", help="narrate on stderr")
    args = p.parse_args(argv)
    return report("faults", run(Options(faults=args.faults, seed=args.seed, root=args.root,
                                        echo=args.verbose)))


def report(name: str, summary: Summary) -> int:
    """Print a run's summary (JSON), and its violations on stderr; the exit code."""
    print(json.dumps(summary, indent=2, default=str))
    if summary["violations"]:
        print(f"{name} seed {summary['seed']}: {len(summary['violations'])} violation(s); "
              f"reproduce: {summary['reproduce']}", file=sys.stderr)
        for v in summary["violations"]:
            print(f"  - {v}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
