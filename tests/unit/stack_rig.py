"""An in-process convergence engine for unit tests: real database, real tooz
file coordinator, real dummy driver and Operations, real Worker and Watchdog —
only the request loop is replaced by :meth:`Engine.pump`, which runs pending
check requests one at a time in the calling thread, so a test decides
exactly what runs when."""

from __future__ import annotations

import collections
import threading
import uuid
from pathlib import Path
from typing import Any, cast

from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.convergence import actions, prepare
from sharemgr.convergence.engine import StackEngine
from sharemgr.convergence.report import Pace
from sharemgr.db import api, migration, models, records, stacks
from sharemgr.db.engine import Database
from sharemgr.drivers import loader
from sharemgr.drivers.dummy_state import BackendObject, BackendState, Call
from sharemgr.manager import config
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.handlers import HANDLERS
from sharemgr.manager.operations import Operations
from sharemgr.manager.runner import request_end, unexpected

HOST = "hostA"


class Rig:
    """One database, coordination folder, backend state and gate folder;
    engines made with :meth:`engine` share them."""

    def __init__(self, root: Path, db_url: str | None = None, backends: dict | None = None,
                 coordination_url: str | None = None) -> None:
        self.root = root
        self.gates = root / "gates"
        self.gates.mkdir(parents=True, exist_ok=True)
        self.backends = backends if backends is not None else {"dummy": {}}
        self.db_url = db_url or f"sqlite:///{root}/sharemgr.sqlite"
        self.coordination_url = coordination_url or f"file://{root}/coordination?timeout=3"
        self.db = self.open_database(self.db_url)
        self.engines: list[Engine] = []

    def open_database(self, url: str) -> Database:
        """The rig's database, migrated to the head revision."""
        db = Database(url)
        migration.upgrade(db)
        return db

    def config(self, name: str, host: str, backends: dict) -> cfg.ConfigOpts:
        lines = ["[DEFAULT]", f"host = {host}", f"state_path = {self.root}/state",
                 f"enabled_share_backends = {','.join(backends)}",
                 "[database]", f"connection = {self.db_url}"]
        for backend, opts in backends.items():
            lines += [f"[{backend}]", f"dummy_state_path = {self.root}/dummy/{backend}",
                      f"dummy_gate_dir = {self.gates}", "dummy_gate_poll_interval = 0.02"]
            lines += [f"{k} = {v}" for k, v in opts.items()]
        path = self.root / f"{name}.conf"
        path.write_text("\n".join(lines) + "\n")
        return config.load([], config_file=str(path), conf=cfg.ConfigOpts())

    def engine(self, host: str = HOST, backends: dict | None = None) -> Engine:
        engine = self.new_engine(host, backends if backends is not None else self.backends)
        self.engines.append(engine)
        return engine

    def new_engine(self, host: str, backends: dict) -> Engine:
        return Engine(self, host, backends)

    def close(self) -> None:
        for engine in self.engines:
            engine.stop()
        self.db.dispose()

    # Stacks --------------------------------------------------------------------

    def create(self, name: str, text: str, disable_rollback: bool = False) -> prepare.Traversal:
        return actions.create(self.db, name, actions.load_template(text, self.backends),
                              disable_rollback)

    def update(self, name: str, text: str) -> prepare.Traversal:
        return actions.start(self.db, name, "UPDATE",
                             actions.load_template(text, self.backends))

    def start(self, name: str, action: str) -> prepare.Traversal:
        return actions.start(self.db, name, action)

    def stack(self, name: str) -> models.Stack:
        stack = stacks.stack_get_by_name(self.db, name)
        if stack is None:
            deleted = [s for s in stacks.stack_list(self.db, include_deleted=True)
                       if s.name == name]
            stack = deleted[-1]
        return stack

    def rows(self, name: str) -> dict[str, list[models.StackResource]]:
        out: dict[str, list] = {}
        for row in stacks.resource_list(self.db, self.stack(name).id):
            out.setdefault(row.name, []).append(row)
        return out

    def backend(self, backend: str = "dummy") -> BackendState:
        return BackendState(str(self.root / "dummy" / backend), backend=backend)

    def objects(self, backend: str = "dummy") -> list[BackendObject]:
        with self.backend(backend).reading() as tx:
            return tx.objects()

    def calls(self, backend: str = "dummy") -> list[Call]:
        with self.backend(backend).reading() as tx:
            return tx.calls()

    def gate(self, name: str) -> Path:
        path = self.gates / name
        path.write_text("")
        return path

    def checks(self, status: str | None = None) -> list[models.Request]:
        return [r for r in api.request_list(self.db, status=status)
                if r.action == vocab.ACTION_CHECK]


