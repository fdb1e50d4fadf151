"""An etcd cluster of the test's own on loopback: N members and, in front of
them, an ``etcd gateway`` (tooz's etcd driver takes one endpoint; the
gateway forwards to whichever member answers). Debian's etcd-server
(``make test`` installs it as root); a test skips without it, or fails
under CI=true. Every process is stopped by ``stop``, killed or not."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sharemgr.manager.config import etcd_call_timeout

from tests.conftest import IN_CI
from tests.functional.local_harness import free_port


def require_etcd() -> None:
    missing = [p for p in ("etcd", "etcdctl") if shutil.which(p) is None]
    if not missing:
        return
    msg = f"etcd tests need {', '.join(missing)} (Debian packages etcd-server etcd-client)"
    if IN_CI:
        pytest.fail(msg + " (CI=true: they are required)")
    pytest.skip(msg)


class Cluster:
    def __init__(self, root: Path, members: int = 3) -> None:
        require_etcd()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.names = [f"m{i}" for i in range(members)]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.gateway_port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.token = f"sm-{os.getpid()}-{self.gateway_port}"

    def _member(self, name: str, state: str = "new") -> subprocess.Popen:
        cluster = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (the process keeps it)
        return subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", str(self.root / name),
             "--listen-client-urls", f"http://127.0.0.1:{self.client[name]}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.client[name]}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer[name]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[name]}",
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", self.token,
             # Elections quick enough for a test's leader kill.
             "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> Cluster:
        for name in self.names:
            self.procs[name] = self._member(name)
        endpoints = ",".join(f"127.0.0.1:{self.client[n]}" for n in self.names)
        log = open(self.root / "gateway.log", "ab")  # noqa: SIM115
        self.procs["gateway"] = subprocess.Popen(
            ["etcd", "gateway", "start", f"--endpoints={endpoints}",
             f"--listen-addr=127.0.0.1:{self.gateway_port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_healthy()
        return self

    def url(self, timeout: int | None = None, membership: int = 3, lock: int = 3) -> str:
        """tooz's URL through the gateway (its options are whole seconds);
        each call's ``timeout`` by default the one sharemgr adds."""
        if timeout is None:
            timeout = etcd_call_timeout(membership)
        return (f"etcd3+http://127.0.0.1:{self.gateway_port}?timeout={timeout}"
                f"&membership_timeout={membership}&lock_timeout={lock}")

    def etcdctl(self, *args: str, endpoints: list[str] | None = None) -> str:
        eps = endpoints or [f"127.0.0.1:{self.client[n]}" for n in self.names
                            if self.alive(n)]
        out = subprocess.run(["etcdctl", f"--endpoints={','.join(eps)}", *args],
                             capture_output=True, text=True, timeout=30,
                             env={**os.environ, "ETCDCTL_API": "3"})
        if out.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def leader(self) -> str:
        """The name of the member that leads now."""
        for entry in json.loads(self.etcdctl("endpoint", "status", "-w", "json")):
            status = entry["Status"]
            if status["leader"] == status["header"]["member_id"]:
                port = int(entry["Endpoint"].rsplit(":", 1)[1])
                return next(n for n, p in self.client.items() if p == port)
        raise RuntimeError("no leader")

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.leader()
                self.etcdctl("put", "sharemgr-probe", "1",
                             endpoints=[f"127.0.0.1:{self.gateway_port}"])
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)

    def restart(self, name: str) -> None:
        """A killed member back with its data (it rejoins the cluster)."""
        self.procs[name] = self._member(name, state="existing")

    def leases(self) -> int:
        """How many leases etcd holds now."""
        out = self.etcdctl("lease", "list")
        return sum(1 for line in out.splitlines()[1:] if line.strip())

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
