"""sharectl stack commands: create, update, delete, rollback, converge (each
with ``--wait``), cancel, check, show, list, resource list, graph."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.stack_input import load_template, lookup, template_args
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.convergence.prepare import Traversal
    from sharemgr.convergence.template import Template
    from sharemgr.db import models

# --wait reads the stack's head this often: a read-only primary-key read, so
# the end of a traversal is seen within a tenth of a second.
POLL = 0.1


def show(app: SharectlApp, stack: models.Stack, template: Template | None = None
          ) -> base.Shown:
    from sharemgr.convergence import actions

    row = actions.show(app.context.db, stack, template)
    return tuple(row), tuple(base.fmt(v) for v in row.values())


def wait_for_stack(app: SharectlApp, stack_id: str, traversal: str,
                   timeout: float | None) -> tuple[models.Stack, bool]:
    """Poll until the traversal (or the rollback that replaced it) ends; show
    progress on a terminal. Returns (stack row, rolled back). ``timeout``
    None: until it ends (every traversal ends: the watchdog and the stack's
    timeout see to it)."""
    from sharemgr.convergence import actions
    from sharemgr.db import stack_work, stacks

    db = app.context.db
    tty = sys.stderr.isatty()
    # Without a terminal to show progress on, the stack is polled without
    # its graph (a 1,000-resource graph decoded three times a second).
    read = stacks.stack_get if tty else stack_work.stack_head
    start = time.monotonic()
    rolled_back = False
    try:
        while True:
            stack = read(db, stack_id, include_deleted=True)
            if stack is None:
                raise base.OperationFailed(f"stack {stack_id} is gone")
            if stack.current_traversal != traversal:
                if stack.action != vocab.STACK_ROLLBACK:
                    raise base.OperationFailed(
                        f"stack {stack.name}: superseded by a {stack.action} "
                        f"(traversal {stack.current_traversal})")
                traversal, rolled_back = stack.current_traversal or "", True
            if tty:
                sys.stderr.write(f"\rstack {stack.name}: {stack.action} {stack.status} "
                                 f"{actions.progress(db, stack)} resources "
                                 f"({time.monotonic() - start:.1f}s)\033[K")
                sys.stderr.flush()
            if stack.status != vocab.STACK_IN_PROGRESS:
                # The whole row (the head read without a terminal lacks the graph).
                ended = stacks.stack_get(db, stack_id, include_deleted=True)
                if ended is None:
                    raise base.OperationFailed(f"stack {stack_id} is gone")
                return ended, rolled_back
            if timeout is not None and time.monotonic() - start > timeout:
                raise base.OperationFailed(
                    f"stack {stack.name} still {stack.action} {stack.status} after "
                    f"{timeout:.0f}s")
            time.sleep(POLL)
    finally:
        if tty:
            sys.stderr.write("\n")


class _Start(base.OnStack, base.ShowOne):
    """Start a traversal; with --wait, block until it ends."""

    action = ""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)  # NAME, then add_arguments
        parser.add_argument("--wait", action="store_true",
                            help="block until the traversal (or its rollback) ends; exit 1 "
                            "unless it completed")
        parser.add_argument("--wait-timeout", type=base.seconds, default=None, metavar="SECONDS",
                            help="with --wait: give up after this long (default: until the "
                            "traversal ends)")
        return parser

    def begin(self, args: argparse.Namespace) -> Traversal:
        from sharemgr.convergence import actions

        return actions.start(self.app.context.db, args.name, self.action,
                             self.template(args))

    def template(self, args: argparse.Namespace) -> Template | None:
        return None

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence.prepare import TraversalLost
        from sharemgr.db import stacks

        try:
            tr = self.begin(parsed_args)
        except TraversalLost as exc:
            raise base.OperationFailed(f"{exc}; nothing was changed, try again")
        db = self.app.context.db
        if not parsed_args.wait:
            started = stacks.stack_get(db, tr.stack_id, include_deleted=True)
            if started is None:
                raise base.OperationFailed(f"stack {tr.stack_id} is gone")
            return show(self.app, started)
        stack, rolled_back = wait_for_stack(self.app, tr.stack_id, tr.traversal_id,
                                            parsed_args.wait_timeout)
        # The template this traversal stored, when it is still the stack's.
        result = show(self.app, stack,
                       tr.template if stack.template_id == tr.template_id else None)
        if stack.status != vocab.STACK_COMPLETE or rolled_back:
            self.produce_output(parsed_args, *result)
            raise base.OperationFailed(
                f"stack {stack.name} {stack.action} {stack.status}: {stack.status_reason}")
        if stack.action == vocab.STACK_DELETE:
            self.app.stderr.write(f"stack {stack.name} deleted\n")
        return result


def _preview(app: SharectlApp, template: Template, stack: models.Stack | None,
             previous: Template | None = None) -> base.Shown:
    """The dry run's answer: resource -> its change (and why); ``previous``:
    the stack's stored template, if read already."""
    from sharemgr.convergence import actions, preview

    rows = {} if stack is None else actions.current_rows(app.context.db, stack, previous)
    result = preview.preview(app.context.db, template, rows)
    cols, vals = [], []
    for c in result.changes:
        cols.append(c.name)
        text = c.change + (f" ({', '.join(c.properties)})" if c.properties else "")
        vals.append(text + (f": {c.reason}" if c.reason else ""))
    return tuple(cols), tuple(vals)


