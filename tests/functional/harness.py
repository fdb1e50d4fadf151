"""Real processes for functional tests: a deployment is a config file, a
database, a coordination backend and any number of share-manager engines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TypeAlias

from tests.functional import forks

# What sharectl's ``-f json`` and the dummy's CLI print, as json.loads gives it:
# any JSON value (a test knows which shape it asked for).
Loaded: TypeAlias = Any

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else shutil.which(name) or name


class Engine:
    def __init__(self, proc: subprocess.Popen | forks.Forked, log: Path) -> None:
        self.proc = proc
        self.log = log

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for_log(self, needle: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"share-manager exited {self.proc.returncode} before {needle!r}:\n"
                    + self.text()[-3000:]
                )
            time.sleep(0.1)
        # Where it is stuck: SIGUSR2 logs every thread's stack (daemon/signals.py).
        self.proc.send_signal(signal.SIGUSR2)
        time.sleep(2)
        raise AssertionError(f"no {needle!r} in the log after {timeout}s:\n{self.text()[-12000:]}")

    def terminate(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


class Deployment:
    """One config file with its state folder; runs sharectl and engines."""

    def __init__(
        self,
        root: Path,
        db_url: str | None = None,
        coordination_url: str | None = None,
        host: str = "hostA",
        backends: dict[str, dict] | None = None,
        extra: dict[str, dict] | None = None,
    ) -> None:
        self.root = root
        self.state = root / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.engines: list[Engine] = []
        self.host = host
        self.backends = backends if backends is not None else {"dummy": {}}
        self.sections: dict[str, dict] = {
            "DEFAULT": {
                "host": host,
                "state_path": str(self.state),
                "enabled_share_backends": ",".join(self.backends),
                "request_poll_interval": "0.1",
                # MariaDB has no wake-ups (db/notify.py): keep its idle poll short.
                "request_poll_max_interval": "0.5",
                "heartbeat_interval": "0.5",
            },
            # Short liveness so a crashed engine is known dead before the
            # startup pass of its successor (wait >= membership_timeout).
            "coordination": {"membership_timeout": "2"},
            "database": {},
        }
        if db_url:
            self.sections["database"]["connection"] = db_url
        if coordination_url:
            self.sections["coordination"]["backend_url"] = coordination_url
        for name, opts in self.backends.items():
            self.sections.setdefault(name, {}).update(
                {"dummy_state_path": str(self.state / "dummy" / name), **opts}
            )
        for section, opts in (extra or {}).items():
            self.sections.setdefault(section, {}).update(opts)
        self.config = root / "sharemgr.conf"
        self.write_config()

    def write_config(self, path: Path | None = None, **overrides: dict) -> Path:
        sections = {k: dict(v) for k, v in self.sections.items()}
        for section, opts in overrides.items():
            sections.setdefault(section, {}).update(opts)
        lines = []
        for section, opts in sections.items():
            lines.append(f"[{section}]")
            lines += [f"{k} = {v}" for k, v in opts.items()]
            lines.append("")
        path = path or self.config
        path.write_text("\n".join(lines))
        return path

    def sharectl(self, *args: str, check: bool = True, timeout: float = 120,
                 config: Path | None = None) -> subprocess.CompletedProcess:
        out = forks.run(tool("sharectl"),
                        ["--config-file", str(config or self.config), *args], timeout)
        if check and out.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
            )
        return out

    def json(self, *args: str, **kw) -> Loaded:
        return json.loads(self.sharectl(*args, "-f", "json", **kw).stdout)

    def sync(self) -> None:
        self.sharectl("db", "sync")

    def start(self, wait: bool = True, config: Path | None = None, name: str | None = None,
              env: dict | None = None, preexec_fn=None, wrap: tuple[str, ...] = ()) -> Engine:
        """``wrap``: the command the engine runs under (``ip netns exec NS``:
        it execs, so the engine keeps the pid signals go to)."""
        n = len(self.engines)
        log = self.root / f"{name or 'engine'}-{n}.log"
        argv = ["--config-file", str(config or self.config)]
        proc: subprocess.Popen | forks.Forked | None = None
        with open(log, "wb") as out:
            if not (wrap or env or preexec_fn):
                proc = forks.engine(tool("share-manager"), argv, out.fileno())
            if proc is None:
                proc = subprocess.Popen(
                    [*wrap, tool("share-manager"), *argv], stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        engine = Engine(proc, log)
        self.engines.append(engine)
        if wait:
            engine.wait_for_log("share-manager up")
        return engine

    def run_manager(self, config: Path | None = None, timeout: float = 60,
                    env: dict | None = None) -> subprocess.CompletedProcess:
        """share-manager in the foreground, for start-up failures."""
        return subprocess.run(
            [tool("share-manager"), "--config-file", str(config or self.config)],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {})},
        )

    def backend(self, *args: str, backend: str = "dummy") -> Loaded:
        out = subprocess.run(
            [tool("sharemgr-dummy-backend"), "--state-path",
             self.sections[backend]["dummy_state_path"], *args],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout) if out.stdout.strip() else None

    def stop_all(self) -> None:
        # Open the dummy's gates: a call a test left waiting would otherwise
        # hold its engine's stop for the whole graceful shutdown timeout.
        for section in self.sections.values():
            gates = section.get("dummy_gate_dir")
            if gates and Path(gates).is_dir():
                for gate in Path(gates).iterdir():
                    gate.unlink(missing_ok=True)
        for engine in self.engines:  # signal all first: they stop in parallel
            if engine.proc.poll() is None:
                engine.proc.send_signal(signal.SIGTERM)
        for engine in self.engines:
            try:
                engine.terminate(timeout=30)
            except subprocess.TimeoutExpired:
                # Its threads' stacks go to its log first: a stop that hangs
                # is a fault to find, not only to end.
                engine.proc.send_signal(signal.SIGUSR2)
                time.sleep(1)
                engine.kill()
                warnings.warn(f"share-manager did not stop within 30 s of SIGTERM; "
                              f"its threads' stacks are at the end of {engine.log}",
                              stacklevel=1)


def wait_until(predicate, timeout: float = 30, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def database(d: Deployment):
    """The deployment's database, for checks a user would make with SQL."""
    from oslo_config import cfg
    from sharemgr.db.engine import Database
    from sharemgr.manager import config

    conf = config.load([], config_file=str(d.config), conf=cfg.ConfigOpts())
    return Database(config.database_url(conf), pool_size=2), conf


