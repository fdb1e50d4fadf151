"""A reconciliation pass's summary: what it settled, skipped and failed, as
its record, its log line and its metrics say."""

from __future__ import annotations

import collections
import threading
from typing import Required, TypedDict

from sharemgr.common import metrics
from sharemgr.db import models


class PlanItem(TypedDict, total=False):
    """What a dry run would do to one resource, as its record lists it."""

    type: Required[str]
    id: Required[str]
    status: Required[str]
    action: Required[str]  # "skip", or the rule's action and method
    reason: str  # why it is skipped
    outcome: str  # the statuses it would settle to
    stuck: str  # its request is taken over (its lease expired)


class Summary:
    """Counts per type and outcome, skips and why, duration; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter)
        self.skipped: collections.Counter[str] = collections.Counter()
        self.abandoned = 0
        self.failures = 0
        self.plan: list[PlanItem] = []
        # Resources whose request this pass took over because its lease had
        # expired (stuck): their operation's thread may still hold the lock.
        self.stuck: set[str] = set()
        # Requests of engines that left the group, by resource: abandoned by
        # the step that takes the resource's lock (takeover.locked). The
        # departed engine's lock may outlive its membership a moment.
        self.dead: dict[str, models.Request] = {}
        # Resources some step of the pass read the requests of.
        self.seen: set[str] = set()
        # The first interruption met on some resource (an outage of the
        # database or coordination, a driver call this engine may not make
        # now: reconciler.interrupts): the pass goes on with the others, then
        # ends interrupted, and the runner runs it again (a failure would leave the
        # resource in its transient status until the next restart).
        self.interrupted: BaseException | None = None

    def outcome(self, rtype: str, status: str) -> None:
        with self._lock:
            self.outcomes[rtype][status] += 1

    def departed(self, req: models.Request) -> None:
        with self._lock:
            self.dead[req.resource_id] = req

    def take_departed(self, ident: str) -> models.Request | None:
        """The departed engine's request on resource ``ident``, no longer
        waiting for its lock."""
        with self._lock:
            return self.dead.pop(ident, None)

    def count_abandoned(self) -> None:
        with self._lock:
            self.abandoned += 1

    def skip(self, reason: str) -> None:
        with self._lock:
            self.skipped[reason] += 1

    def failed(self) -> None:
        with self._lock:
            self.failures += 1

    def interrupt(self, exc: BaseException) -> None:
        with self._lock:
            if self.interrupted is None:
                self.interrupted = exc

    def planned(self, item: PlanItem) -> None:
        with self._lock:
            self.plan.append(item)

    def as_dict(self, duration: float) -> dict[str, object]:
        return {
            "outcomes": {t: dict(c) for t, c in self.outcomes.items()},
            "skipped": dict(self.skipped),
            "abandoned_requests": self.abandoned,
            "stuck_requests": len(self.stuck),
            "failures": self.failures,
            "duration_seconds": round(duration, 3),
            "plan": self.plan,
        }

    def line(self, duration: float, dry_run: bool = False) -> str:
        if dry_run:
            planned = collections.Counter(p["action"].split()[0] for p in self.plan)
            return ("would act on " + (", ".join(f"{a}={n}" for a, n in sorted(planned.items()))
                    or "nothing") + f"; {duration:.2f}s (dry run: nothing changed)")
        acted = ", ".join(
            f"{t}: " + " ".join(f"{s}={n}" for s, n in sorted(c.items()))
            for t, c in sorted(self.outcomes.items())
        ) or "nothing to settle"
        skipped = ", ".join(f"{r}={n}" for r, n in sorted(self.skipped.items())) or "none"
        return (f"{acted}; skipped: {skipped}; abandoned requests: {self.abandoned}; "
                f"stuck requests: {len(self.stuck)}; failures: {self.failures}; "
                f"{duration:.2f}s")


def observe_pass(trigger: str, result: str, summary: Summary, duration: float) -> None:
    """The pass into the metrics: its duration, and what it settled (a dry
    run settles nothing)."""
    metrics.RECONCILE_PASS_SECONDS.labels(metrics.trigger_kind(trigger), result).observe(duration)
    for rtype, counts in summary.outcomes.items():
        for status, n in counts.items():
            metrics.RECONCILE_OUTCOMES.labels(rtype, status).inc(n)
