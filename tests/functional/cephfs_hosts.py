"""Two hosts, one cephfs backend (issue 43; doc/cephfs_driver.rst, "Two
hosts, one backend").

Two engines, each in a network namespace of its own on a bridge
(``hosts.Network``), serve the same ``cephfs`` backend; PostgreSQL and
Redis are reached through forwarders on the bridge, and the Ceph cluster
of the run binds the bridge's address, so a host cut from the bridge is cut
from all three. Chains of share operations (create, extend, snapshot,
snapshot delete, create from a snapshot whose copy takes a while, deletes)
run through ``sharectl`` while, one after the other:

- ``pause``: host 0's engine frozen (SIGSTOP) inside a fenced call for
  longer than its lease (host 1 takes its requests over), then resumed;
- ``partition``: host 1 cut from the bridge (its packets dropped both
  ways) inside a call, then healed;
- ``kill``: the engine whose fenced call is on a clone still copying
  SIGKILLed, and started again.

Then, once nothing is transient: every share is available or in an error
status; database = cluster (every subvolume and subvolume snapshot of the
backend's group has a row and every settled row a subvolume or snapshot;
every available share's quota is its size); no two engines held one
object's fencing lock at once (the engines' logs, ``cephfs fence`` lines);
the tokens the cluster accepted for an object never went down; a late call
replayed from host 0 with the token a taken-over share had before is
refused by the cluster. Run as root with PostgreSQL and Redis: ``python -m
tests.functional.cephfs_hosts [--root DIR] [--chains N] [--rounds N]``; the
suite runs it (tests/functional/test_cephfs_hosts.py)."""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import NamedTuple

from sqlalchemy.engine import make_url

from tests.functional import faults
from tests.functional.ceph_cluster import VOLUME, CephError, Cluster
from tests.functional.harness import Deployment, Engine, database, db_objects
from tests.functional.hosts import Network
from tests.functional.netfault import Proxy

GIB = 1 << 30
DRIVER_ID = "manila"
GROUP = "twohosts"
FENCE_LOCK = 20  # seconds; a pause or partition holds for less
HOLD = 6.0  # seconds a pause or a partition lasts: longer than the lease
# "<date> <time>.<ms> <pid> DEBUG <logger> [...] cephfs fence: <what> <id> token <n> accepted"
FENCE_LINE = re.compile(r"^(\S+ \S+) \d+ DEBUG \S+ .*cephfs fence: (\w+) (\S+) token (\d+) "
                        r"(accepted|releasing)\b")
REFUSED_LINE = re.compile(r"fence token (\d+) is older than (\d+)")
DATA_FILES = 12  # the clone source's files (a clone copies file by file)
DATA_FILE_BYTES = 2 << 20


class FenceLine(NamedTuple):
    """One ``cephfs fence`` line of an engine's log."""

    log: Path
    time: datetime.datetime
    kind: str  # share | snapshot
    obj: str
    token: int
    what: str  # accepted | releasing