class _TemplateStart(_Start):
    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        if parsed_args.dry_run:
            return self.dry_run(parsed_args)
        return super().take_action(parsed_args)

    def dry_run(self, args: argparse.Namespace) -> base.Shown:
        raise NotImplementedError


class StackCreate(_TemplateStart):
    """Create a stack from a template."""

    action = vocab.STACK_CREATE

    def dry_run(self, args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence.template import TemplateError, check_stack_name

        try:
            check_stack_name(args.name)
        except TemplateError as exc:
            raise base.UserError(str(exc))
        return _preview(self.app, load_template(self.app, args.template, args), None)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        template_args(parser)
        parser.add_argument("--disable-rollback", action="store_true",
                            help="on failure leave the stack FAILED instead of rolling back")

    def begin(self, args: argparse.Namespace) -> Traversal:
        from sharemgr.convergence import actions

        template = load_template(self.app, args.template, args)
        timeout = actions.timeout_for(template, args.timeout,
                                      self.app.context.conf.stack_timeout_minutes)
        return actions.create(self.app.context.db, args.name, template, args.disable_rollback,
                              timeout)


class StackUpdate(_TemplateStart):
    """Update a stack to a new template. An update that would replace a
    share (a new, empty one) is refused unless --allow-replace is given."""

    action = vocab.STACK_UPDATE

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        template_args(parser)
        parser.add_argument("--allow-replace", action="store_true",
                            help="go on even if the update replaces shares (the data on "
                            "the old shares is not carried over)")

    def _new(self, args: argparse.Namespace) -> tuple[models.Stack, Template, Template]:
        """The stack, the new template and the stored one."""
        from sharemgr.convergence import actions

        stack = lookup(self.app, args.name)
        previous = actions.stored_template(self.app.context.db, stack)
        return stack, load_template(self.app, args.template, args, previous), previous

    def dry_run(self, args: argparse.Namespace) -> base.Shown:
        stack, template, previous = self._new(args)
        return _preview(self.app, template, stack, previous)

    def begin(self, args: argparse.Namespace) -> Traversal:
        from sharemgr.convergence import actions, preview

        stack, template, previous = self._new(args)
        timeout = actions.timeout_for(template, args.timeout,
                                      self.app.context.conf.stack_timeout_minutes)
        # The safeguard runs inside the preparation (preview.refuse_lost_shares).
        guard = (None if args.allow_replace
                 else preview.refuse_lost_shares(self.app.context.db, template, previous,
                                                 stack.template_id))
        try:
            return actions.start(self.app.context.db, stack.id, self.action, template, timeout,
                                 guard)
        except preview.LosesShares as exc:
            raise base.UserError(
                f"stack {stack.name}: the update replaces "
                + "; ".join(f"share {c.name!r} ({', '.join(c.properties) or c.reason})"
                            for c in exc.lost)
                + ": a replaced share's data is lost; pass --allow-replace to go on "
                "(see --dry-run)")


class StackDelete(_Start):
    """Delete a stack and its resources."""

    action = vocab.STACK_DELETE


class StackRollback(_Start):
    """Roll a stack back to the last template that completed."""

    action = vocab.STACK_ROLLBACK


class StackCancel(base.OnStack, base.ShowOne):
    """Cancel a stack's traversal (Heat's cancel-update): stop it and roll
    back, or with --no-rollback leave the stack FAILED. Checks already
    running finish their current step (a driver call is not interrupted)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--no-rollback", action="store_true",
                            help="leave the stack FAILED instead of rolling back")
        parser.add_argument("--wait", action="store_true",
                            help="block until the rollback ends (exit 1 unless it completed)")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence import lifecycle
        from sharemgr.db import stacks

        stack = lookup(self.app, parsed_args.name)
        db = self.app.context.db
        if stack.status != vocab.STACK_IN_PROGRESS:
            raise base.UserError(f"stack {stack.name} is {stack.action} {stack.status}: "
                                 "nothing to cancel")
        if not lifecycle.cancel(db, stack, rollback=not parsed_args.no_rollback):
            raise base.UserError(f"stack {stack.name}: its traversal ended or changed "
                                 "meanwhile; nothing was cancelled")
        found = stacks.stack_get(db, stack.id, include_deleted=True)
        if found is None:
            raise base.OperationFailed(f"stack {parsed_args.name} is gone")
        stack = found
        if parsed_args.wait and stack.status == vocab.STACK_IN_PROGRESS:
            stack, _ = wait_for_stack(self.app, stack.id, stack.current_traversal or "", None)
            if stack.status != vocab.STACK_COMPLETE:
                self.produce_output(parsed_args, *show(self.app, stack))
                raise base.OperationFailed(f"stack {stack.name} {stack.action} "
                                           f"{stack.status}: {stack.status_reason}")
        return show(self.app, stack)


class StackShow(base.OnStack, base.ShowOne):
    """Show a stack, its outputs resolved."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        return show(self.app, lookup(self.app, parsed_args.name))


class StackList(base.Lister):
    """List stacks."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import stacks

        cols = ("id", "name", "action", "status", "created_at", "updated_at")
        rows = stacks.stack_list(self.app.context.db)
        return cols, [tuple(base.fmt(getattr(s, c)) for c in cols) for s in rows]


class StackResourceList(base.OnStack, base.Lister):
    """List a stack's resource rows (a replaced resource has two while the
    replacement is under way)."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.convergence import actions

        stack = lookup(self.app, parsed_args.name)
        rows = actions.resource_rows(self.app.context.db, stack)
        cols = ("id", "name", "type", "physical_id", "action", "status", "status_reason")
        return cols, [tuple(r[c] for c in cols) for r in rows]


