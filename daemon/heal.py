"""Self-healing stacks: a stack whose template sets ``converge_interval``
is checked that often by each engine (``sharectl stack check``'s work,
reconcile/stack_check.py); when something drifted, the engine records CHECK
FAILED and starts a converge (an update traversal with the current template,
as ``sharectl stack converge``). A check that finds nothing records nothing,
so ``stack show`` keeps the last real action. Run by the daemon's periodics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import actions
from sharemgr.convergence.prepare import PrepareError
from sharemgr.convergence.template import Template, template_from_dict
from sharemgr.db import models, stack_work, stacks
from sharemgr.db.stacks import StackNotFound
from sharemgr.manager.outage import Backoff, backing_off, is_outage
from sharemgr.reconcile.stack_check import StackChecker

LOG = logging.getLogger(__name__)


class StackHealer:
    def __init__(self, checker: StackChecker) -> None:
        self.checker = checker
        self.db = checker.checker.rec.db
        self._last: dict[str, float] = {}  # stack id → when this engine last checked it
        # template id → its converge_interval (stored templates never change)
        self._intervals: dict[int, int | None] = {}
        self._queued = threading.Event()
        # A round runs on the pass runner's worker, outside the periodic
        # task's own back-off: an outage met there is reported here (one
        # WARNING for the process, no traceback) and rounds pause meanwhile.
        self.outage = Backoff("stack self-healing", 1.0, 30.0)

    def tick(self, submit: Callable[[Callable[[], None], str], None]) -> None:
        """A periodic tick: hand a round of checks to ``submit`` (the pass
        runner's worker: driver calls stay out of the periodics' thread,
        where they would hold up the heartbeat), one round at a time."""
        if self._queued.is_set() or time.monotonic() < self.outage.retry_at:
            return
        self._queued.set()
        submit(self._round, "stack self-healing")

    def _round(self) -> None:
        try:
            backing_off(self.outage, self.run)
        finally:
            self._queued.clear()

    def run(self) -> None:
        now = time.monotonic()
        for stack in stack_work.stack_heads(self.db):
            if stack.status == vocab.STACK_IN_PROGRESS or stack.template_id is None or (
                    stack.status != vocab.STACK_COMPLETE and stack.action != vocab.STACK_CHECK):
                continue
            if stack.template_id not in self._intervals:
                stored = stacks.template_get(self.db, stack.template_id) or {}
                value = stored.get("converge_interval")  # validated: a number or absent
                self._intervals[stack.template_id] = value if isinstance(value, int) else None
            interval = self._intervals[stack.template_id]
            if not interval or now - self._last.get(stack.id, -interval) < interval:
                continue
            self._last[stack.id] = now
            try:
                current = stacks.template_get(self.db, stack.template_id)
                if current is None:  # purged with a traversal that ended meanwhile
                    continue
                self._heal(stack, template_from_dict(current))
            except Exception as exc:  # one stack's trouble must not stop the others'
                if is_outage(exc):
                    raise  # not the stack's: the round stops and backs off
                LOG.exception("self-healing check of stack %s failed", stack.name)

    def _heal(self, stack: models.Stack, template: Template) -> None:
        drifted, _unchecked = self.checker.check(stack)
        if not drifted:
            return
        what = "; ".join(f"{n} ({w})" for n, w in sorted(drifted.items()))
        if not stacks.stack_mark_checked(self.db, stack.id, stack.current_traversal,
                                         vocab.STACK_FAILED, f"drifted: {what}"):
            return  # it moved on meanwhile (an update, another engine's heal)
        LOG.warning("stack %s drifted (%s): converging to its template", stack.name, what)
        try:
            actions.start(self.db, stack.id, vocab.STACK_UPDATE, template)
        except (PrepareError, StackNotFound) as exc:
            LOG.info("stack %s: no converge: %s", stack.name, exc)
