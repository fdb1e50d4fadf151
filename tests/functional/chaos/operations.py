"""Operations through sharectl: the operator's threads, the operations and
stack actions they fire, and what each stack was asked."""

from __future__ import annotations

import collections
import dataclasses
import random
import subprocess
import threading
import time
import traceback
from typing import Any

import yaml
from sharemgr.common import vocab

from tests.functional.chaos.options import MANUAL_SHARE, Log, Options, utcnow
from tests.functional.chaos.reader import Reader, backend_now, made_but_error, transient_resources
from tests.functional.chaos.templates import explicit_values, mutate_template, random_template
from tests.functional.harness import Deployment


@dataclasses.dataclass
class StackModel:
    name: str
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    template: dict | None = None  # the last template of an accepted create/update
    accepted: list[tuple[str, dict | None, str]] = dataclasses.field(default_factory=list)
    deleted: bool = False  # a delete was accepted (updates may still supersede it)
    disable_rollback: bool = False
    versions: int = 0
    # Parameter values given with -P on every create and update (else the
    # templates' defaults apply): templates.explicit_values.
    explicit: bool = False


@dataclasses.dataclass
class Op:
    label: str
    args: list[str]
    stack: StackModel | None = None
    template: dict | None = None
    action: str | None = None


class Operator:
    """Worker threads firing random sharectl commands."""

    def __init__(self, d: Deployment, reader: Reader, opts: Options, seed: int, log: Log) -> None:
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
            open_groups = [g for g in groups if g["status"] == vocab.AVAILABLE]
            if from_snap and rng.random() < 0.25:
                snap = rng.choice(from_snap)
                args[2] = str(snap["size"] + rng.randint(0, 1))
                args += ["--snapshot", snap["id"]]
            elif open_groups and rng.random() < 0.2:
                # In a group: its group snapshots hold it (a delete of it is
                # refused while one lives; the backend refuses it too).
                args += ["--share-group", rng.choice(open_groups)["id"]]
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
            model.explicit = rng.random() < 0.5
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
            return Op(label, ["stack", "update", model.name, "--allow-replace",
                              *self.timeout(rng)], model, template, "UPDATE")
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
            assert op.stack is not None  # a template is a stack's
            op.stack.versions += 1
            path = self.templates / f"{op.stack.name}-v{op.stack.versions}.yaml"
            written, values = (explicit_values(op.template) if op.stack.explicit
                               else (op.template, {}))
            path.write_text(yaml.safe_dump(written, sort_keys=False))
            args[3:3] = ["-t", str(path)] + [a for k, v in sorted(values.items())
                                             for a in ("-P", f"{k}={v}")]
        started = time.monotonic()
        rc: int | str
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
            if "Traceback" in stderr or "unexpected error" in stderr:  # a bug (cli/base.py)
                self.problems.append(f"cli: sharectl {' '.join(args)} exited {rc} with a "
                                     f"traceback: {stderr.strip().splitlines()[-1][:300]}")
            if op.stack is not None and rc == 0:
                assert op.action is not None  # a stack's operation names its action
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
