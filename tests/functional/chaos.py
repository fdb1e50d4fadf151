"""Crash chaos for share operations and stacks (issue 11, "Stacks that never hang").

Real ``share-manager`` engines are SIGKILLed (sometimes SIGTERMed) at random
moments, and made to crash inside driver calls with the dummy driver's crash
points, while threads fire random share operations and stack
create/update/delete/rollback through the real ``sharectl``. Then the killing
stops, the engines come back without knobs, everything is given a bounded
time to settle, and every invariant is checked at once (``doc/chaos.rst``):

* no resource in a transient status (creating, deleting, extending, ...);
* no stack IN_PROGRESS; a FAILED stack says why; each stack ends in a state
  its last accepted action allows;
* each COMPLETE stack has exactly one row per resource of its template, each
  with a live, available physical resource matching the template;
* every stack-made object belongs to a row of its stack (no orphaned
  replacement), and a deleted stack leaves nothing behind;
* the dummy backend and the database agree (no orphaned backend object, no
  settled row pointing at nothing);
* no backend create is done twice for one resource, and no delete is done
  again unless the engine of the earlier call died, or a new request asked.

One module for pytest (:func:`run`, see ``test_chaos.py``) and for people::

    python -m tests.functional.chaos --kills 1000 --seed 42 --setup sqlite
    python -m tests.functional.chaos --kills 300 --setup servers

It prints a JSON summary (seed, kills, operations, stacks, time, violations)
and exits 1 when an invariant is violated. Everything is drawn from
``random.Random`` streams derived from the seed: the same seed gives the same
operations, templates, knobs and kill schedule (the interleaving with the
engines still depends on timing).
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import datetime
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.drivers.dummy_state import DB_NAME
from sqlalchemy.orm import Session

from tests.functional.harness import Deployment, Engine, backend_objects, db_objects

SETUPS = ("sqlite", "servers")
PG_ADMIN = os.environ.get("SHAREMGR_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHAREMGR_TEST_REDIS", "redis://127.0.0.1:6379")

# Short liveness and waits so that a run is fast: a dead engine is known dead
# after 2 s (membership_timeout, the minimum; on Redis also its locks' expiry),
# which the startup pass waits for.
ENGINE_OPTIONS = {
    "DEFAULT": {
        "startup_reconciliation_wait_seconds": "2",
        "peer_reconciliation_grace_seconds": "1",
        "graceful_shutdown_timeout": "5",
        "request_workers": "4",
        "reconciliation_workers": "4",
    },
    "coordination": {"membership_timeout": "2"},
}

CREATE_METHODS = frozenset({
    "create_share", "create_share_from_snapshot", "create_snapshot", "create_replica",
    "create_share_group", "create_share_group_snapshot", "setup_server", "create_backup",
})
DELETE_METHODS = frozenset({
    "delete_share", "delete_snapshot", "delete_replica", "delete_share_group",
    "delete_share_group_snapshot", "teardown_server", "delete_backup",
})
# Where the dummy driver may be told to crash (dummy_crash_before/after).
# (Weighted by repetition toward the methods a run calls most; the status
# methods run in reconciliation passes, after a crash.)
CRASH_METHODS = (
    "create_share", "create_share", "create_share", "create_share_from_snapshot",
    "delete_share", "delete_share", "delete_share", "extend_share", "shrink_share",
    "create_snapshot", "create_snapshot", "delete_snapshot", "delete_snapshot",
    "create_replica", "delete_replica", "get_share_status", "get_share_status",
    "get_snapshot_status", "get_replica_status",
)
DELAY_METHODS = (
    "create_share", "create_share_from_snapshot", "delete_share", "extend_share",
    "shrink_share", "create_snapshot", "delete_snapshot", "create_replica", "delete_replica",
    "get_share_status",
)
# Calls that change nothing on the backend (the status reads, the listing).
READ_METHODS = frozenset({
    "get_share_status", "get_snapshot_status", "get_replica_status", "get_share_group_status",
    "get_share_group_snapshot_status", "get_share_statuses", "get_snapshot_statuses",
    "get_replica_statuses", "get_share_group_statuses", "get_share_group_snapshot_statuses",
    "list_shares", "ensure_shares", "get_backend_info", "check_for_setup_error", "do_setup",
})
FAIL_METHODS = ("extend_share", "create_snapshot.s", "create_replica.m", "delete_snapshot.m",
                "create_share_from_snapshot.s")

MANUAL_SHARE = re.compile(r"^m\d+$")
STACK_NAME = re.compile(r"^s\d+$")
STACK_MADE = re.compile(r"^(s\d+)-([a-z]+\d*)-")
ENGINE_ID = re.compile(r"share-manager starting: engine (\S+?),")
ERROR_STATUSES = vocab.ERROR_STATUSES


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def parse_time(text: str) -> datetime.datetime:
    stamp = datetime.datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)


# ---------------------------------------------------------------------------
# Options and results


@dataclasses.dataclass
class Options:
    kills: int = 30  # SIGKILLs plus crash-point exits before the killing stops
    seed: int | None = None
    setup: str = "sqlite"  # sqlite: one engine, file locks; servers: PG + Redis, two engines
    root: Path | None = None  # state, logs, report; a temporary folder when None
    db_url: str | None = None  # servers: an empty database (made and dropped when None)
    redis_url: str | None = None
    workers: int = 3  # threads firing sharectl (each call takes ~1 s to start)
    kill_interval: tuple[float, float] = (1.0, 4.0)  # seconds between two kills
    restart_delay: tuple[float, float] = (0.0, 1.5)  # a dead engine is restarted after
    settle_timeout: float = 90.0
    max_stacks: int = 6
    max_manual_shares: int = 10
    max_duration: float | None = None  # safety cap of the chaos phase (default from kills)
    keep: bool = True  # keep ``root`` (False: removed after a run without violations)
    teardown: bool = True  # at the end, delete every stack and check nothing is left
    echo: bool = False  # narrate on stderr


@dataclasses.dataclass
class Result:
    seed: int
    setup: str
    engines: int
    kills: dict[str, int]
    operations: dict[str, Any]
    stacks: dict[str, Any]
    time: dict[str, float]
    violations: list[str]
    notes: list[str]
    root: str
    reproduce: str

    def summary(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def report(self) -> str:
        lines = [f"chaos seed {self.seed}, setup {self.setup} ({self.engines} engine(s)): "
                 f"{len(self.violations)} violation(s)",
                 f"reproduce: {self.reproduce}",
                 f"state, logs and chaos-report.json: {self.root}"]
        lines += [f"  - {v}" for v in self.violations]
        if self.notes:
            lines.append("notes:")
            lines += [f"  * {n}" for n in self.notes]
        return "\n".join(lines)


def reproduce_command(opts: Options, seed: int) -> str:
    cmd = (f"{sys.executable} -m tests.functional.chaos --kills {opts.kills} --seed {seed} "
           f"--setup {opts.setup}")
    default = Options()
    if tuple(opts.kill_interval) != default.kill_interval:
        cmd += f" --kill-interval {opts.kill_interval[0]:g} {opts.kill_interval[1]:g}"
    if opts.workers != default.workers:
        cmd += f" --workers {opts.workers}"
    return cmd


# ---------------------------------------------------------------------------
# Templates: random small stacks and random changes to them


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "get_resource" in value:
            return [value["get_resource"]]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def template_refs(res: dict) -> set[str]:
    """Names a resource definition refers to (properties and depends_on)."""
    return set(_refs(res.get("properties", {}))) | set(res.get("depends_on", []))


def _fresh_name(rng: random.Random, resources: dict, prefix: str) -> str:
    while True:
        name = f"{prefix}{rng.randint(1, 99)}"
        if name not in resources:
            return name


def _word(rng: random.Random) -> str:
    return rng.choice(("alpha", "beta", "gamma", "delta", "omega", "main", "blue", "red"))


def add_resource(rng: random.Random, resources: dict) -> None:
    shares = [n for n, r in resources.items() if r["type"] == "share"]
    snaps = [n for n, r in resources.items() if r["type"] == "snapshot"]
    kinds = [("share", 4.0)]
    if shares:
        kinds += [("snapshot", 3.0), ("replica", 1.5)]
    if snaps:
        kinds.append(("copy", 2.0))
    kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
    if kind == "share":
        name = _fresh_name(rng, resources, "data")
        props: dict[str, Any] = {"size": rng.randint(1, 3), "proto": rng.choice(("NFS", "CIFS"))}
        if rng.random() < 0.3:
            props["backend"] = "dummy"
        res: dict[str, Any] = {"type": "share", "properties": props}
        if resources and rng.random() < 0.3:
            res["depends_on"] = [rng.choice(sorted(resources))]
    elif kind == "copy":
        # A share made from a snapshot: 4 GiB, never smaller than the snapshot
        # (originals stay within 1-3 GiB, a copy's snapshot is at most 4).
        name = _fresh_name(rng, resources, "copy")
        props = {"size": 4, "proto": rng.choice(("NFS", "CIFS")),
                 "snapshot": {"get_resource": rng.choice(snaps)}}
        res = {"type": "share", "properties": props}
    elif kind == "snapshot":
        name = _fresh_name(rng, resources, "snap")
        res = {"type": "snapshot", "properties": {"share": {"get_resource": rng.choice(shares)}}}
    else:
        name = _fresh_name(rng, resources, "rep")
        res = {"type": "replica", "properties": {"share": {"get_resource": rng.choice(shares)}}}
    if res["type"] in ("share", "snapshot") and rng.random() < 0.25:
        res["properties"]["name"] = _word(rng)
    resources[name] = res


def random_template(rng: random.Random) -> dict:
    resources: dict[str, Any] = {}
    for _ in range(rng.randint(1, 5)):
        add_resource(rng, resources)
    return {"resources": resources}


def mutate_template(rng: random.Random, template: dict) -> dict:
    """One or two changes: resize or rename (in place), change protocol
    (replace), add or remove a resource."""
    t = copy.deepcopy(template)
    res = t["resources"]
    for _ in range(rng.choice((1, 1, 2))):
        originals = [n for n, r in res.items()
                     if r["type"] == "share" and "snapshot" not in r["properties"]]
        shares = [n for n, r in res.items() if r["type"] == "share"]
        named = [n for n, r in res.items() if r["type"] in ("share", "snapshot")]
        referenced = {ref for r in res.values() for ref in template_refs(r)}
        leaves = [n for n in res if n not in referenced]
        choices = []
        if originals:
            choices.append(("resize", 4))
        if named:
            choices.append(("rename", 2))
        if shares:
            choices.append(("proto", 2))
        if len(res) < 5:
            choices.append(("add", 2))
        if len(res) > 1 and leaves:
            choices.append(("remove", 2))
        what = rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        if what == "resize":
            props = res[rng.choice(originals)]["properties"]
            props["size"] = rng.choice([s for s in (1, 2, 3) if s != props["size"]])
        elif what == "rename":
            props = res[rng.choice(named)]["properties"]
            props["name"] = rng.choice([w for w in ("alpha", "beta", "gamma", "delta", "omega")
                                        if w != props.get("name")])
        elif what == "proto":
            props = res[rng.choice(shares)]["properties"]
            props["proto"] = "CIFS" if props["proto"] == "NFS" else "NFS"
        elif what == "add":
            add_resource(rng, res)
        else:
            del res[rng.choice(leaves)]
    return t


# ---------------------------------------------------------------------------
# The database, read directly (plain SELECTs: no write lock on SQLite)


def _row(obj: Any, *cols: str) -> dict[str, Any]:
    return {c: getattr(obj, c) for c in cols}


class Reader:
    def __init__(self, url: str) -> None:
        if url.startswith("sqlite"):
            self.engine = sa.create_engine(url, connect_args={"timeout": 60})
        else:
            self.engine = sa.create_engine(url, pool_size=2, max_overflow=2, pool_pre_ping=True)

    def dispose(self) -> None:
        self.engine.dispose()

    def world(self) -> dict[str, Any]:
        with Session(self.engine) as s:
            def live(model: type) -> list:
                return list(s.scalars(sa.select(model).where(model.deleted_at.is_(None))))

            instances = [_row(i, "id", "share_id", "host", "status", "replica_state",
                              "share_server_id", "created_at") for i in live(models.ShareInstance)]
            shares = {}
            primaries: dict[str, dict] = {}
            for inst in sorted(instances, key=lambda i: (i["created_at"], i["id"])):
                if inst["replica_state"] in (None, vocab.REPLICA_ACTIVE):
                    primaries.setdefault(inst["share_id"], inst)
            for sh in live(models.Share):
                inst = primaries.get(sh.id)
                shares[sh.id] = {**_row(sh, "id", "name", "size", "share_proto", "snapshot_id",
                                        "share_group_id"),
                                 "status": inst["status"] if inst else None,
                                 "instance_id": inst["id"] if inst else None}
            snap_insts = {i.snapshot_id: _row(i, "id", "snapshot_id", "share_instance_id",
                                              "status")
                          for i in live(models.ShareSnapshotInstance)}
            snapshots = {}
            for sn in live(models.ShareSnapshot):
                inst = snap_insts.get(sn.id)
                snapshots[sn.id] = {**_row(sn, "id", "share_id", "name", "size"),
                                    "status": inst["status"] if inst else None,
                                    "instance_id": inst["id"] if inst else None}
            world = {
                "instances": instances,
                "shares": shares,
                "snapshots": snapshots,
                "snapshot_instances": list(snap_insts.values()),
                "groups": [
                    _row(g, "id", "name", "host", "status") for g in live(models.ShareGroup)
                ],
                "group_snapshots": [
                    _row(g, "id", "name", "share_group_id", "status")
                    for g in live(models.ShareGroupSnapshot)
                ],
                "backups": [
                    _row(b, "id", "name", "share_id", "status", "progress")
                    for b in live(models.ShareBackup)
                ],
                "servers": [_row(v, "id", "host", "status") for v in live(models.ShareServer)],
                "stacks": [
                    _row(
                        st,
                        "id",
                        "name",
                        "action",
                        "status",
                        "status_reason",
                        "template_id",
                        "prev_template_id",
                        "current_traversal",
                        "disable_rollback",
                        "deleted_at",
                        "created_at",
                    )
                    for st in s.scalars(sa.select(models.Stack).order_by(models.Stack.created_at))
                ],
                "rows": [
                    _row(
                        r,
                        "id",
                        "stack_id",
                        "name",
                        "type",
                        "template_id",
                        "physical_id",
                        "action",
                        "status",
                        "status_reason",
                        "engine_id",
                        "replaces",
                        "replaced_by",
                        "properties",
                        "current_traversal",
                    )
                    for r in live(models.StackResource)
                ],
                "requests": dict(
                    s.execute(
                        sa.select(models.Request.status, sa.func.count()).group_by(
                            models.Request.status
                        )
                    ).all()
                ),
            }
        return world

    def template(self, template_id: int | None) -> dict | None:
        if template_id is None:
            return None
        with Session(self.engine) as s:
            row = s.get(models.StackTemplate, template_id)
            return dict(row.template) if row is not None else None

    def requests(self, **filters: Any) -> list[dict[str, Any]]:
        stmt = sa.select(models.Request).order_by(models.Request.id)
        for key, value in filters.items():
            column = getattr(models.Request, key)
            stmt = stmt.where(column.in_(value) if isinstance(value, list | tuple | set)
                              else column == value)
        with Session(self.engine) as s:
            return [_row(r, "id", "created_at", "resource_type", "resource_id", "action",
                         "args", "host", "status", "engine_id", "claimed_at", "finished_at",
                         "error") for r in s.scalars(stmt)]

    def backup_shares(self) -> dict[str, str]:
        """Every backup's share, deleted backups too."""
        with Session(self.engine) as s:
            return dict(s.execute(sa.select(models.ShareBackup.id,
                                            models.ShareBackup.share_id)).all())

    def sync_points(self, stack_id: str) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            return [_row(p, "entity_id", "traversal_id", "is_update", "atomic_key",
                         "input_data") for p in s.scalars(
                sa.select(models.SyncPoint).where(models.SyncPoint.stack_id == stack_id))]