def intake(d: Deployment):
    """The request intake sharectl uses, for writing many requests quickly."""
    from sharemgr.manager.intake import Intake

    db, conf = database(d)
    return Intake(db, conf)


def db_objects(d: Deployment, settled_only: bool = False) -> dict[str, set[tuple[str, str]]]:
    """Live physical objects per backend, as the database sees them:
    {backend: {(kind, id)}} with the dummy backend's kind names. With
    ``settled_only``, rows in an error status (which may have no backend
    object: a create that never reached the backend) are left out."""
    from sharemgr.common import vocab
    from sharemgr.db import api, models, resources
    from sharemgr.manager import hosts

    db, _ = database(d)
    out: dict[str, set[tuple[str, str]]] = {b: set() for b in d.backends}

    def keep(row) -> bool:
        return not (settled_only and row.status in vocab.ERROR_STATUSES)

    try:
        for inst in filter(keep, api.query(db, models.ShareInstance)):
            kind = "replica" if inst.replica_state not in (None, "active") else "share"
            out[hosts.backend_of(inst.host)].add((kind, inst.id))
        for backend in d.backends:
            host = f"{d.host}@{backend}"
            for snap, _inst in resources.snapshot_instances_on_host(db, host):
                if keep(snap):
                    out[backend].add(("snapshot", snap.id))
            for gsnap, _g in resources.group_snapshots_on_host(db, host):
                if keep(gsnap):
                    out[backend].add(("group_snapshot", gsnap.id))
        for server in filter(keep, api.query(db, models.ShareServer)):
            out[hosts.backend_of(server.host)].add(("share_server", server.id))
        for group in filter(keep, api.query(db, models.ShareGroup)):
            out[hosts.backend_of(group.host)].add(("share_group", group.id))
        for backup in filter(keep, api.query(db, models.ShareBackup)):
            out[hosts.backend_of(backup.host)].add(("backup", backup.id))
    finally:
        db.dispose()
    return out


def backend_objects(d: Deployment) -> dict[str, set[tuple[str, str]]]:
    return {b: {(o["kind"], o["id"]) for o in d.backend("list", backend=b)}
            for b in d.backends}


def assert_backend_agrees(d: Deployment) -> None:
    """Every settled object of the database is on the backend, and every
    backend object is in the database (error rows may lack a backend object)."""
    everything, settled = db_objects(d), db_objects(d, settled_only=True)
    backend_side = backend_objects(d)
    for backend in d.backends:
        only_db = settled[backend] - backend_side[backend]
        only_backend = backend_side[backend] - everything[backend]
        assert not only_db and not only_backend, (
            f"backend {backend}: in the database only: {sorted(only_db)}; "
            f"on the backend only: {sorted(only_backend)}"
        )


# The two setups most functional tests run on: the embedded default (SQLite +
# file locks) and the many-machine one (PostgreSQL + Redis).
SETUPS = ("embedded", "postgresql+redis")


def servers(request) -> dict:
    """``Deployment`` keywords for the setup a test is parametrized with
    (``request.param`` one of SETUPS); the servers' fixtures give the URLs."""
    if request.param == "embedded":
        return {}
    coordination = "etcd_url" if request.param.endswith("+etcd") else "redis_url"
    return {"db_url": request.getfixturevalue("pg_url"),
            "coordination_url": request.getfixturevalue(coordination)}