def _ts(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")


class Run:
    """The bridge, the cluster on it, the forwarders, the deployment and
    the two engine slots; ``log`` collects what happened."""

    def __init__(self, root: Path, pg_url: str, redis_url: str) -> None:
        self.root = root
        self.net = Network(2, uuid.uuid4().hex[:4])
        self.lines: list[str] = []
        self.pg_url, self.redis_url = pg_url, redis_url
        self.cluster: Cluster | None = None
        self.proxies: list[Proxy] = []
        self.engines: list[Engine | None] = [None, None]
        self.d: Deployment | None = None
        self.counts: collections.Counter = collections.Counter()

    def log(self, text: str) -> None:
        line = f"{datetime.datetime.now():%H:%M:%S.%f} {text}"
        self.lines.append(line)

    # Set-up ------------------------------------------------------------------

    def up(self) -> None:
        self.net.start()
        gw = self.net.gateway
        self.cluster = Cluster(self.root / "ceph", ip=gw)
        self.cluster.up()
        self.cluster.client(DRIVER_ID)
        pg, redis = Proxy(make_url(self.pg_url).port or 5432, gw), Proxy(6379, gw)
        self.proxies = [pg, redis]
        for proxy in self.proxies:
            proxy.start()
        db_url = make_url(self.pg_url).set(host=gw, port=pg.port).render_as_string(
            hide_password=False)
        _, _, query = self.redis_url.partition("?")
        coord = f"redis://{gw}:{redis.port}" + (f"?{query}" if query else "")
        options = {k: dict(v) for k, v in faults.OPTIONS.items()}
        options["DEFAULT"].update(debug="true",  # the fence lines
                                  clone_poll_interval="1")
        backend = {"share_driver": "cephfs", "cephfs_conf_path": str(self.cluster.conf),
                   "cephfs_auth_id": DRIVER_ID, "cephfs_subvolume_group": GROUP,
                   "cephfs_command_timeout": "30",
                   "cephfs_fence_lock_seconds": str(FENCE_LOCK)}
        self.d = Deployment(self.root / "deployment", db_url=db_url, coordination_url=coord,
                            backends={"cephfs": backend}, extra=options)
        self.d.sync()
        for slot in (0, 1):
            self.start(slot)
        for slot in (0, 1):
            engine = self.engines[slot]
            assert engine is not None
            engine.wait_for_log("share-manager up", timeout=60)

    def start(self, slot: int) -> Engine:
        assert self.d is not None
        engine = self.d.start(wait=False, name=f"host{slot}", wrap=self.net.wrap(slot))
        self.engines[slot] = engine
        self.log(f"start host {slot}: {engine.log.name}")
        return engine

    def down(self) -> None:
        if self.d is not None:
            self.d.stop_all()
        for proxy in self.proxies:
            proxy.cut()
        if self.cluster is not None:
            self.cluster.down()
        self.net.stop()

    # What the engines' logs say ---------------------------------------------

    def fence_lines(self) -> list[FenceLine]:
        """Every engine's fence lines."""
        assert self.d is not None
        return [FenceLine(engine.log, _ts(m[1]), m[2], m[3], int(m[4]), m[5])
                for engine in self.d.engines for line in engine.text().splitlines()
                if (m := FENCE_LINE.match(line))]

    def open_calls(self, slot: int) -> set[str]:
        """Object ids whose fencing lock the slot's engine holds now."""
        engine = self.engines[slot]
        held: collections.Counter = collections.Counter()
        for f in self.fence_lines():
            if engine is not None and f.log == engine.log and f.obj != "_setup":
                held[f.obj] += 1 if f.what == "accepted" else -1
        return {obj for obj, n in held.items() if n > 0}

    # The workload -------------------------------------------------------------

    def sharectl(self, *args: str) -> dict:
        assert self.d is not None
        shown = () if args[1] == "delete" else ("-f", "json")
        out = self.d.sharectl(*args, *shown, check=False, timeout=600)
        self.counts[f"{args[0]} {args[1]}"] += 1
        if out.returncode != 0:
            self.log(f"sharectl {' '.join(args)}: exit {out.returncode}: "
                     f"{out.stderr.strip()[-300:]}")
            return {}
        return json.loads(out.stdout) if shown and out.stdout.strip() else {}

    def source(self) -> str:
        """A share full of files and its snapshot: what the clones copy."""
        assert self.cluster is not None
        share = self.sharectl("share", "create", "1", "--proto", "CEPHFS", "--name", "source",
                              "--wait")
        location = self.sharectl("share", "show", share["id"])["export_locations"][0]
        path = (location["path"] if isinstance(location, dict) else location).split(":", 2)[-1]
        for i in range(DATA_FILES):
            self.cluster.files("write", f"{path}/data-{i}", data=bytes([i]) * DATA_FILE_BYTES)
        return str(self.sharectl("snapshot", "create", share["id"], "--wait")["id"])

    def chain(self, n: int, source_snapshot: str, rounds: int, done: threading.Event) -> None:
        """Rounds of operations: at least ``rounds``, and until ``done``."""
        r = 0
        while r < rounds or not done.is_set():
            r += 1
            share = self.sharectl("share", "create", "1", "--proto", "CEPHFS",
                                  "--name", f"c{n}r{r}", "--wait")
            if not share:
                continue
            sid = share["id"]
            self.sharectl("share", "extend", sid, "2", "--wait")
            snap = self.sharectl("snapshot", "create", sid, "--wait")
            if snap:
                self.sharectl("snapshot", "delete", snap["id"], "--wait")
            clone = self.sharectl("share", "create", "2", "--proto", "CEPHFS",
                                  "--name", f"clone{n}r{r}", "--snapshot", source_snapshot,
                                  "--wait")
            if (n + r) % 2:
                if clone:
                    self.sharectl("share", "delete", clone["id"], "--wait")
                self.sharectl("share", "delete", sid, "--wait")

    # The faults ------------------------------------------------------------------

    def _when_in_call(self, slot: int, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.open_calls(slot):
                return True
            time.sleep(0.05)
        return False

    def pause(self, slot: int) -> None:
        engine = self.engines[slot]
        assert engine is not None
        in_call = self._when_in_call(slot)
        engine.proc.send_signal(signal.SIGSTOP)
        self.log(f"pause host {slot} (inside a call: {in_call}) for {HOLD}s")
        time.sleep(HOLD)
        engine.proc.send_signal(signal.SIGCONT)
        self.counts[f"pause in call {in_call}"] += 1

    def partition(self, slot: int) -> None:
        in_call = self._when_in_call(slot)
        gw = self.net.gateway
        self.net.drop(slot, ("OUTPUT", "-d", gw), ("INPUT", "-s", gw))
        self.log(f"partition host {slot} (inside a call: {in_call}) for {HOLD}s")
        time.sleep(HOLD)
        self.net.heal(slot)
        self.log(f"healed host {slot}")
        self.counts[f"partition in call {in_call}"] += 1

    def kill_mid_clone(self) -> None:
        """SIGKILL the engine whose fenced call is on a share still
        copying (the lowest slot when the copy is in no call: the poll
        has it), then start it again."""
        assert self.d is not None
        from sharemgr.common import vocab
        from sharemgr.db import api, models

        db, _ = database(self.d)
        deadline = time.monotonic() + 120
        instances: set[str] = set()
        try:
            while time.monotonic() < deadline and not instances:
                rows = api.query(db, models.ShareInstance,
                                 {"status": vocab.CREATING_FROM_SNAPSHOT})
                instances = {r.id for r in rows if self._copying(r.id)}
                time.sleep(0.2)
        finally:
            db.dispose()
        in_call = {s: bool(self.open_calls(s) & instances) for s in (0, 1)}
        slot = next((s for s in (0, 1) if in_call[s]), 0)
        engine = self.engines[slot]
        assert engine is not None
        engine.kill()
        self.log(f"SIGKILL host {slot} while {len(instances)} share(s) copy "
                 f"(inside the clone's call: {in_call[slot]})")
        self.counts[f"kill mid-clone {bool(instances)}"] += 1
        time.sleep(2)
        self.start(slot)

    def _copying(self, instance: str) -> bool:
        """Whether the cluster copies the clone ``instance`` now (its
        share's status says so before the driver's call has made it)."""
        assert self.cluster is not None
        try:
            answer = self.cluster.json("fs", "clone", "status", VOLUME, instance,
                                       "--group_name", GROUP)
        except (CephError, ValueError):
            return False
        return answer["status"]["state"] in ("pending", "in-progress")

    def faults(self) -> None:
        self.pause(0)
        self.partition(1)
        self.kill_mid_clone()

    # Afterwards ------------------------------------------------------------------

    def settle(self, timeout: float = 240) -> list[dict]:
        assert self.d is not None
        deadline = time.monotonic() + timeout
        from sharemgr.common import vocab

        while True:
            shares = self.d.json("share", "list")
            snaps = self.d.json("snapshot", "list")
            busy = [r for r in shares + snaps if r["status"] in vocab.TRANSIENT_STATUSES]
            if not busy:
                return shares
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled after {timeout}s: "
                                     f"{[(r['id'], r['status']) for r in busy]}")
            time.sleep(1)

    def violations(self, shares: list[dict]) -> list[str]:
        assert self.d is not None and self.cluster is not None
        from sharemgr.common import vocab
        from sharemgr.db import api, models

        out = [f"share {s['id']} {s['status']}" for s in shares
               if s["status"] != vocab.AVAILABLE and s["status"] not in vocab.ERROR_STATUSES]
        # Database = cluster.
        subvolumes = self.cluster.subvolumes(GROUP, VOLUME)
        cluster = {("share", s) for s in subvolumes}
        for sub in subvolumes:
            for snap in self.cluster.json("fs", "subvolume", "snapshot", "ls", VOLUME, sub,
                                          "--group_name", GROUP):
                cluster.add(("snapshot", snap["name"]))
        rows, settled = db_objects(self.d)["cephfs"], db_objects(self.d, True)["cephfs"]
        out += [f"in the database only: {k} {i}" for k, i in sorted(settled - cluster)]
        out += [f"in the cluster only: {k} {i}" for k, i in sorted(cluster - rows)]
        db, _ = database(self.d)
        try:
            sizes = {s.id: s.size for s in api.query(db, models.Share)}
            for inst in api.query(db, models.ShareInstance):
                if inst.status != vocab.AVAILABLE or inst.id not in subvolumes:
                    continue
                quota = self.cluster.subvolume(GROUP, inst.id, VOLUME)["bytes_quota"]
                if quota != sizes[inst.share_id] * GIB:
                    out.append(f"share instance {inst.id}: quota {quota}, size "
                               f"{sizes[inst.share_id]} GiB")
        finally:
            db.dispose()
        return out + self.fence_violations()

    def fence_violations(self) -> list[str]:
        """No two engines inside one object's lock at once; the accepted
        tokens of an object never go down."""
        out = []
        held: dict[tuple[Path, str, int], datetime.datetime] = {}
        spans: dict[str, list[tuple[datetime.datetime, datetime.datetime, Path, int]]] = \
            collections.defaultdict(list)
        for f in sorted(self.fence_lines(), key=lambda f: f.time):
            if f.what == "accepted":
                held[(f.log, f.obj, f.token)] = f.time
            elif (f.log, f.obj, f.token) in held:
                spans[f.obj].append((held.pop((f.log, f.obj, f.token)), f.time, f.log, f.token))
        # A call a SIGKILL cut: held until its lock expired.
        for (log, obj, token), t in held.items():
            spans[obj].append((t, t + datetime.timedelta(seconds=FENCE_LOCK), log, token))
        for obj, calls in spans.items():
            calls.sort()
            last: tuple[datetime.datetime, Path] | None = None  # the latest end so far
            for start, stop, log, _token in calls:
                if last is not None and last[1] != log and start < last[0]:
                    out.append(f"object {obj}: {last[1].name} held its lock until {last[0]} "
                               f"and {log.name} from {start}")
                if last is None or stop > last[0]:
                    last = (stop, log)
            accepted = [tok for _s, _e, _l, tok in calls]
            if accepted != sorted(accepted):
                out.append(f"object {obj}: tokens accepted in the order {accepted}")
        self.counts["fenced calls"] = sum(len(c) for c in spans.values())
        return out

    def late_call(self) -> list[str]:
        """A call replayed from host 0 with the token an engine used on a
        share before another engine took it over (its late call): the
        cluster refuses it, and a live share's quota stays as it is."""
        assert self.d is not None and self.cluster is not None
        tokens: dict[str, set[int]] = collections.defaultdict(set)
        for f in self.fence_lines():
            if f.kind == "share":
                tokens[f.obj].add(f.token)
        taken = sorted(o for o, t in tokens.items() if len(t) > 1)
        self.counts["shares taken over"] = len(taken)
        if not taken:
            return ["no share was taken over by another engine: the faults missed"]
        subvolumes = self.cluster.subvolumes(GROUP, VOLUME)
        obj = next((o for o in taken if o in subvolumes), taken[0])
        folder = self.root / "late-call"
        folder.mkdir(exist_ok=True)
        options = {"cephfs_conf_path": str(self.cluster.conf), "cephfs_auth_id": DRIVER_ID,
                   "cephfs_subvolume_group": GROUP, "cephfs_fence_lock_seconds": "5"}
        argv = [*self.net.wrap(0), sys.executable, "-c", _LATE_CALL, str(folder),
                json.dumps(options), obj, str(min(tokens[obj])), str(obj in subvolumes)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        self.log(f"late call on {obj} with token {min(tokens[obj])} (accepted: "
                 f"{sorted(tokens[obj])}): {out.stdout.strip()}")
        if out.returncode != 0:
            return [f"late call on {obj}: {out.stdout.strip()} {out.stderr.strip()[-800:]}"]
        return []

    def refused(self) -> int:
        assert self.d is not None
        return sum(len(REFUSED_LINE.findall(e.text())) for e in self.d.engines)


# Run inside a host's namespace: a driver of its own (no engine, no local
# state) makes the stale call; exit 0 when the cluster refused it.
_LATE_CALL = """
import json, sys
from pathlib import Path
from sharemgr.drivers.exceptions import FencedCall
from sharemgr.drivers.kit_build import build_driver
folder, options, ident, token, live = sys.argv[1:6]
drv = build_driver("cephfs", Path(folder), setup=True, driver_handles_share_servers=False,
                   **json.loads(options))
share = {"id": ident, "share_id": ident, "name": "late", "size": 2, "share_proto": "CEPHFS",
         "project_id": "p", "fence_token": int(token)}
calls = [("get_share_status", ())] + ([("extend_share", (5,))] if live == "True" else [])
before = drv._info(ident)["bytes_quota"] if live == "True" else None
for name, args in calls:
    try:
        getattr(drv, name)(share, *args)
    except FencedCall as exc:
        print(f"{name} refused: {exc}")
    else:
        print(f"{name} was not refused")
        sys.exit(1)
if live == "True" and drv._info(ident)["bytes_quota"] != before:
    print("the quota changed")
    sys.exit(1)
drv.ceph.close()
"""


def run(root: Path, pg_url: str, redis_url: str, chains: int = 3, rounds: int = 2) -> dict:
    """The whole run; its summary (``violations`` empty when it passed)."""
    r = Run(root, pg_url, redis_url)
    try:
        r.up()
        snapshot = r.source()
        with concurrent.futures.ThreadPoolExecutor(chains + 1) as pool:
            done = threading.Event()
            work = [pool.submit(r.chain, n, snapshot, rounds, done) for n in range(chains)]
            fault = pool.submit(r.faults)
            fault.add_done_callback(lambda _f: done.set())
            for fut in [*work, fault]:
                fut.result()  # an exception in a chain or a fault fails the run
        shares = r.settle()
        violations = r.violations(shares) + r.late_call()
        return {"violations": violations, "counts": dict(r.counts),
                "statuses": dict(collections.Counter(s["status"] for s in shares)),
                "refused stale calls": r.refused(), "log": r.lines}
    finally:
        r.down()


def main(argv: list[str] | None = None) -> int:
    from tests.functional import chaos

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path)
    parser.add_argument("--chains", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="cephfs-hosts-"))
    url = chaos._fresh_pg_database(chaos.PG_ADMIN)
    try:
        summary = run(root, url, f"{chaos.REDIS_URL}?namespace=sm_{uuid.uuid4().hex[:12]}",
                      args.chains, args.rounds)
    except CephError as exc:
        print(f"cephfs_hosts: {exc}", file=sys.stderr)
        return 1
    finally:
        chaos._drop_pg_database(chaos.PG_ADMIN, url)
    print(json.dumps(summary, indent=2, default=str))
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