def transient_resources(world: dict) -> list[tuple[str, dict]]:
    out = []
    for kind, rows in (("share instance", world["instances"]),
                       ("snapshot instance", world["snapshot_instances"]),
                       ("share group", world["groups"]),
                       ("group snapshot", world["group_snapshots"]),
                       ("backup", world["backups"]),
                       ("share server", world["servers"])):
        out += [(kind, r) for r in rows if r["status"] in vocab.TRANSIENT_STATUSES]
    return out


def backend_now(d: Deployment) -> dict[str, dict[str, Any]]:
    """The dummy backend's objects by id, read straight from its state file
    (cheap enough to do every few seconds)."""
    path = Path(d.sections["dummy"]["dummy_state_path"]) / DB_NAME
    conn = sqlite3.connect(path, timeout=30)
    try:
        rows = conn.execute("SELECT id, kind, name, status FROM objects").fetchall()
    finally:
        conn.close()
    return {r[0]: {"id": r[0], "kind": r[1], "name": r[2], "status": r[3]} for r in rows}


def made_but_error(world: dict, backend: dict[str, dict], reader: Reader
                   ) -> list[tuple[str, str]]:
    """Resources being created that the database (read first) says are
    ``error`` while the backend (read after) holds them. With the dummy
    driver a create that fails changes nothing, and reconciliation marks a
    ``creating`` resource error only when the backend does not have it; so
    this is a create settled while its driver call was still running (a live
    engine's operation taken for a dead one's). Only resources whose latest
    request is their create count: reconciliation marks some statuses error
    without asking the backend (a share in ``backup_creating``, by the spec's
    table), and a healthy share may well be behind those. A backup's
    requests are the backup's, not its share's: they count as the share's
    here."""
    out = []
    for inst in world["instances"]:
        if inst["status"] == vocab.ERROR and backend.get(inst["id"],
                                                         {}).get("status") == "available":
            share = world["shares"].get(inst["share_id"]) or {}
            kind = "replica" if inst["replica_state"] not in (None,
                                                              vocab.REPLICA_ACTIVE) else "share"
            out.append((inst["id"], f"{kind} instance {inst['id']} ({share.get('name')})"))
    for snap in world["snapshots"].values():
        iid = snap["instance_id"]
        if snap["status"] == vocab.ERROR and backend.get(iid, {}).get("status") == "available":
            out.append((iid, f"snapshot instance {iid} ({snap['name']})"))
    if not out:
        return out
    share_of = {inst["id"]: inst["share_id"] for inst in world["instances"]}
    owner = {ident: ident for ident, _ in out}  # request's resource id -> flagged id
    for backup_id, share_id in reader.backup_shares().items():
        for ident, _ in out:
            if share_id == share_of.get(ident):
                owner[backup_id] = ident
    latest: dict[str, tuple[str, str]] = {}  # flagged id -> (resource id, action)
    for req in reader.requests(resource_id=list(owner)):  # in id order: the last wins
        latest[owner[req["resource_id"]]] = (req["resource_id"], req["action"])
    return [(ident, what) for ident, what in out if latest.get(ident) == (ident, "create")]


