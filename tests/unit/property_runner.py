"""Running a scenario of the convergence property test
(test_convergence_properties.py) on a PropertyRig, and judging the end state
(:func:`_judge`): the stack's status, its rows, the physical resources and
the SyncPoints against the model."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa
import yaml
from hypothesis import event
from hypothesis.control import currently_in_test_context
from sharemgr.common.vocab import STACK_COMPLETE as COMPLETE
from sharemgr.common.vocab import STACK_DELETE as DELETE
from sharemgr.common.vocab import STACK_FAILED as FAILED
from sharemgr.common.vocab import STACK_IN_PROGRESS as IN_PROGRESS
from sharemgr.common.vocab import STACK_INIT as INIT
from sharemgr.common.vocab import STACK_ROLLBACK as ROLLBACK
from sharemgr.convergence import prepare
from sharemgr.db import api as db_api
from sharemgr.db import models, resources, stack_events, stacks
from sharemgr.db.engine import Database

from tests.unit.property_rig import (
    TRANSIENT,
    PEngine,
    PropertyRig,
    Task,
    open_requests,
    pending_checks,
)
from tests.unit.property_scenarios import (
    EMPTY,
    FAILING,
    GONE,
    STACK,
    Act,
    Go,
    Kill,
    Model,
    Reconcile,
    Run,
    Scenario,
    Start,
    Step,
    Watchdog,
    failing,
)

SETTLE_ROUNDS = 12
MAX_CHECKS = 600  # checks one settle round may run before we call it a livelock

# Running a scenario -------------------------------------------------------------------------


class Runner:
    def __init__(self, rig: PropertyRig, scenario: Scenario) -> None:
        self.rig = rig
        self.sc = scenario
        self.model = Model(scenario.fail)

    # Steps ----------------------------------------------------------------------------------

    def act(self, kind: str, template: dict | None = None) -> None:
        rig, model = self.rig, self.model
        stack = model.observe(rig)
        if stack is None and kind in ("delete", "rollback"):
            model.log.append(f"{kind}: no stack")
            return
        text = yaml.safe_dump(template) if template is not None else None
        target: dict | str | None
        try:
            if stack is None:
                kind = "create"
                assert text is not None  # a delete or rollback of no stack returned above
                tr = rig.create(STACK, text, disable_rollback=self.sc.disable_rollback)
                model.targets = {}
                model.last_completed = None
                target = template
            elif kind == "update":
                assert text is not None  # an update has its template
                tr = rig.update(STACK, text)
                target = template
            elif kind == "delete":
                tr = rig.start(STACK, "DELETE")
                target = GONE
            else:
                target = model.rollback_target()
                tr = rig.start(STACK, "ROLLBACK")
        except prepare.InvalidStackAction as exc:
            # The one refusal a stack that exists may give: it is being deleted.
            assert stack is not None
            assert (stack.action, stack.status) == (DELETE, IN_PROGRESS), \
                f"{kind} refused while the stack is {stack.action} {stack.status}: {exc}"
            model.log.append(f"{kind}: refused ({exc})")
            return
        model.targets[tr.traversal_id] = target
        model.last = (kind, target)
        model.log.append(f"{kind} -> traversal {tr.traversal_id[:8]}"
                         f"{' (complete at once)' if tr.complete else ''}")
        model.observe(rig)

    def advance(self, task: Task, stop: int | None, crash: bool) -> None:
        task.go(stop, crash)
        if task.error is not None:
            raise AssertionError(f"{task.label} raised {task.error!r}") from task.error
        state = "crashed" if task.crashed else task.state
        self.model.log.append(f"{task.label}: {state} after {task.passed} boundaries"
                              f"{'' if task.result is None else f' -> {task.result}'}")
        if task.crashed:
            self.die(task.engine)

    def die(self, engine: PEngine) -> None:
        self.rig.kill(engine)
        self.model.log.append(f"engine {engine.number} died")
        if not self.rig.live():
            engine = self.rig.start_engine()
            self.model.log.append(f"engine {engine.number} started")

    def live(self, pick: int) -> PEngine:
        live = self.rig.live()
        return live[pick % len(live)]

    def step(self, step: Step) -> None:
        rig = self.rig
        if isinstance(step, Act):
            self.act(step.kind, self.sc.templates[step.t % len(self.sc.templates)])
        elif isinstance(step, Run):
            pending = pending_checks(rig.db)
            if pending:
                req = pending[step.pick % len(pending)]
                self.advance(rig.check_task(self.live(step.engine), req.id), step.stop,
                             step.crash)
        elif isinstance(step, Go):
            waiting = rig.tasks()
            if waiting:
                self.advance(waiting[step.pick % len(waiting)], step.stop, step.crash)
        elif isinstance(step, Watchdog):
            engine = self.live(step.engine)
            if not any(t.label.startswith("watchdog") for t in rig.tasks()
                       if t.engine is engine):  # one run at a time per engine
                self.advance(rig.watchdog_task(engine), step.stop, step.crash)
        elif isinstance(step, Reconcile):
            rig.reconcile(self.live(step.engine))
        elif isinstance(step, Start):
            if len(rig.live()) < 3:
                engine = rig.start_engine()
                self.model.log.append(f"engine {engine.number} started")
        elif isinstance(step, Kill):
            self.die(self.live(step.engine))

    def settle(self) -> None:
        """What live engines do given time: waiting checks go on, pending
        checks run, passes and the watchdog run, until nothing is pending."""
        rig = self.rig
        for _ in range(SETTLE_ROUNDS):
            for task in rig.tasks():
                self.advance(task, None, False)
            ran = 0
            while pending := pending_checks(rig.db):
                if ran >= MAX_CHECKS:
                    raise AssertionError(f"livelock: {ran} checks and still "
                                         f"{len(pending)} pending\n" + self.trail())
                self.advance(rig.check_task(self.live(ran), pending[0].id), None, False)
                ran += 1
            # The engines' background work: a reconciliation pass (they all
            # serve the one host) and every live engine's watchdog.
            rig.reconcile(rig.live()[0])
            for engine in rig.live():
                self.advance(rig.watchdog_task(engine), None, False)
            if not pending_checks(rig.db):
                return
        raise AssertionError(f"still busy after {SETTLE_ROUNDS} rounds of settling\n"
                             + self.trail())

    def trail(self) -> str:
        return "what happened:\n  " + "\n  ".join(self.model.log[-60:])

    # The whole scenario ---------------------------------------------------------------------

    def run(self) -> None:
        self.rig.start_engine()
        self.act("create", self.sc.templates[0])
        for step in self.sc.steps:
            self.step(step)
        self.settle()
        log = self.model.log
        _event(f"engine deaths: {min(3, sum('died' in line for line in log))}")
        _event(f"user actions: {min(4, sum('-> traversal' in line for line in log))}")
        _event(f"last action: {self.model.last[0] if self.model.last else None}")
        waits = sum(" paused " in line for line in log)
        _event(f"tasks left waiting at a boundary: {min(2, waits)}")
        problems = _judge(self.rig, self.model, self.sc)
        if not problems and self.model.observe(self.rig) is not None \
                and self.rig.stack(STACK).status == FAILED:
            # disable_rollback: the FAILED stack was as it must be; a
            # rollback on demand must bring it home as well.
            self.act("rollback")
            self.settle()
            problems = _judge(self.rig, self.model, self.sc)
        assert not problems, "\n".join(["the end state is wrong:", *problems, self.trail()])


def _event(text: str) -> None:
    if currently_in_test_context():  # the statistics of a hypothesis run
        event(text)


# Judging the end state ------------------------------------------------------------------------


def _judge(rig: PropertyRig, model: Model, sc: Scenario) -> list[str]:
    problems: list[str] = []
    stack = model.observe(rig)
    assert model.last is not None, "no action was accepted"
    kind, target = model.last
    opened = open_requests(rig.db)
    if opened:
        problems.append("requests still open: " + "; ".join(
            f"#{r.id} {r.resource_type} {r.action} {r.status} engine={r.engine_id} "
            f"args={_args(r)}" for r in opened))
    if target == GONE:
        if stack is not None:
            problems.append(f"the stack was deleted last, but it is {stack.action} "
                            f"{stack.status}: {stack.status_reason}")
            return problems + _state(rig, stack, None)
        return problems + _state(rig, None, EMPTY)
    if stack is None:
        return problems + [f"the stack is gone, but the last action was {kind}"]
    if stack.status == IN_PROGRESS:
        problems.append(f"HANG: stack {stack.action} IN_PROGRESS after settling "
                        f"({stack.status_reason}); pending checks: "
                        f"{len(pending_checks(rig.db))}")
        return problems + _state(rig, stack, None)

    fails = sc.fail and failing(target)
    expected_status, expected = COMPLETE, target
    if fails:
        if sc.disable_rollback:
            expected_status, expected = FAILED, None
        else:
            expected = model.rollback_target()
    if stack.status != expected_status:
        problems.append(f"stack {stack.action} {stack.status} ({stack.status_reason}); "
                        f"expected {expected_status} after {kind}")
    if stack.status == FAILED:
        if not fails or FAILING not in (stack.status_reason or ""):
            problems.append(f"stack FAILED with reason {stack.status_reason!r}, "
                            "but no failure of it was injected")
        return problems + _state(rig, stack, None)
    if fails and not sc.disable_rollback:
        if stack.action != ROLLBACK or "rolled back because" not in (stack.status_reason or ""):
            problems.append(f"the failed {kind} should have rolled back: "
                            f"{stack.action} {stack.status} ({stack.status_reason})")
    return problems + _state(rig, stack, expected)


def _args(req: models.Request) -> dict:
    args = dict(req.args or {})
    args.pop("input_data", None)
    return args


def _expected_props(defn: dict, pids: dict[str, str | None]) -> dict:
    out = {}
    for prop, value in defn["properties"].items():
        if isinstance(value, dict) and "get_resource" in value:
            value = pids.get(value["get_resource"])
        out[prop] = value
    return out


def _state(rig: PropertyRig, stack: models.Stack | None, template: dict | None) -> list[str]:
    """The stack's rows and every physical resource against ``template``
    (None: only what must hold in any settled state)."""
    db = rig.db
    problems: list[str] = []
    rows = stacks.resource_list(db, stack.id) if stack is not None else []
    with db.session() as session:
        all_rows = list(session.scalars(sa.select(models.StackResource)
                                        .where(models.StackResource.deleted_at.is_(None))))
        points = list(session.scalars(sa.select(models.SyncPoint)))
    strays = [r for r in all_rows if stack is None or r.stack_id != stack.id]
    if strays:
        problems.append("rows of no live stack: " + ", ".join(_row(r) for r in strays))
    for row in rows:
        if row.engine_id is not None:
            problems.append(f"row still locked: {_row(row)}")
        if row.status == IN_PROGRESS:
            problems.append(f"row still in progress: {_row(row)}")
    if stack is not None and stack.status != FAILED:
        if points:
            traversals = collections.Counter(p.traversal_id[:8] for p in points)
            problems.append(f"SyncPoints left: {dict(traversals)} "
                            f"(current traversal {(stack.current_traversal or '')[:8]})")
    elif stack is not None:
        old = [p for p in points if p.traversal_id != stack.current_traversal]
        if old:
            problems.append(f"SyncPoints of old traversals left: {len(old)}")
    if stack is None and points:
        problems.append(f"SyncPoints left of a deleted stack: {len(points)}")
    problems += _events(db, stack, rows)

    backend = {o["id"]: o for o in rig.objects()}
    live = _live_physical(db)
    if template is None:
        busy = [f"{kind} {ident} {status}" for kind, rows_ in live.items()
                for ident, status in rows_.items() if status in TRANSIENT]
        if busy:
            problems.append("physical resources in a transient status: " + ", ".join(busy))
        return problems

    # Rows: exactly the template's names, one each, as the template says.
    by_name = collections.defaultdict(list)
    for row in rows:
        by_name[row.name].append(row)
    wanted = template["resources"]
    if set(by_name) != set(wanted) or any(len(v) != 1 for v in by_name.values()):
        problems.append(f"rows {sorted((r.name, r.id) for r in rows)}, "
                        f"expected one each of {sorted(wanted)}")
    pids = {name: v[0].physical_id for name, v in by_name.items() if len(v) == 1}
    expect_db: dict[str, set] = {k: set() for k in live}
    expect_backend: dict[str, str] = {}
    for name, defn in wanted.items():
        if len(by_name.get(name, ())) != 1:
            continue
        row = by_name[name][0]
        props = {k: v for k, v in (row.properties or {}).items() if v is not None}
        if row.type != defn["type"]:
            problems.append(f"{name}: row of type {row.type}, template says {defn['type']}")
        if row.action in (INIT, DELETE) or row.status != COMPLETE:
            problems.append(f"{name}: row {row.action} {row.status} ({row.status_reason})")
        if row.replaced_by is not None:
            problems.append(f"{name}: row {row.id} is replaced by {row.replaced_by}")
        if stack is not None and row.template_id != stack.template_id:
            problems.append(f"{name}: row of template {row.template_id}, the stack's is "
                            f"{stack.template_id}")
        want = _expected_props(defn, pids)
        if props != want:
            problems.append(f"{name}: row properties {props}, template says {want}")
        problems += _physical(db, STACK, name, defn, row, want, backend, expect_db,
                              expect_backend)
    for kind, ids in live.items():
        extra = set(ids) - expect_db[kind]
        missing = expect_db[kind] - set(ids)
        if extra:
            problems.append(f"orphan {kind}: " + ", ".join(f"{i} ({ids[i]})" for i in extra))
        if missing:
            problems.append(f"missing {kind}: {sorted(missing)}")
    for ident, obj in backend.items():
        if ident not in expect_backend:
            problems.append(f"orphan on the backend: {obj['kind']} {ident} {obj['name']} "
                            f"{obj['status']}")
        elif obj["kind"] != expect_backend[ident]:
            problems.append(f"backend object {ident} is a {obj['kind']}, expected "
                            f"{expect_backend[ident]}")
    for ident, kind in expect_backend.items():
        if ident not in backend:
            problems.append(f"missing on the backend: {kind} {ident}")
    return problems


def _events(db: Database, stack: models.Stack | None, rows: list[models.StackResource]
            ) -> list[str]:
    """Every status change left its event (written in its transaction,
    whatever crashed): the stack's newest event and each row's newest say
    what the stack and the row say now; a deleted stack left none."""
    problems: list[str] = []
    with db.session() as session:
        gone = session.execute(
            sa.select(sa.func.count()).select_from(models.StackEvent)
            .join(models.Stack, models.Stack.id == models.StackEvent.stack_id)
            .where(models.Stack.deleted_at.is_not(None))).scalar_one()
    if gone:
        problems.append(f"events of deleted stacks left: {gone}")
    if stack is None:
        return problems
    events = stack_events.events(db, stack.id)
    own = [(e.action, e.status) for e in events if e.resource_name is None]
    if stack.action != INIT and (own[-1:] != [(stack.action, stack.status)]):
        problems.append(f"the stack is {stack.action} {stack.status}, its last event "
                        f"{own[-1:]}")
    last = {e.resource_id: (e.action, e.status) for e in events if e.resource_id is not None}
    for row in rows:
        if (row.action, row.status) != (INIT, COMPLETE) and \
                last.get(row.id) != (row.action, row.status):
            problems.append(f"row {_row(row)}: its last event is {last.get(row.id)}")
    return problems


_Physical = models.Share | models.ShareInstance | models.ShareSnapshot \
    | models.ShareSnapshotInstance
_LIVE: tuple[tuple[str, type[_Physical]], ...] = (
    ("share", models.Share), ("share_instance", models.ShareInstance),
    ("snapshot", models.ShareSnapshot), ("snapshot_instance", models.ShareSnapshotInstance))


def _live_physical(db: Database) -> dict[str, dict[str, str]]:
    """Physical rows that are not deleted: kind -> id -> status."""
    out: dict[str, dict[str, str]] = {}
    with db.session() as session:
        for kind, model in _LIVE:
            # A select of one of the models gives its rows (typed by the union's base).
            rows = cast("Iterable[_Physical]", session.scalars(
                sa.select(model).where(model.deleted_at.is_(None))))
            out[kind] = {r.id: getattr(r, "status", "-") for r in rows}
    return out


def _physical(db: Database, stack: str, name: str, defn: dict, row: models.StackResource,
              want: dict, backend: dict, expect_db: dict, expect_backend: dict) -> list[str]:
    problems: list[str] = []
    pid = row.physical_id
    where = f"{name} (row {row.id}, physical {pid})"
    if pid is None:
        return [f"{where}: no physical resource"]
    prefix = f"{stack}-{name}-"

    def get(model: type, ident: str) -> Any:
        return db_api.get(db, model, ident, include_deleted=True)

    if row.type == "share":
        share = get(models.Share, pid)
        inst = resources.primary_instance(db, pid)
        if share is None or share.deleted_at is not None or inst is None:
            return [f"{where}: the share is gone"]
        expect_db["share"].add(share.id)
        expect_db["share_instance"].add(inst.id)
        expect_backend[inst.id] = "share"
        if inst.status != "available":
            problems.append(f"{where}: share instance {inst.status}")
        if share.size != want["size"] or share.share_proto != want["proto"]:
            problems.append(f"{where}: share of {share.size} GiB {share.share_proto}, "
                            f"template says {want['size']} {want['proto']}")
        if share.snapshot_id != want.get("snapshot"):
            problems.append(f"{where}: made from snapshot {share.snapshot_id}, "
                            f"template says {want.get('snapshot')}")
        problems += _name(where, share.name, prefix, want.get("name"))
        obj = backend.get(inst.id)
        if obj is not None and (obj["size"] != want["size"] or obj["status"] != "available"
                                or (obj.get("details") or {}).get("share_proto")
                                != want["proto"]):
            problems.append(f"{where}: on the backend {obj['size']} GiB "
                            f"{obj.get('details')} {obj['status']}")
    elif row.type == "snapshot":
        snap = get(models.ShareSnapshot, pid)
        snap_inst = resources.snapshot_instance_of(db, pid)
        if snap is None or snap.deleted_at is not None or snap_inst is None:
            return [f"{where}: the snapshot is gone"]
        expect_db["snapshot"].add(snap.id)
        expect_db["snapshot_instance"].add(snap_inst.id)
        expect_backend[snap_inst.id] = "snapshot"
        if snap_inst.status != "available":
            problems.append(f"{where}: snapshot instance {snap_inst.status}")
        if snap.share_id != want["share"]:
            problems.append(f"{where}: snapshot of share {snap.share_id}, template says "
                            f"{want['share']}")
        problems += _name(where, snap.name, prefix, want.get("name"))
    else:  # replica
        inst = get(models.ShareInstance, pid)
        if inst is None or inst.deleted_at is not None:
            return [f"{where}: the replica is gone"]
        expect_db["share_instance"].add(inst.id)
        expect_backend[inst.id] = "replica"
        if inst.status != "available":
            problems.append(f"{where}: replica {inst.status}")
        if inst.share_id != want["share"]:
            problems.append(f"{where}: replica of share {inst.share_id}, template says "
                            f"{want['share']}")
    return problems


def _name(where: str, actual: str | None, prefix: str, label: str | None) -> list[str]:
    if label is not None:
        ok = actual == prefix + label
    else:
        ok = actual is not None and bool(re.fullmatch(re.escape(prefix) + "[0-9a-f]{8}",
                                                      actual))
    return [] if ok else [f"{where}: physical name {actual!r}, expected "
                          f"{prefix}{label or '<random>'}"]


def _row(row: models.StackResource) -> str:
    return (f"{row.name}#{row.id} {row.type} {row.action} {row.status} "
            f"engine={row.engine_id and row.engine_id[-6:]} pid={row.physical_id}")
