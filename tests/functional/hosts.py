"""Many hosts (issue 44; doc/chaos.rst, "Many hosts").

Three engines, each in a network namespace of its own (a "host") joined to
the machine by a veth pair on a bridge; PostgreSQL as a primary and a
synchronous standby (tests/functional/pg_pair.py) on the multi-host URL;
coordination on a 3-member etcd cluster behind a gateway
(tests/functional/etcd_cluster.py), or on Redis; the dummy backend shared
by the hosts with fencing on; the crash chaos's operator firing share
operations and stack actions; slow driver calls. Each host reaches every
server through forwarders of its own on the bridge (so that one host's
link can be slowed), and its packets can be dropped inside its namespace
(iptables), so a partition hangs rather than refuses.

One fault at a time, each while calls are in flight, then healed:

- ``partition``: the host cut from everything (both ways);
- ``database`` / ``coordination``: cut from the database / the
  coordination service only;
- ``asymmetric``: the host can send but receives nothing;
- ``loss``: 30 % of its packets dropped both ways; ``delay``: its
  forwarders hold every chunk 0.3 s;
- ``member`` / ``leader`` (etcd): an etcd member / the leader killed,
  restarted after the hold;
- ``failover``: the database primary killed and the standby promoted; the
  deposed primary comes back only as the new one's standby;
- ``clock``: the host's wall clock two minutes ahead or behind
  (libfaketime, its offset in a file the engine re-reads);
- ``pause``: the engine frozen (SIGSTOP), preferably inside a driver call.

Then the invariants of the pause/partition run (tests/functional/faults.py).
Run as root: ``python -m tests.functional.hosts --faults 22 [--seed N]
[--coordination redis]`` (``make hosts``); a short run is in the test suite
(tests/functional/test_hosts.py).
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from tests.functional import chaos
from tests.functional.clocks import faked_clock
from tests.functional.etcd_cluster import Cluster
from tests.functional.faults import FaultFleet, Options, Summary, exercise, report
from tests.functional.harness import Deployment
from tests.functional.netfault import Proxy
from tests.functional.pg_pair import Pair

KINDS = ("partition", "database", "coordination", "asymmetric", "loss", "delay", "member",
         "leader", "failover", "clock", "pause")
REDIS_KINDS = tuple(k for k in KINDS if k not in ("member", "leader"))
HOSTS = 3
CLOCK_SHIFT = 120  # seconds, either way


def require_hosts() -> None:
    """Skip (fail under CI=true) where hosts cannot be made."""
    import pytest

    from tests.conftest import IN_CI

    problems = [f"no {p}" for p in ("ip", "iptables") if shutil.which(p) is None]
    if os.geteuid() != 0:
        problems.append("not root (network namespaces)")
    if not problems:
        return
    msg = "the many-host run needs " + "; ".join(problems) + \
        " (Debian packages iproute2 iptables)"
    if IN_CI:
        pytest.fail(msg + " (CI=true: required)")
    pytest.skip(msg)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


class Network:
    """A bridge on the machine and a namespace per host on it."""

    def __init__(self, hosts: int, tag: str) -> None:
        self.tag = tag  # short: interface names hold 15 characters
        self.bridge = f"smb{tag}"
        self.first = int(tag, 16) % 250  # where the search for a free /24 starts
        self.prefix = self.gateway = ""  # known once started
        self.names = [f"smh{tag}{i}" for i in range(hosts)]

    def start(self) -> None:
        # A /24 no other run on the machine uses (two runs on one network
        # would route each other's packets): chosen and taken under a lock.
        with open("/tmp/sharemgr-host-networks.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                                  text=True, timeout=30).stdout
            third = next(n % 250 for n in range(self.first, self.first + 250)
                         if f" 10.231.{n % 250}." not in used)
            self.prefix = f"10.231.{third}"
            self.gateway = f"{self.prefix}.1"
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names):
            outer, inner = f"smv{self.tag}{i}", f"smp{self.tag}{i}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _sh("ip", "link", "set", outer, "master", self.bridge)
            _sh("ip", "link", "set", outer, "up")
            _sh("ip", "link", "set", inner, "netns", ns)
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.prefix}.{10 + i}/24",
                "dev", inner)
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def wrap(self, host: int) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.names[host])

    def drop(self, host: int, *rules: tuple[str, ...]) -> None:
        """iptables rules (each ``(chain, match…)``, DROP) inside the host."""
        for chain, *match in rules:
            _sh(*self.wrap(host), "iptables", "-A", chain, *match, "-j", "DROP")

    def heal(self, host: int) -> None:
        _sh(*self.wrap(host), "iptables", "-F")

    def stop(self) -> None:
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)


class HostFleet(FaultFleet):
    """Three engine slots, each on a host of its own, and their faults."""

    fault_overhead = 15.0  # a failover's rebuild of the standby
    clock_skew = float(CLOCK_SHIFT)

    def __init__(self, d: Deployment, rng: random.Random, opts: Options, log: chaos.Log,
                 busy: Callable[[], bool], net: Network, pair: Pair, cluster: Cluster | None,
                 redis_port: int) -> None:
        chaos.Fleet.__init__(self, d, HOSTS, rng, opts, log, busy)
        self.net, self.pair, self.cluster = net, pair, cluster
        self.kinds = KINDS if cluster is not None else REDIS_KINDS
        coord_port = cluster.gateway_port if cluster is not None else redis_port
        # Per host: the two PostgreSQL servers and the coordination service.
        self.forwarders: list[dict[str, list[Proxy]]] = [
            {"pg": [Proxy(pair.ports[n], net.gateway) for n in ("primary", "standby")],
             "coordination": [Proxy(coord_port, net.gateway)]}
            for _ in range(HOSTS)]
        for proxies in self.forwarders:
            for group in proxies.values():
                for proxy in group:
                    proxy.start()
        self.clocks = [d.root / f"clock-{i}" for i in range(HOSTS)]
        for path in self.clocks:
            path.write_text("+0s\n")
        self.coordination_url = d.sections["coordination"]["backend_url"]
        self.faults = collections.Counter()
        self.in_call = 0

    def _urls(self, slot: int) -> tuple[str, str]:
        gw = self.net.gateway
        pg = self.forwarders[slot]["pg"]
        db = ("postgresql+psycopg2://postgres@/sharemgr?"
              + "&".join(f"host={gw}:{p.port}" for p in pg)
              + "&target_session_attrs=read-write")
        coord = self.forwarders[slot]["coordination"][0]
        head, _, query = self.coordination_url.partition("?")
        scheme, _, _ = head.partition("://")
        return db, f"{scheme}://{gw}:{coord.port}" + (f"?{query}" if query else "")

    def start(self, slot: int, knobs: dict[str, str]) -> chaos.EngineRecord:
        self.generation += 1
        db, coord = self._urls(slot)
        path = self.d.root / f"engine-{slot}-{self.generation}.conf"
        self.d.write_config(path, dummy=knobs, coordination={"backend_url": coord},
                            database={"connection": db})
        engine = self.d.start(wait=False, config=path, name=f"host{slot}-gen{self.generation}",
                              wrap=self.net.wrap(slot), env=faked_clock(self.clocks[slot]))
        rec = chaos.EngineRecord(slot, engine, knobs, str(path), chaos.utcnow())
        with self.lock:
            self.records.append(rec)
            self.current[slot] = rec
        self.counts["starts"] += 1
        self.log(f"start host {slot} ({engine.log.name}) knobs {knobs}")
        return rec

    def _ports(self, slot: int, what: str) -> list[str]:
        return [str(p.port) for p in self.forwarders[slot][what]]

    def fault(self, kind: str, slot: int, hold: float) -> None:
        if kind == "pause":
            super().fault(kind, slot, hold)
            return
        rec = self.current[slot]
        assert rec is not None
        # While calls are in flight: wait a while for one on this host.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self._in_call(rec):
            time.sleep(0.05)
        self.in_call += self._in_call(rec)
        gw = self.net.gateway
        heal = self._inject(kind, slot, gw)
        self.log(f"{kind} on host {slot} for {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            heal()
        self.log(f"healed {kind} on host {slot}")
        self.faults[kind] += 1

    def _inject(self, kind: str, slot: int, gw: str) -> Callable[[], None]:
        net = self.net
        if kind in ("partition", "database", "coordination", "asymmetric", "loss"):
            if kind == "partition":
                net.drop(slot, ("OUTPUT", "-d", gw), ("INPUT", "-s", gw))
            elif kind in ("database", "coordination"):
                ports = ",".join(self._ports(slot, "pg" if kind == "database"
                                             else "coordination"))
                net.drop(slot, ("OUTPUT", "-d", gw, "-p", "tcp", "-m", "multiport",
                                "--dports", ports))
            elif kind == "asymmetric":
                net.drop(slot, ("INPUT", "-s", gw))
            else:
                rnd = ("-m", "statistic", "--mode", "random", "--probability", "0.3")
                net.drop(slot, ("OUTPUT", "-d", gw, *rnd), ("INPUT", "-s", gw, *rnd))
            return lambda: net.heal(slot)
        if kind == "delay":
            proxies = [p for group in self.forwarders[slot].values() for p in group]
            for p in proxies:
                p.delay = 0.3

            def undelay() -> None:
                for p in proxies:
                    p.delay = 0.0
            return undelay
        if kind in ("member", "leader"):
            assert self.cluster is not None
            leader = self.cluster.leader()
            victim = leader if kind == "leader" else self.rng.choice(
                [n for n in self.cluster.names if n != leader])
            self.cluster.kill(victim)

            def revive() -> None:
                assert self.cluster is not None
                self.cluster.restart(victim)
                self.cluster.wait_healthy()
            return revive
        if kind == "failover":
            self.pair.kill_primary()
            self.pair.promote()
            return self.pair.rebuild_standby
        if kind == "clock":
            offset = self.rng.choice((f"+{CLOCK_SHIFT}s", f"-{CLOCK_SHIFT}s"))
            self.clocks[slot].write_text(offset + "\n")
            def unshift() -> None:
                self.clocks[slot].write_text("+0s\n")
            return unshift
        raise ValueError(kind)

    def close(self) -> None:
        for slot in range(HOSTS):
            self.net.heal(slot)
            for group in self.forwarders[slot].values():
                for p in group:
                    p.delay = 0.0
                    p.thaw()


def run(opts: Options, coordination: str = "etcd") -> Summary:
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(10**9)
    repro = (f"{sys.executable} -m tests.functional.hosts --faults {opts.faults} --seed {seed}"
             f" --coordination {coordination}")
    for name in ("hold", "interval"):
        if getattr(opts, name) != getattr(Options, name):
            repro += f" --{name} {' '.join(f'{v:g}' for v in getattr(opts, name))}"
    tag = f"{os.getpid() % 4096:03x}"
    net = Network(HOSTS, tag)
    pair = Pair()
    cluster = None
    base = Path(opts.root or f"/tmp/hosts-{seed}")
    try:
        net.start()
        pair.start()
        if coordination == "etcd":
            cluster = Cluster(base / "etcd").start()
            coord_url = cluster.url()
        else:
            coord_url = f"{chaos.REDIS_URL}?namespace=sm_hosts_{tag}"
        redis_port = urlsplit(chaos.REDIS_URL).port or 6379
        opts.root = base / "run"
        return exercise(
            opts, seed, repro, "hosts", pair.url(), coord_url,
            lambda d, rng, log, busy: HostFleet(d, rng, opts, log, busy, net, pair, cluster,
                                                redis_port),
            extra={"coordination": {"membership_timeout": "3"}})
    finally:
        if cluster is not None:
            cluster.stop()
        pair.stop()
        net.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.functional.hosts",
        description="Faults on three engines on hosts of their own (network namespaces), "
                    "PostgreSQL primary + synchronous standby, etcd or Redis; then every "
                    "invariant is checked. Root only.")
    p.add_argument("--faults", type=int, default=len(KINDS),
                   help=f"faults to inject, the kinds in turn ({', '.join(KINDS)})")
    p.add_argument("--seed", type=int, help="seed of every random choice (default: random)")
    p.add_argument("--coordination", choices=("etcd", "redis"), default="etcd")
    p.add_argument("--root", type=Path, help="folder for state, logs and the report")
    p.add_argument("--hold", type=float, nargs=2, metavar=("MIN", "MAX"),
                   default=Options.hold,
                   help="seconds a fault lasts, drawn between the two (default %(default)s; "
                        "keep MIN above the 3 s membership and lock TTLs)")
    p.add_argument("--interval", type=float, nargs=2, metavar=("MIN", "MAX"),
                   default=Options.interval,
                   help="seconds between two faults (default %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="narrate on stderr")
    args = p.parse_args(argv)
    if args.hold[0] <= 3 or args.hold[0] > args.hold[1] or args.interval[0] > args.interval[1] \
            or args.interval[0] < 0:
        p.error("--hold needs 3 < MIN <= MAX, --interval 0 <= MIN <= MAX")
    return report("hosts", run(Options(faults=args.faults, seed=args.seed, root=args.root,
                                       echo=args.verbose, hold=tuple(args.hold),
                                       interval=tuple(args.interval)), args.coordination))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