# ---------------------------------------------------------------------------
# Engines: start, kill, watch, restart


@dataclasses.dataclass
class EngineRecord:
    slot: int
    engine: Engine
    knobs: dict[str, str]
    config: str
    started: datetime.datetime
    signal_sent: str | None = None  # "kill" or "term"
    signalled_at: datetime.datetime | None = None
    ended: datetime.datetime | None = None
    how: str | None = None  # sigkill, sigterm, crash-point, exit N
    returncode: int | None = None
    spared: int = 0  # kills it was spared so that its crash point may fire
    _engine_id: str | None = None

    @property
    def died_at(self) -> datetime.datetime | None:
        """When it died: the SIGKILL, else when it was seen gone (a crash
        point: its last driver call)."""
        if self.how == "sigkill" and self.signalled_at is not None:
            return self.signalled_at
        return self.ended

    @property
    def armed(self) -> bool:
        return any(k.startswith("dummy_crash_") for k in self.knobs)

    @property
    def engine_id(self) -> str | None:
        if self._engine_id is None:
            found = ENGINE_ID.search(self.engine.text())
            self._engine_id = found.group(1) if found else None
        return self._engine_id

    @property
    def alive(self) -> bool:
        return self.ended is None and self.engine.proc.poll() is None

    def describe(self) -> dict[str, Any]:
        return {"slot": self.slot, "engine_id": self.engine_id, "log": str(self.engine.log),
                "knobs": self.knobs, "started": self.started.isoformat(),
                "ended": self.ended.isoformat() if self.ended else None, "how": self.how,
                "returncode": self.returncode}


def random_knobs(rng: random.Random) -> dict[str, str]:
    knobs: dict[str, str] = {}
    if rng.random() < 0.45:
        when = rng.choice(("before", "after"))
        # '.s': only resources of stacks (named s<N>-...), '.m': only the others.
        method = rng.choice(CRASH_METHODS) + rng.choice(("", "", "", ".s", ".s", ".m"))
        knobs[f"dummy_crash_{when}"] = method
    if rng.random() < 0.75:
        methods = rng.sample(DELAY_METHODS, rng.randint(1, 4))
        knobs["dummy_method_delays"] = ",".join(
            f"{m}:{rng.choice((0.3, 0.6, 1.0, 2.0))}" for m in methods)
    if rng.random() < 0.08:
        knobs["dummy_fail_methods"] = rng.choice(FAIL_METHODS)
    return knobs