class StackGraph(base.OnStack, base.Command):
    """Print the stack's current traversal graph as Graphviz DOT."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.convergence import actions

        stack = lookup(self.app, parsed_args.name)
        self.app.stdout.write(actions.graph_dot(self.app.context.db, stack))
        return 0


def _check(app: SharectlApp, stack: models.Stack, timeout: float) -> models.Stack:
    """Have an engine check the stack (reconcile/stack_check.py); the row after."""
    from sharemgr.cli.reconcile_cmds import wait_request
    from sharemgr.db import api as db_api
    from sharemgr.db import stacks

    if stack.status == vocab.STACK_IN_PROGRESS:
        raise base.UserError(f"stack {stack.name} is {stack.action} {stack.status}: "
                             "check it once the traversal has ended")
    req_id = db_api.add_with_request(app.context.db, [], {
        "resource_type": vocab.STACK, "resource_id": stack.id,
        "action": vocab.ACTION_STACK_CHECK, "host": None, "args": {}})
    assert req_id is not None  # a request was given
    wait_request(app.context, req_id, timeout, "share-manager", "the check")
    checked = stacks.stack_get(app.context.db, stack.id)
    if checked is None:  # deleted meanwhile
        raise base.OperationFailed(f"stack {stack.name} is gone")
    return checked


class StackCheck(base.OnStack, base.ShowOne):
    """Check a stack (Heat's stack check): ask the backend about each of its
    shares; the stack becomes CHECK COMPLETE, or CHECK FAILED naming the
    resources that drifted (exit 1). A missing share is marked error and a
    size or export drift taken from the backend, so that 'stack converge'
    repairs them."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--timeout", type=base.seconds, default=120, metavar="SECONDS",
                            help="how long to wait for a manager to run it (default 120)")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        stack = _check(self.app, lookup(self.app, parsed_args.name), parsed_args.timeout)
        result = show(self.app, stack)
        if stack.status != vocab.STACK_COMPLETE:
            self.produce_output(parsed_args, *result)
            raise base.OperationFailed(
                f"stack {stack.name} {stack.action} {stack.status}: {stack.status_reason}")
        return result


class StackConverge(_Start):
    """Converge a stack to its current template: check it, then an update
    traversal with the template it has, which recreates what is missing and
    resizes what drifted (crash-safe like any update)."""

    action = vocab.STACK_UPDATE

    def begin(self, args: argparse.Namespace) -> Traversal:
        from sharemgr.convergence import actions
        from sharemgr.convergence.template import template_from_dict
        from sharemgr.db import stacks

        stack = _check(self.app, lookup(self.app, args.name), 120)
        stored = None if stack.template_id is None else \
            stacks.template_get(self.app.context.db, stack.template_id)
        if stored is None:
            raise base.UserError(f"stack {stack.name} has no template to converge to")
        return actions.start(self.app.context.db, stack.id, self.action,
                             template_from_dict(stored))


class StackOutputList(base.OnStack, base.Lister):
    """List a stack's outputs, resolved from its resources as they are now."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.convergence import actions

        stack = lookup(self.app, parsed_args.name)
        outputs = actions.outputs(self.app.context.db, stack)
        return ("output_key", "output_value"), [(k, base.fmt(v)) for k, v in outputs.items()]


class StackOutputShow(base.OnStack, base.ShowOne):
    """Show one output of a stack."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("output", metavar="OUTPUT", help="output name")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence import actions

        stack = lookup(self.app, parsed_args.name)
        outputs = actions.outputs(self.app.context.db, stack)
        if parsed_args.output not in outputs:
            raise base.UserError(f"stack {stack.name} has no output {parsed_args.output!r} "
                                 f"(outputs: {', '.join(sorted(outputs)) or 'none'})")
        return ("output_key", "output_value"), (parsed_args.output,
                                                base.fmt(outputs[parsed_args.output]))


COMMANDS: dict[str, type] = {
    "stack create": StackCreate,
    "stack update": StackUpdate,
    "stack delete": StackDelete,
    "stack rollback": StackRollback,
    "stack cancel": StackCancel,
    "stack show": StackShow,
    "stack list": StackList,
    "stack resource list": StackResourceList,
    "stack graph": StackGraph,
    "stack check": StackCheck,
    "stack converge": StackConverge,
    "stack output list": StackOutputList,
    "stack output show": StackOutputShow,
}
