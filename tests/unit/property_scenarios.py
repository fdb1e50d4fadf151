"""The scenarios of the convergence property test
(test_convergence_properties.py): hypothesis strategies of templates and
steps (user actions, checks run, engines started, killed and crashed at a
transaction boundary), and the model of what the stack must come to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import strategies as st
from sharemgr.common.vocab import STACK_COMPLETE as COMPLETE
from sharemgr.db import models, stacks

from tests.unit.property_rig import (
    PropertyRig,
)

STACK = "web"
NAMES = "abcdef"
FAILING = "b"  # the resource whose creates fail, when a scenario injects a failure
# Scenarios ----------------------------------------------------------------------------


@st.composite
def templates(draw: st.DrawFn) -> dict:
    """A valid template of 1-6 resources; references only point backwards,
    so there is no cycle. A share made from a snapshot is 4 GiB, every other
    share 1-3 GiB, so it is never smaller than its snapshot."""
    count = draw(st.integers(1, 6))
    names = sorted(draw(st.sets(st.sampled_from(NAMES), min_size=count, max_size=count)))
    out: dict[str, dict] = {}
    for name in names:
        shares = [n for n, r in out.items() if r["type"] == "share"]
        snaps = [n for n, r in out.items() if r["type"] == "snapshot"]
        kind = draw(st.sampled_from(["share", "snapshot", "replica"] if shares else ["share"]))
        props: dict[str, object]
        if kind == "share":
            source = draw(st.sampled_from([None, *snaps])) if snaps else None
            props = {"size": 4 if source else draw(st.integers(1, 3)),
                     "proto": draw(st.sampled_from(["NFS", "CIFS"]))}
            if source:
                props["snapshot"] = {"get_resource": source}
        else:
            props = {"share": {"get_resource": draw(st.sampled_from(shares))}}
        if kind != "replica":
            label = draw(st.sampled_from([None, "x", "y"]))
            if label:
                props["name"] = label
        res: dict[str, object] = {"type": kind, "properties": props}
        earlier = [n for n in out]
        if earlier:
            deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2))
            if deps:
                res["depends_on"] = sorted(deps)
        out[name] = res
    return {"resources": out}


@dataclass(frozen=True)
class Act:
    """A user's action: update to template #t (create it if there is no
    stack), delete, or rollback."""

    kind: str
    t: int = 0


@dataclass(frozen=True)
class Run:
    """Claim pending check #pick on live engine #engine and let it pass
    ``stop`` transaction boundaries (None: to its end); with ``crash`` the
    engine dies at the next boundary instead of waiting there."""

    pick: int = 0
    engine: int = 0
    stop: int | None = None
    crash: bool = False


@dataclass(frozen=True)
class Go:
    """Let waiting task #pick go on (same ``stop``/``crash`` as Run)."""

    pick: int = 0
    stop: int | None = None
    crash: bool = False


@dataclass(frozen=True)
class Watchdog:
    """Live engine #engine runs its watchdog once (stop/crash as Run)."""

    engine: int = 0
    stop: int | None = None
    crash: bool = False


@dataclass(frozen=True)
class Reconcile:
    """Live engine #engine runs a reconciliation pass on its host."""

    engine: int = 0


@dataclass(frozen=True)
class Start:
    """A new engine starts (reconciliation pass, then its watchdog)."""


@dataclass(frozen=True)
class Kill:
    """Live engine #engine dies now, whatever its tasks are doing."""

    engine: int = 0


_stop = st.one_of(st.none(), st.integers(0, 30))
_run = st.builds(Run, st.integers(0, 6), st.integers(0, 2), _stop, st.booleans())
_act = st.builds(Act, st.sampled_from(["update", "rollback", "update", "delete"]),
                 st.integers(0, 2))
# Repeated branches weigh: mostly checks, often user actions.
steps = st.one_of(
    _run, _run, _run, _act, _act,
    st.builds(Go, st.integers(0, 3), _stop, st.booleans()),
    st.builds(Watchdog, st.integers(0, 2), _stop, st.booleans()),
    st.builds(Reconcile, st.integers(0, 2)),
    st.just(Start()),
    st.builds(Kill, st.integers(0, 2)),
)


# One step of a scenario.
Step = Act | Run | Go | Watchdog | Reconcile | Start | Kill


@dataclass(frozen=True)
class Scenario:
    templates: tuple[dict, ...]
    steps: tuple[Step, ...]
    fail: bool = False  # creates of resource FAILING fail on the backend
    disable_rollback: bool = False

    def __repr__(self) -> str:
        lines = ["Scenario("]
        for i, t in enumerate(self.templates):
            lines.append(f"  T{i} = {_compact(t)}")
        lines.append(f"  fail={self.fail}, disable_rollback={self.disable_rollback}")
        lines.append("  steps: create T0, " + ", ".join(map(_short, self.steps)))
        return "\n".join(lines) + ")"


def _compact(template: dict) -> str:
    return yaml.safe_dump(template["resources"], default_flow_style=True,
                          width=10_000).strip()


def _short(step: Step) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in vars(step).items())
    return f"{type(step).__name__}({args})"


scenarios = st.builds(
    Scenario,
    st.lists(templates(), min_size=1, max_size=3).map(tuple),
    # At least 5: hypothesis draws lists of the minimum size half of the time.
    st.lists(steps, min_size=5, max_size=18).map(tuple),
    st.booleans(),
    st.booleans(),
)

# The model -----------------------------------------------------------------------------

EMPTY: dict = {"resources": {}}
GONE = "deleted"


def failing(template: dict | None) -> bool:
    res = (template or EMPTY)["resources"].get(FAILING)
    return res is not None and res["type"] in ("share", "snapshot")


@dataclass
class Model:
    """What the user did and what the stack must come to."""

    fail: bool
    targets: dict[str | None, Any] = field(default_factory=dict)  # traversal -> template
    last_completed: dict | None = None  # None: no traversal of this stack completed
    last: tuple[str, Any] | None = None  # last accepted action and its target
    log: list[str] = field(default_factory=list)

    def rollback_target(self) -> dict:
        return self.last_completed if self.last_completed is not None else EMPTY

    def observe(self, rig: PropertyRig) -> models.Stack | None:
        """Learn which traversals completed; a traversal this model did not
        start is the rollback the engine started after a failure."""
        stack = stacks.stack_get_by_name(rig.db, STACK)
        if stack is None:
            return None
        if stack.current_traversal not in self.targets:
            self.targets[stack.current_traversal] = self.rollback_target()
            self.log.append(f"engine started traversal {(stack.current_traversal or '')[:8]} "
                            f"({stack.action} {stack.status})")
        if stack.status == COMPLETE:
            self.last_completed = self.targets[stack.current_traversal]
        return stack