class Fleet:
    """The engine slots (one per engine that should run) and the killer."""

    def __init__(self, d: Deployment, slots: int, rng: random.Random, opts: Options,
                 log: Any, busy: Any = None) -> None:
        self.d = d
        self.busy = busy or (lambda: True)  # is a traversal or an operation under way?
        self.rng = rng
        self.opts = opts
        self.log = log
        self.current: list[EngineRecord | None] = [None] * slots
        self.restart_at: list[float] = [0.0] * slots
        self.records: list[EngineRecord] = []
        self.counts: collections.Counter = collections.Counter()
        self.unexpected: list[str] = []
        self.generation = 0
        self.lock = threading.Lock()

    # -- one slot

    def start(self, slot: int, knobs: dict[str, str]) -> EngineRecord:
        self.generation += 1
        path = self.d.root / f"engine-{slot}-{self.generation}.conf"
        self.d.write_config(path, dummy=knobs)
        engine = self.d.start(wait=False, config=path, name=f"slot{slot}-gen{self.generation}")
        rec = EngineRecord(slot, engine, knobs, str(path), utcnow())
        with self.lock:
            self.records.append(rec)
            self.current[slot] = rec
        self.counts["starts"] += 1
        self.log(f"start slot {slot} ({engine.log.name}) knobs {knobs or 'none'}")
        return rec

    def signal(self, rec: EngineRecord, how: str) -> None:
        if rec.signal_sent is not None or rec.engine.proc.poll() is not None:
            return
        rec.signal_sent, rec.signalled_at = how, utcnow()
        sig = signal.SIGKILL if how == "kill" else signal.SIGTERM
        try:
            rec.engine.proc.send_signal(sig)
        except ProcessLookupError:
            pass
        self.log(f"{'SIGKILL' if how == 'kill' else 'SIGTERM'} slot {rec.slot} "
                 f"({rec.engine.log.name})")

    def reap(self, rec: EngineRecord) -> bool:
        """Note how an engine ended; True if it just did."""
        rc = rec.engine.proc.poll()
        if rc is None or rec.ended is not None:
            return False
        rec.ended, rec.returncode = utcnow(), rc
        if rec.signal_sent == "kill" and rc == -signal.SIGKILL:
            rec.how = "sigkill"
        elif rc == 137 and rec.armed:
            rec.how = "crash-point"
            # It crashed inside its last driver call: that is when it died.
            rec.ended = self.last_call_time(rec) or rec.ended
        elif rec.signal_sent == "term" and rc in (0, -signal.SIGTERM):
            rec.how = "sigterm"
        elif rec.signal_sent == "term" and rc == -signal.SIGKILL:
            rec.how = "sigkill"  # did not stop in time, escalated
        else:
            rec.how = f"exit {rc}"
            tail = "\n".join(rec.engine.text().splitlines()[-15:])
            self.unexpected.append(
                f"engine: {rec.engine.log.name} exited {rc} on its own "
                f"(knobs {rec.knobs or 'none'}); log tail:\n{tail}")
        self.counts[rec.how] += 1
        self.log(f"slot {rec.slot} ended: {rec.how}")
        return True

    def last_call_time(self, rec: EngineRecord) -> datetime.datetime | None:
        if rec.engine_id is None:
            return None
        path = Path(self.d.sections["dummy"]["dummy_state_path"]) / DB_NAME
        try:
            conn = sqlite3.connect(path, timeout=30)
            try:
                row = conn.execute("SELECT time FROM calls WHERE engine_id = ? "
                                   "ORDER BY seq DESC LIMIT 1", (rec.engine_id,)).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return None
        return parse_time(row[0]) if row else None

    @property
    def kills(self) -> int:
        return self.counts["sigkill"] + self.counts["crash-point"]

    # -- the chaos loop

    def run(self, stop: threading.Event, deadline: float) -> None:
        rng = self.rng
        lo, hi = self.opts.kill_interval
        next_kill = time.monotonic() + rng.uniform(lo, hi)
        postponed = 0
        while not stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            for slot, rec in enumerate(self.current):
                if rec is not None and self.reap(rec):
                    self.restart_at[slot] = now + rng.uniform(*self.opts.restart_delay)
                if rec is not None and rec.signal_sent == "term" and rec.ended is None and \
                        (utcnow() - rec.signalled_at).total_seconds() > 20:
                    rec.engine.proc.send_signal(signal.SIGKILL)  # stuck stopping
                if (rec is None or rec.ended is not None) and now >= self.restart_at[slot]:
                    knobs = random_knobs(rng) if rng.random() < 0.7 else {}
                    self.start(slot, knobs)
            if self.kills >= self.opts.kills:
                break
            if now >= next_kill and postponed < 6 and not self.busy() and rng.random() < 0.6:
                # Mostly kill while something is under way: wait a little.
                postponed += 1
                next_kill = now + 0.25
            elif now >= next_kill:
                postponed = 0
                live = [r for r in self.current
                        if r is not None and r.ended is None and r.signal_sent is None]
                # An engine with a crash point is spared a few times: its own
                # crash, inside a driver call, is the better kill.
                spared = False
                for rec in [r for r in live if r.armed and r.spared < 3]:
                    if rng.random() < 0.7:
                        rec.spared += 1
                        live.remove(rec)
                        spared = True
                if live:
                    victims = live if len(live) > 1 and rng.random() < 0.15 else \
                        [rng.choice(live)]
                    how = "kill" if rng.random() < 0.8 else "term"
                    for victim in victims:
                        self.signal(victim, how)
                next_kill = now + rng.uniform(lo, hi) / (2 if spared and not live else 1)
            time.sleep(0.05)

    def calm(self, timeout: float = 60) -> None:
        """Every slot runs an engine without knobs, up and serving."""
        for rec in self.current:
            if rec is not None and rec.ended is None and rec.knobs:
                self.signal(rec, "term")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in self.current:
                if rec is not None:
                    self.reap(rec)
                    if rec.signal_sent == "term" and rec.ended is None and \
                            (utcnow() - rec.signalled_at).total_seconds() > 20:
                        rec.engine.proc.send_signal(signal.SIGKILL)
            if all(r is None or r.ended is not None or (not r.knobs and r.signal_sent is None)
                   for r in self.current):
                break
            time.sleep(0.1)
        for slot, rec in enumerate(self.current):
            if rec is None or rec.ended is not None:
                self.start(slot, {})
        for rec in self.current:
            rec.engine.wait_for_log("share-manager up", timeout=60)

    def watch(self) -> None:
        """While settling: note engines that end (none should)."""
        for rec in self.current:
            if rec is not None:
                self.reap(rec)

    def stop_all(self) -> None:
        for rec in self.records:
            if rec.engine.proc.poll() is None:
                rec.engine.proc.send_signal(signal.SIGTERM)
        for rec in self.records:
            try:
                rec.engine.proc.wait(30)
            except subprocess.TimeoutExpired:
                rec.engine.proc.kill()
                rec.engine.proc.wait(30)


# ---------------------------------------------------------------------------
# Operations through sharectl


@dataclasses.dataclass
class StackModel:
    name: str
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    template: dict | None = None  # the last template of an accepted create/update
    accepted: list[tuple[str, dict | None, str]] = dataclasses.field(default_factory=list)
    deleted: bool = False  # a delete was accepted (updates may still supersede it)
    disable_rollback: bool = False
    versions: int = 0


@dataclasses.dataclass
class Op:
    label: str
    args: list[str]
    stack: StackModel | None = None
    template: dict | None = None
    action: str | None = None


