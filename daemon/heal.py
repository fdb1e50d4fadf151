"""Self-healing stacks: a stack whose template sets ``converge_interval``
is checked that often by each engine (``sharectl stack check``'s work,
reconcile/stack_check.py); when something drifted, the engine records CHECK
FAILED and starts a converge (an update traversal with the current template,
as ``sharectl stack converge``). A check that finds nothing records nothing,
so ``stack show`` keeps the last real action. Run by the daemon's periodics.
"""

from __future__ import annotations

import time

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import actions
from sharemgr.convergence.prepare import PrepareError
from sharemgr.convergence.template import Template
from sharemgr.db import stacks
from sharemgr.db.stacks import StackNotFound
from sharemgr.reconcile.stack_check import StackChecker

LOG = logging.getLogger(__name__)


class StackHealer:
    def __init__(self, checker: StackChecker) -> None:
        self.checker = checker
        self.db = checker.checker.rec.db
        self._last: dict[str, float] = {}  # stack id → when this engine last checked it

    def run(self) -> None:
        now = time.monotonic()
        for stack in stacks.stack_list(self.db):
            if stack.status == vocab.STACK_IN_PROGRESS or stack.template_id is None or (
                    stack.status != vocab.STACK_COMPLETE and stack.action != vocab.STACK_CHECK):
                continue
            stored = stacks.template_get(self.db, stack.template_id)
            interval = (stored or {}).get("converge_interval")
            if not interval or now - self._last.get(stack.id, -interval) < interval:
                continue
            self._last[stack.id] = now
            try:
                self._heal(stack, Template.from_dict(stored))
            except Exception:  # one stack's trouble must not stop the others'
                LOG.exception("self-healing check of stack %s failed", stack.name)

    def _heal(self, stack: object, template: Template) -> None:
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