class FixedPace(Pace):
    """A batch of ``size`` nodes whatever their pace, and never due by the
    time its first waited: a run is determined by its steps alone."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def node(self, seconds: float) -> None:
        pass

    def batch(self) -> int:
        return self.size

    def waited(self, since: float) -> bool:
        return False


class Engine:
    """One engine: its own id, coordinator membership, drivers and worker."""

    heartbeat = True  # the coordinator's heartbeat thread
    arm_watchdog = True  # the watchdog is armed at once

    def __init__(self, rig: Rig, host: str, backends: dict) -> None:
        self.rig = rig
        self.host = host
        self.engine_id = f"{host}.{uuid.uuid4()}"
        self.conf = rig.config(self.engine_id, host, backends)
        self.raw_coordinator = Coordinator(rig.coordination_url, self.engine_id)
        self.raw_coordinator.start(heartbeat=self.heartbeat)
        self.raw_coordinator.join_engines()
        self.coordinator = self.wrap_coordinator(self.raw_coordinator)
        self.drivers = loader.load_drivers(self.conf, host, self.engine_id)
        self.operations = Operations(rig.db, self.drivers, self.coordinator, self.engine_id,
                                     HANDLERS)
        self.stacks = StackEngine(rig.db, self.operations, self.coordinator, self.engine_id,
                                  host, self.drivers)
        self.worker = self.stacks.worker
        self.watchdog = self.stacks.watchdog
        if self.arm_watchdog:
            self.watchdog.arm()
        self.hosts = [f"{host}@{b}" for b in self.drivers] + self.stacks.claim_hosts()

    def wrap_coordinator(self, coordinator: Coordinator) -> Any:
        """What the engine's parts use as their coordinator (here: itself)."""
        return coordinator

    def claim(self, limit: int = 1) -> list[records.Record]:
        """Claim pending check requests; a share operation's pending request
        (given back by a cut check) is left pending for the test to run."""
        claimed = api.request_claim(self.rig.db, self.hosts, self.engine_id, limit + 16)
        checks = [r for r in claimed if r.action == vocab.ACTION_CHECK][:limit]
        for r in claimed:
            if r not in checks:
                api.request_release(self.rig.db, r.id, self.engine_id, r.error or "")
        return checks

    def run(self, req: models.Request | records.Record) -> str:
        """Run one claimed request as the daemon's runner would; returns the
        request's final status."""
        try:
            # A claimed record reads as the row (the daemon's runner hands
            # the worker the same).
            outcome = self.worker(cast(models.Request, req))
        except Exception as exc:  # ended as the daemon's request loop ends it
            outcome = unexpected(exc, req.id, vocab.ACTION_CHECK)
        status, error, _message = request_end(outcome, req.id, vocab.ACTION_CHECK)
        if status == vocab.REQUEST_PENDING:
            api.request_release(self.rig.db, req.id, self.engine_id, error or "")
        else:
            api.request_finish(self.rig.db, req.id, self.engine_id, status, error)
        return status

    def step(self, count: int = 1) -> int:
        """Run up to ``count`` pending check requests; returns how many ran."""
        for ran in range(count):
            claimed = self.claim()
            if not claimed:
                return ran
            self.run(claimed[0])
        return count

    def pump(self, limit: int = 500) -> int:
        """Run pending check requests until there are none; returns how many."""
        ran = self.step(limit)
        if ran == limit:
            raise AssertionError(f"still pending after {limit} checks")
        return ran

    def run_in_thread(self) -> tuple[threading.Thread, list]:
        """Claim one request and run it in a thread (it may wait at a gate)."""
        claimed = self.claim()
        assert claimed, "nothing to claim"
        out: list = []
        thread = threading.Thread(target=lambda: out.append(self.run(claimed[0])))
        thread.start()
        return thread, claimed

    def die(self) -> None:
        """Leave the engines group: to the others this engine is dead."""
        self.coordinator.stop()

    def stop(self) -> None:
        self.coordinator.stop()


# What the stack worker tests (tests/unit/convergence/test_worker*.py) ask of
# a Rig: a template and the state they check.

V1 = """
resources:
  data: {type: share, properties: {size: 1, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
outputs:
  path: {get_attr: [data, export_locations, 0, path]}
"""


def _add(template, line):
    """The template with one more resource (a line of YAML)."""
    return template.replace("outputs:", f"  {line}\noutputs:")


def _status(rig, name):
    s = rig.stack(name)
    return s.action, s.status


def _creates(rig):
    """(method, name) of every backend change of a create or delete."""
    by_id = {o["id"]: o["name"] for o in rig.objects()}
    return [(c["method"], by_id.get(c["resource_id"])) for c in rig.calls()
            if c["method"].startswith(("create_", "delete_"))]


def _one_each(rig, kinds=("share", "snapshot")):
    """Exactly one backend object per live stack resource, and nothing else."""
    objects = rig.objects()
    names = collections.Counter(o["name"].rsplit("-", 1)[0] for o in objects)
    assert all(n == 1 for n in names.values()), names
    return sorted(names)