class Operator:
    """Worker threads firing random sharectl commands."""

    def __init__(self, d: Deployment, reader: Reader, opts: Options, seed: int, log: Any) -> None:
        self.d = d
        self.reader = reader
        self.opts = opts
        self.seed = seed
        self.log = log
        self.world: dict[str, Any] | None = None
        self.stacks: dict[str, StackModel] = {}
        self.lock = threading.Lock()
        self.counter = 0
        self.outcomes: collections.Counter = collections.Counter()
        self.per_op: dict[str, collections.Counter] = collections.defaultdict(
            collections.Counter)
        self.problems: list[str] = []
        self.templates = d.root / "templates"
        self.templates.mkdir(exist_ok=True)
        self.oplog = open(d.root / "ops.log", "a", buffering=1)
        self.features: set[str] = set()
        self.made_but_error: dict[str, str] = {}  # first sighting of each

    def probe(self) -> None:
        """Stack cancel and traversal timeouts, where sharectl has them."""
        if self.d.sharectl("stack", "cancel", "--help", check=False).returncode == 0:
            self.features.add("cancel")
        if "--timeout" in self.d.sharectl("stack", "create", "--help", check=False).stdout:
            self.features.add("timeout")
        self.log(f"sharectl features: {sorted(self.features) or 'none'}")

    def next_number(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    # -- the world as the operations see it

    def refresh(self, stop: threading.Event) -> None:
        rounds = 0
        while not stop.is_set():
            try:
                self.world = world = self.reader.world()
                rounds += 1
                if rounds % 4 == 0:
                    self.audit(world)
            except Exception as exc:  # SQLite busy and the like: try again
                self.log(f"world refresh failed: {exc}")
            stop.wait(0.7)

    def audit(self, world: dict) -> None:
        for ident, what in made_but_error(world, backend_now(self.d), self.reader):
            if ident not in self.made_but_error:
                self.made_but_error[ident] = f"{what}, seen at {utcnow().isoformat()}"
                self.log(f"audit: {what} is error in the database but on the backend")

    # -- picking an operation

    def pick(self, rng: random.Random) -> Op | None:
        w = self.world
        if w is None:
            return None
        shares = [s for s in w["shares"].values() if MANUAL_SHARE.match(s["name"] or "")]
        manual_ids = {s["id"] for s in shares}
        available = [s for s in shares if s["status"] == vocab.AVAILABLE]
        snaps = [s for s in w["snapshots"].values() if s["share_id"] in manual_ids]
        snap_count = collections.Counter(s["share_id"] for s in snaps)
        replicas = [i for i in w["instances"] if i["share_id"] in manual_ids
                    and i["replica_state"] not in (None, vocab.REPLICA_ACTIVE)]
        rep_count = collections.Counter(r["share_id"] for r in replicas)
        groups = [g for g in w["groups"] if (g["name"] or "").startswith("mg")]
        gsnaps = [g for g in w["group_snapshots"]
                  if g["share_group_id"] in {x["id"] for x in groups}]
        backups = [b for b in w["backups"] if b["share_id"] in manual_ids]
        with self.lock:
            stack_models = list(self.stacks.values())
        live_stacks = [m for m in stack_models if not m.deleted]
        full = len(shares) >= self.opts.max_manual_shares
        weights = {
            "share create": 2 if full else 8,
            "share extend": 5 if available else 0,
            "share shrink": 3 if any(s["size"] > 1 for s in available) else 0,
            "share delete": (8 if full else 4) if shares else 0,
            "snapshot create": 4 if available else 0,
            "snapshot delete": 4 if snaps else 0,
            "replica create": 3 if available else 0,
            "replica delete": 3 if replicas else 0,
            "share-group create": 0.5 if len(groups) < 2 else 0,
            "share-group delete": 0.5 if groups else 0,
            "group-snapshot create": 0.5 if groups else 0,
            "group-snapshot delete": 0.5 if gsnaps else 0,
            "backup create": 0.5 if available else 0,
            "backup delete": 0.5 if backups else 0,
            "stack create": 10 if len(live_stacks) < self.opts.max_stacks else 0,
            "stack update": 16 if stack_models else 0,
            "stack delete": (2 + len(live_stacks)) if live_stacks else 0,
            "stack rollback": 3 if stack_models else 0,
            "stack cancel": 2 if stack_models and "cancel" in self.features else 0,
            # An operator's pass, racing with the operations under way.
            "reconcile run": 1.5,
        }
        label = rng.choices(list(weights), list(weights.values()))[0]
        n = self.next_number()
        if label == "share create":
            args = ["share", "create", str(rng.randint(1, 3)), "--proto",
                    rng.choice(("NFS", "CIFS")), "--name", f"m{n}"]
            from_snap = [s for s in snaps if s["status"] == vocab.AVAILABLE]
            if from_snap and rng.random() < 0.25:
                snap = rng.choice(from_snap)
                args[2] = str(snap["size"] + rng.randint(0, 1))
                args += ["--snapshot", snap["id"]]
            return Op(label, args)
        if label == "share extend":
            s = rng.choice(available)
            return Op(label, ["share", "extend", s["id"], str(s["size"] + rng.randint(1, 2))])
        if label == "share shrink":
            s = rng.choice([s for s in available if s["size"] > 1])
            return Op(label, ["share", "shrink", s["id"], str(rng.randint(1, s["size"] - 1))])
        if label == "share delete":
            bare = [s for s in shares if not snap_count[s["id"]] and not rep_count[s["id"]]]
            s = rng.choice(bare if bare and rng.random() < 0.9 else shares)
            return Op(label, ["share", "delete", s["id"]])
        if label == "snapshot create":
            s = rng.choice(available)
            return Op(label, ["snapshot", "create", s["id"], "--name", f"ms{n}"])
        if label == "snapshot delete":
            return Op(label, ["snapshot", "delete", rng.choice(snaps)["id"]])
        if label == "replica create":
            s = rng.choice(available)
            return Op(label, ["replica", "create", s["id"]])
        if label == "replica delete":
            return Op(label, ["replica", "delete", rng.choice(replicas)["id"]])
        if label == "share-group create":
            return Op(label, ["share-group", "create", "--name", f"mg{n}"])
        if label == "share-group delete":
            return Op(label, ["share-group", "delete", rng.choice(groups)["id"]])
        if label == "group-snapshot create":
            return Op(label, ["group-snapshot", "create", rng.choice(groups)["id"],
                              "--name", f"mgs{n}"])
        if label == "group-snapshot delete":
            return Op(label, ["group-snapshot", "delete", rng.choice(gsnaps)["id"]])
        if label == "backup create":
            return Op(label, ["backup", "create", rng.choice(available)["id"], "--name",
                              f"mb{n}"])
        if label == "backup delete":
            return Op(label, ["backup", "delete", rng.choice(backups)["id"]])
        if label == "reconcile run":
            return Op(label, ["reconcile", "run", "--timeout", "15"])
        return self.pick_stack(rng, label, stack_models, live_stacks, n)

    def pick_stack(self, rng: random.Random, label: str, stack_models: list[StackModel],
                   live: list[StackModel], n: int) -> Op | None:
        if label == "stack create":
            model = StackModel(f"s{n}")
            template = random_template(rng)
            model.disable_rollback = rng.random() < 0.15
            args = ["stack", "create", model.name]
            if model.disable_rollback:
                args.append("--disable-rollback")
            args += self.timeout(rng)
            return Op(label, args, model, template, "CREATE")
        # Updates and rollbacks go to live stacks, now and then to one whose
        # delete was accepted lately (it may still be deleting: superseded).
        recent = [m for m in stack_models if m.deleted][-3:]
        pool = live if label == "stack delete" else live + recent
        if label != "stack delete" and live and rng.random() < 0.85:
            pool = live
        # Often the one whose traversal is running: the new one supersedes it.
        running = {s["name"] for s in (self.world or {}).get("stacks", ())
                   if s["status"] == "IN_PROGRESS" and s["deleted_at"] is None}
        if rng.random() < 0.6 and any(m.name in running for m in pool):
            pool = [m for m in pool if m.name in running]
        if not pool:
            return None
        model = rng.choice(pool)
        if label == "stack update":
            base = model.template or random_template(rng)
            template = mutate_template(rng, base) if rng.random() < 0.9 else random_template(rng)
            return Op(label, ["stack", "update", model.name, *self.timeout(rng)], model,
                      template, "UPDATE")
        if label == "stack cancel":
            if model.name not in running:
                return None
            args = ["stack", "cancel", model.name]
            if rng.random() < 0.3:
                args.append("--no-rollback")
            return Op(label, args, model, None, "CANCEL")
        if label == "stack delete":
            return Op(label, ["stack", "delete", model.name], model, None, "DELETE")
        return Op(label, ["stack", "rollback", model.name], model, None, "ROLLBACK")

    # -- running one

    def timeout(self, rng: random.Random) -> list[str]:
        """Now and then a traversal timeout of seconds (``--timeout`` minutes)."""
        if "timeout" in self.features and rng.random() < 0.12:
            return ["--timeout", rng.choice(("0.1", "0.2", "0.5"))]
        return []

    def busy(self) -> bool:
        w = self.world
        return w is None or any(s["status"] == "IN_PROGRESS" and s["deleted_at"] is None
                                for s in w["stacks"]) or bool(transient_resources(w))

    def run_op(self, op: Op, worker: int) -> None:
        args = list(op.args)
        if op.template is not None:
            op.stack.versions += 1
            path = self.templates / f"{op.stack.name}-v{op.stack.versions}.yaml"
            path.write_text(yaml.safe_dump(op.template, sort_keys=False))
            args[3:3] = ["-t", str(path)]
        started = time.monotonic()
        try:
            out = self.d.sharectl(*args, check=False, timeout=120)
            rc, stderr = out.returncode, out.stderr
        except subprocess.TimeoutExpired:
            rc, stderr = "timeout", ""
            self.problems.append(f"cli: sharectl {' '.join(args)} did not return in 120 s")
        took = time.monotonic() - started
        first = next((ln for ln in stderr.splitlines() if ln.strip()), "")
        self.oplog.write(f"{utcnow().isoformat()} w{worker} rc={rc} {took:.1f}s "
                         f"sharectl {' '.join(args)} | {first[:300]}\n")
        with self.lock:
            self.outcomes[str(rc)] += 1
            self.per_op[op.label][str(rc)] += 1
            if "Traceback" in stderr:
                self.problems.append(f"cli: sharectl {' '.join(args)} exited {rc} with a "
                                     f"traceback: {stderr.strip().splitlines()[-1][:300]}")
            if op.stack is not None and rc == 0:
                op.stack.accepted.append((op.action, op.template, utcnow().isoformat()))
                if op.action in ("CREATE", "UPDATE"):
                    op.stack.template = op.template
                    op.stack.deleted = False
                elif op.action == "DELETE":
                    op.stack.deleted = True
                if op.action == "CREATE":
                    self.stacks[op.stack.name] = op.stack

    def work(self, worker: int, stop: threading.Event) -> None:
        rng = random.Random(f"{self.seed}:ops:{worker}")
        while not stop.is_set():
            try:
                op = self.pick(rng)
            except Exception as exc:
                # A bug of this harness: the run must not pass on without the
                # operations it meant to make (a name left over from a rename
                # once kept every stack action but create out of the runs).
                self.log(f"worker {worker}: pick failed:\n{traceback.format_exc()}")
                with self.lock:
                    if not any(p.startswith("harness: pick") for p in self.problems):
                        self.problems.append(f"harness: picking an operation failed: "
                                             f"{type(exc).__name__}: {exc}")
                op = None
            if op is None:
                stop.wait(0.3)
                continue
            if op.stack is not None and op.action != "CREATE":
                # One stack action at a time per stack, so the order in which
                # they were accepted is known.
                if not op.stack.lock.acquire(blocking=False):
                    stop.wait(0.05)
                    continue
                try:
                    self.run_op(op, worker)
                finally:
                    op.stack.lock.release()
            else:
                self.run_op(op, worker)

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())


# ---------------------------------------------------------------------------
# Settling and the invariants


def stale_rows(world: dict) -> list[dict]:
    """Rows IN_PROGRESS in a stack whose traversal is over."""
    over = {s["id"] for s in world["stacks"] if s["status"] != "IN_PROGRESS"}
    return [r for r in world["rows"] if r["status"] == "IN_PROGRESS" and r["stack_id"] in over]


def settle(reader: Reader, fleet: Fleet, timeout: float, log: Any) -> tuple[bool, float]:
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


class Checker:
    """Every invariant, checked on a settled deployment. ``records``: the
    engines that ran (how and when each ended); ``stacks``: the stacks whose
    create was accepted, with their accepted actions."""

    def __init__(self, d: Deployment, reader: Reader, records: list[EngineRecord],
                 stacks: dict[str, StackModel]) -> None:
        self.d = d
        self.reader = reader
        self.records = records
        self.stacks = stacks
        self.violations: list[str] = []
        self.notes: list[str] = []
        self.seen_during_chaos: dict[str, str] = {}
        self._calls: list[dict] | None = None
        self.diagnostics: dict[str, Any] = {}
        self.world = reader.world()
        self.shares = self.world["shares"]
        self.snapshots = self.world["snapshots"]
        self.instances = {i["id"]: i for i in self.world["instances"]}

    def bad(self, text: str) -> None:
        self.violations.append(text)

    def run_all(self) -> None:
        for check in (self.check_transient, self.check_stacks, self.check_orphans,
                      self.check_backend, self.check_sizes, self.check_made_but_error,
                      self.check_calls, self.check_overlaps,
                      self.check_requests, self.check_logs):
            try:
                check()
            except Exception:
                self.bad(f"check {check.__name__} raised:\n{traceback.format_exc()}")

    # -- resources

    def check_transient(self) -> None:
        for kind, row in transient_resources(self.world):
            extra = ""
            if kind == "share instance":
                share = self.shares.get(row["share_id"])
                extra = f" (share {row['share_id']} {share and share['name']}" + (
                    f", replica {row['replica_state']})" if row["replica_state"] else ")")
            reqs = self.reader.requests(resource_id=row["id"])
            brief = [(r["id"], r["action"], r["status"], r["engine_id"]) for r in reqs]
            self.bad(f"transient: {kind} {row['id']}{extra} stuck in {row['status']!r}; its "
                     f"requests: {brief}")
            self.diagnostics.setdefault("transient", []).append({"kind": kind, **row,
                                                                 "requests": reqs})
        for sid, share in self.shares.items():
            if share["instance_id"] is None:
                self.bad(f"share {sid} ({share['name']}) is live but has no live instance")
        for sid, snap in self.snapshots.items():
            if snap["instance_id"] is None:
                self.bad(f"snapshot {sid} ({snap['name']}) is live but has no live instance")

    # -- stacks

    def check_stacks(self) -> None:
        rows_by_stack = collections.defaultdict(list)
        for r in self.world["rows"]:
            rows_by_stack[r["stack_id"]].append(r)
        by_name: dict[str, list[dict]] = collections.defaultdict(list)
        for st in self.world["stacks"]:
            by_name[st["name"]].append(st)
        finals = collections.Counter()
        for name in sorted(set(self.stacks) | set(by_name)):
            model = self.stacks.get(name) or StackModel(name)
            versions = by_name.get(name, [])
            if not versions:
                self.bad(f"stack {name}: its create was accepted but there is no stack row")
                continue
            st = versions[-1]
            rows = rows_by_stack[st["id"]]
            state = f"{st['action']} {st['status']}" + (" (deleted)" if st["deleted_at"] else "")
            finals[state] += 1
            if st["status"] == "IN_PROGRESS":
                self.bad(f"stack {name}: stuck {st['action']} IN_PROGRESS "
                         f"(reason {st['status_reason']!r}); rows: {self.rows_text(rows)}")
                self.diagnose_stack(st, rows)
                continue
            if st["status"] not in ("COMPLETE", "FAILED"):
                self.bad(f"stack {name}: status {st['status']!r}")
            if st["status"] == "FAILED" and not (st["status_reason"] or "").strip():
                self.bad(f"stack {name}: {st['action']} FAILED without a status_reason")
            self.check_last_action(name, model, st)
            if st["deleted_at"] is not None:
                if rows:
                    self.bad(f"stack {name}: deleted but still has rows {self.rows_text(rows)}")
                continue
            for r in rows:
                if r["status"] == "IN_PROGRESS":
                    self.bad(f"stack {name} ({state}): row {r['name']} #{r['id']} left "
                             f"{r['action']} IN_PROGRESS (lock {r['engine_id']}, physical "
                             f"{self.physical_status(r) if r['physical_id'] else 'none'})")
                if r["action"] in ("CREATE", "UPDATE") and r["status"] == "COMPLETE" and \
                        r["physical_id"] and not self.physical_exists(r):
                    self.bad(f"stack {name} ({state}): row {r['name']} #{r['id']} is "
                             f"{r['action']} COMPLETE but its {r['type']} {r['physical_id']} "
                             "is gone")
            if st["status"] == "COMPLETE":
                self.check_complete(name, st, rows)
        self.final_states = dict(finals)

    def check_last_action(self, name: str, model: StackModel, st: dict) -> None:
        if not model.accepted:
            return
        action, template, _ = model.accepted[-1]
        got = (st["action"], st["status"])
        if action == "DELETE":
            ok = st["action"] == "DELETE" and (st["status"] == "FAILED" or
                                               st["deleted_at"] is not None)
        elif action == "ROLLBACK":
            ok = st["action"] == "ROLLBACK"
        elif action == "CANCEL":  # rolled back, or left FAILED (--no-rollback)
            ok = st["action"] == "ROLLBACK" or st["status"] == "FAILED"
        else:
            ok = st["action"] in (action, "ROLLBACK")
        if not ok:
            self.bad(f"stack {name}: the last accepted action was {action} but the stack "
                     f"ended {got[0]} {got[1]}" + (" (deleted)" if st["deleted_at"] else ""))
            return
        if action in ("CREATE", "UPDATE") and got == (action, "COMPLETE"):
            stored = self.reader.template(st["template_id"]) or {}
            want = {n: r["type"] for n, r in template["resources"].items()}
            have = {n: r.get("type") for n, r in (stored.get("resources") or {}).items()}
            if want != have:
                self.bad(f"stack {name}: {action} COMPLETE with template {have} but the "
                         f"accepted template was {want}")

    def check_complete(self, name: str, st: dict, rows: list[dict]) -> None:
        template = self.reader.template(st["template_id"])
        if template is None:
            self.bad(f"stack {name}: COMPLETE but its template #{st['template_id']} is gone")
            return
        resources = template.get("resources") or {}
        names = collections.Counter(r["name"] for r in rows)
        if set(names) != set(resources) or any(n > 1 for n in names.values()):
            self.bad(f"stack {name} ({st['action']} COMPLETE): rows {dict(names)} but the "
                     f"template has {sorted(resources)}; rows: {self.rows_text(rows)}")
        by_name = {r["name"]: r for r in rows}
        for res_name, res in resources.items():
            row = by_name.get(res_name)
            if row is None:
                continue
            where = f"stack {name} ({st['action']} COMPLETE) resource {res_name} #{row['id']}"
            if row["status"] != "COMPLETE" or row["action"] in ("INIT", "DELETE"):
                self.bad(f"{where}: row is {row['action']} {row['status']} "
                         f"({row['status_reason']!r})")
            if row["type"] != res["type"]:
                self.bad(f"{where}: row type {row['type']} but template type {res['type']}")
                continue
            self.check_physical(where, name, res_name, res, row, by_name)

    def check_physical(self, where: str, stack: str, res_name: str, res: dict, row: dict,
                       by_name: dict[str, dict]) -> None:
        props = res.get("properties") or {}
        pid = row["physical_id"]

        def ref(key: str) -> str | None:
            value = props.get(key)
            if isinstance(value, dict) and "get_resource" in value:
                target = by_name.get(value["get_resource"])
                return target["physical_id"] if target else None
            return value

        def named(actual: str | None) -> None:
            prefix = f"{stack}-{res_name}-"
            wanted = prefix + props["name"] if props.get("name") else None
            if not (actual or "").startswith(prefix) or (wanted and actual != wanted):
                self.bad(f"{where}: physical name {actual!r}, expected "
                         f"{wanted or prefix + '<suffix>'!r}")

        if res["type"] == "share":
            share = self.shares.get(pid)
            if share is None:
                self.bad(f"{where}: share {pid} does not exist")
                return
            if share["status"] != vocab.AVAILABLE:
                self.bad(f"{where}: share {pid} is {share['status']}")
            if share["size"] != props.get("size"):
                self.bad(f"{where}: share {pid} is {share['size']} GiB, template says "
                         f"{props.get('size')}")
            if (share["share_proto"] or "").upper() != str(props.get("proto")).upper():
                self.bad(f"{where}: share {pid} is {share['share_proto']}, template says "
                         f"{props.get('proto')}")
            if props.get("snapshot") and share["snapshot_id"] != ref("snapshot"):
                self.bad(f"{where}: share {pid} was made from snapshot {share['snapshot_id']}, "
                         f"the template's snapshot is {ref('snapshot')}")
            named(share["name"])
        elif res["type"] == "snapshot":
            snap = self.snapshots.get(pid)
            if snap is None:
                self.bad(f"{where}: snapshot {pid} does not exist")
                return
            if snap["status"] != vocab.AVAILABLE:
                self.bad(f"{where}: snapshot {pid} is {snap['status']}")
            if snap["share_id"] != ref("share"):
                self.bad(f"{where}: snapshot {pid} is of share {snap['share_id']}, the "
                         f"template's share is {ref('share')}")
            named(snap["name"])
        elif res["type"] == "replica":
            inst = self.instances.get(pid)
            if inst is None:
                self.bad(f"{where}: replica {pid} does not exist")
                return
            if inst["status"] != vocab.AVAILABLE or inst["replica_state"] in (None,
                                                                              vocab.REPLICA_ACTIVE):
                self.bad(f"{where}: replica {pid} is {inst['status']} "
                         f"(replica_state {inst['replica_state']})")
            if inst["share_id"] != ref("share"):
                self.bad(f"{where}: replica {pid} is of share {inst['share_id']}, the "
                         f"template's share is {ref('share')}")

    def physical_exists(self, row: dict) -> bool:
        pid = row["physical_id"]
        if row["type"] == "share":
            return pid in self.shares
        if row["type"] == "snapshot":
            return pid in self.snapshots
        if row["type"] == "replica":
            return pid in self.instances
        return True

    def rows_text(self, rows: list[dict]) -> str:
        return "; ".join(
            f"{r['name']}#{r['id']} {r['type']} {r['action']} {r['status']}"
            + (f" phys {self.physical_status(r)}" if r["physical_id"] else "")
            + (f" lock {r['engine_id']}" if r["engine_id"] else "")
            + (f" replaces #{r['replaces']}" if r["replaces"] else "")
            + (f" replaced_by #{r['replaced_by']}" if r["replaced_by"] else "")
            + (f" ({r['status_reason'][:120]})" if r["status_reason"] else "")
            for r in rows) or "none"

    def physical_status(self, row: dict) -> str:
        pid = row["physical_id"]
        if row["type"] == "share":
            s = self.shares.get(pid)
            return f"{pid[:8]}:{s['status']}" if s else f"{pid[:8]}:gone"
        if row["type"] == "snapshot":
            s = self.snapshots.get(pid)
            return f"{pid[:8]}:{s['status']}" if s else f"{pid[:8]}:gone"
        if row["type"] == "replica":
            i = self.instances.get(pid)
            return f"{pid[:8]}:{i['status']}" if i else f"{pid[:8]}:gone"
        return pid[:8]

    def diagnose_stack(self, st: dict, rows: list[dict]) -> None:
        checks = [r for r in self.reader.requests(resource_type="stack_resource")
                  if (r["args"] or {}).get("stack_id") == st["id"]]
        current = [r for r in checks if (r["args"] or {}).get("traversal") ==
                   st["current_traversal"]]
        ops = [r for row in rows if row["physical_id"] for r in self.op_requests(row)]
        self.diagnostics.setdefault("stuck_stacks", []).append({
            "stack": st, "rows": rows,
            "current_traversal_checks": current,
            "all_checks_tail": checks[-30:],
            "sync_points": self.reader.sync_points(st["id"]),
            "physical_requests": ops,
        })

    def op_requests(self, row: dict) -> list[dict]:
        pid = row["physical_id"]
        ids = {pid}
        if row["type"] == "share" and pid in self.shares:
            ids.add(self.shares[pid]["instance_id"])
        if row["type"] == "snapshot" and pid in self.snapshots:
            ids.add(self.snapshots[pid]["instance_id"])
        return self.reader.requests(resource_id=[i for i in ids if i])

    # -- stack-made objects nobody owns

    def check_orphans(self) -> None:
        stacks = {}
        for st in self.world["stacks"]:
            stacks[st["name"]] = st  # the newest of a name wins (created_at order)
        owned = collections.defaultdict(set)
        for r in self.world["rows"]:
            if r["physical_id"]:
                owned[r["stack_id"]].add(r["physical_id"])

        def owner_ok(name: str | None, pid: str, what: str) -> None:
            m = STACK_MADE.match(name or "")
            if not m:
                return
            st = stacks.get(m.group(1))
            if st is None:
                self.bad(f"orphan: {what} {pid} ({name}) of unknown stack {m.group(1)}")
            elif st["deleted_at"] is not None:
                self.bad(f"orphan: {what} {pid} ({name}, status "
                         f"{self.status_of(what, pid)}) outlived its stack {st['name']} "
                         "(DELETE COMPLETE)")
            elif pid not in owned[st["id"]]:
                self.bad(f"orphan: {what} {pid} ({name}, status {self.status_of(what, pid)}) "
                         f"belongs to no row of stack {st['name']} ({st['action']} "
                         f"{st['status']})")
                self.diagnostics.setdefault("orphans", []).append({
                    "what": what, "id": pid, "name": name, "stack": st["name"],
                    "requests": self.reader.requests(resource_id=[pid, *self.instance_ids(
                        what, pid)])})

        for sid, share in self.shares.items():
            owner_ok(share["name"], sid, "share")
        for sid, snap in self.snapshots.items():
            owner_ok(snap["name"], sid, "snapshot")
        for inst in self.world["instances"]:
            if inst["replica_state"] in (None, vocab.REPLICA_ACTIVE):
                continue
            share = self.shares.get(inst["share_id"])
            if share is not None:
                owner_ok(share["name"], inst["id"], "replica")

    def status_of(self, what: str, pid: str) -> str | None:
        if what == "share":
            return self.shares[pid]["status"]
        if what == "snapshot":
            return self.snapshots[pid]["status"]
        return self.instances[pid]["status"]

    def instance_ids(self, what: str, pid: str) -> list[str]:
        if what == "share":
            return [self.shares[pid]["instance_id"] or ""]
        if what == "snapshot":
            return [self.snapshots[pid]["instance_id"] or ""]
        return []

    # -- the backend and the database

    def check_backend(self) -> None:
        everything = db_objects(self.d)
        settled = db_objects(self.d, settled_only=True)
        backend = backend_objects(self.d)
        names = {o["id"]: o for o in self.d.backend("list")}
        for be in self.d.backends:
            for kind, ident in sorted(settled[be] - backend[be]):
                self.bad(f"backend: {kind} {ident} ({self.db_name(kind, ident)}) is settled in "
                         f"the database but not on backend {be}")
            for kind, ident in sorted(backend[be] - everything[be]):
                obj = names.get(ident, {})
                self.bad(f"backend: {kind} {ident} ({obj.get('name')}) is on backend {be} "
                         "but not in the database (orphaned backend object)")
                self.diagnostics.setdefault("backend_orphans", []).append(
                    {"object": obj, "requests": self.reader.requests(resource_id=ident)})

    def check_sizes(self) -> None:
        """Settled shares and snapshots have the same size in the database and
        on the backend."""
        backend = {o["id"]: o for o in self.d.backend("list")}
        for share in self.shares.values():
            obj = backend.get(share["instance_id"])
            if share["status"] == vocab.AVAILABLE and obj and obj["size"] != share["size"]:
                self.bad(f"size: share {share['id']} ({share['name']}) is {share['size']} GiB "
                         f"in the database but {obj['size']} GiB on the backend")
        for snap in self.snapshots.values():
            obj = backend.get(snap["instance_id"])
            if snap["status"] == vocab.AVAILABLE and obj and obj["size"] != snap["size"]:
                self.bad(f"size: snapshot {snap['id']} ({snap['name']}) is {snap['size']} GiB "
                         f"in the database but {obj['size']} GiB on the backend")
                self.diagnostics.setdefault("sizes", []).append({
                    "snapshot": snap, "backend": obj,
                    "requests": self.reader.requests(resource_id=[
                        snap["instance_id"], self.share_instance_of(snap)])})

    def share_instance_of(self, snap: dict) -> str:
        for row in self.world["snapshot_instances"]:
            if row["id"] == snap["instance_id"]:
                return row["share_instance_id"]
        return ""

    def check_made_but_error(self) -> None:
        """Rows marked error while their driver call ran: seen now, or by the
        audit during the chaos (``seen_during_chaos``: a stack may have
        cleaned it up since)."""
        found = dict(self.seen_during_chaos)
        for ident, what in made_but_error(self.world, backend_now(self.d), self.reader):
            found.setdefault(ident, f"{what}, at the end")
        for ident, what in sorted(found.items()):
            self.bad(f"made-but-error: {what}: error in the database although the backend "
                     "made it (settled while its driver call ran?)")
            self.diagnostics.setdefault("made_but_error", []).append(
                {"id": ident, "what": what, "requests": self.reader.requests(resource_id=ident),
                 "calls": [c for c in self.calls() if c["resource_id"] == ident]})

    def calls(self) -> list[dict]:
        if self._calls is None:
            self._calls = self.d.backend("calls")
        return self._calls

    def db_name(self, kind: str, ident: str) -> str | None:
        if kind in ("share", "replica"):
            inst = self.instances.get(ident)
            share = self.shares.get(inst["share_id"]) if inst else None
            return share["name"] if share else None
        for snap in self.snapshots.values():
            if snap["instance_id"] == ident:
                return snap["name"]
        return None

    # -- no create or delete done twice

    def check_calls(self) -> None:
        # A call the backend refused as fenced changed nothing: not a double.
        calls = [c for c in self.calls() if not c.get("fenced")]
        deaths: dict[str, datetime.datetime] = {}
        for rec in self.records:
            # Engines that died without finishing what they had started.
            if rec.engine_id and rec.how and rec.how != "sigterm":
                deaths[rec.engine_id] = rec.died_at
        per: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
        for c in calls:
            if c["method"] in CREATE_METHODS:
                per[("create", c["resource_id"])].append(c)
            elif c["method"] in DELETE_METHODS:
                per[("delete", c["resource_id"])].append(c)
        doubles = 0
        for (kind, rid), cs in per.items():
            if len(cs) < 2:
                continue
            text = ", ".join(f"{c['method']} by {c['engine_id']} at {c['time']}" for c in cs)
            if kind == "create":
                self.bad(f"twice: {len(cs)} creates of {rid}: {text}")
                doubles += 1
                continue
            explained = 0
            # A take-over: the delete's request abandoned (its engine dead, or
            # its lease expired: paused, cut off) and the delete retried by
            # the reconciliation rules (doc/reconciliation.rst).
            taken = [r["finished_at"].replace(tzinfo=datetime.UTC)
                     for r in self.reader.requests(resource_id=rid)
                     if r["status"] == "abandoned" and r["finished_at"]]
            for a, b in zip(cs, cs[1:], strict=False):
                died = deaths.get(a["engine_id"])
                slack = datetime.timedelta(seconds=0.5)
                start, end = parse_time(a["time"]) - slack, parse_time(b["time"]) + slack
                if (died is not None and start <= died <= end) or \
                        any(start <= t <= end for t in taken):
                    explained += 1
            asked = len([r for r in self.reader.requests(resource_id=rid)
                         if r["action"] == "delete"])
            if len(cs) - explained > max(asked, 1):
                self.bad(f"twice: {len(cs)} deletes of {rid} with {asked} delete request(s) "
                         f"and {explained} retry(ies) after a crash: {text}")
                doubles += 1
        self.calls_total = len(self.calls())

    def check_overlaps(self) -> None:
        """No two state-changing calls the backend accepted on one object
        overlap in time (each from its log row to its committed change):
        the per-resource lock, and where it was lost (a paused engine) the
        fencing token, keep them apart."""
        per: dict[str, list[dict]] = collections.defaultdict(list)
        for c in self.calls():
            if c.get("finished") and not c.get("fenced") and c["resource_id"] and \
                    c["method"] not in READ_METHODS:
                per[c["resource_id"]].append(c)
        for rid, cs in per.items():
            cs.sort(key=lambda c: c["time"])
            for a, b in zip(cs, cs[1:], strict=False):
                if b["time"] < a["finished"]:
                    self.bad(f"overlap: {a['method']} by {a['engine_id']} ({a['time']} to "
                             f"{a['finished']}) and {b['method']} by {b['engine_id']} "
                             f"(from {b['time']}) on {rid}")

    # -- requests and logs: notes, not invariants

    def check_requests(self) -> None:
        counts = self.world["requests"]
        if counts.get("pending"):
            pending = self.reader.requests(status="pending")
            brief = [(r["id"], r["resource_type"], r["action"], r["host"]) for r in pending]
            self.bad(f"requests: {len(pending)} still pending after settling: {brief[:10]}")
        self.request_counts = dict(counts)

    def check_logs(self) -> None:
        tracebacks = 0
        for rec in self.records:
            tracebacks += rec.engine.text().count("Traceback (most recent call last)")
        if tracebacks:
            self.notes.append(f"{tracebacks} traceback(s) in the engine logs")


# ---------------------------------------------------------------------------
# Teardown: every stack left can be deleted, and leaves nothing behind


def teardown(d: Deployment, reader: Reader, records: list[EngineRecord], timeout: float,
             log: Any) -> tuple[list[str], float]:
    """Delete every stack still there (FAILED ones included), engines calm,
    and check that each goes and takes everything it made with it. A delete
    that fails on the stack's own traversal timeout (``--timeout`` sticks to
    a stack) is asked again, three times at most."""
    started = time.monotonic()
    problems: list[str] = []
    asked: collections.Counter = collections.Counter()

    def delete(name: str) -> None:
        asked[name] += 1
        out = d.sharectl("stack", "delete", name, check=False, timeout=120)
        if out.returncode != 0:
            log(f"teardown: stack delete {name} exited {out.returncode}: {out.stderr.strip()}")

    def remaining() -> list[dict]:
        latest = {s["name"]: s for s in reader.world()["stacks"]}
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
                 if s["status"] != "IN_PROGRESS" and asked[s["name"]] < 3
                 and "timed out" in (s["status_reason"] or "")]
        if not left or (not retry and all(s["status"] != "IN_PROGRESS" for s in left)):
            break
        if retry:
            fire(retry)
        time.sleep(0.5)
    for st in remaining():
        problems.append(f"teardown: stack {st['name']} could not be deleted: {st['action']} "
                        f"{st['status']} ({st['status_reason']!r}) after {asked[st['name']]} "
                        "delete(s)")
    world = reader.world()
    for kind, row in transient_resources(world):
        problems.append(f"teardown: {kind} {row['id']} stuck in {row['status']!r}")
    deleted = {s["name"] for s in world["stacks"] if s["deleted_at"] is not None}
    for sid, share in world["shares"].items():
        m = STACK_MADE.match(share["name"] or "")
        if m and m.group(1) in deleted:
            problems.append(f"teardown: share {sid} ({share['name']}, {share['status']}) "
                            f"outlived its deleted stack {m.group(1)}")
    for sid, snap in world["snapshots"].items():
        m = STACK_MADE.match(snap["name"] or "")
        if m and m.group(1) in deleted:
            problems.append(f"teardown: snapshot {sid} ({snap['name']}, {snap['status']}) "
                            f"outlived its deleted stack {m.group(1)}")
    for obj in backend_now(d).values():
        m = STACK_MADE.match(obj["name"] or "")
        if m and m.group(1) in deleted:
            problems.append(f"teardown: backend {obj['kind']} {obj['id']} ({obj['name']}) "
                            f"outlived its deleted stack {m.group(1)}")
    checker = Checker(d, reader, records, {})
    checker.check_backend()
    problems += [f"teardown: {v}" for v in checker.violations]
    return problems, time.monotonic() - started


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


def open_narrative(path: Path, echo: bool) -> tuple[Any, Any]:
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

    kills = {k: fleet.counts[k] for k in ("sigkill", "crash-point", "sigterm", "starts")}
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
