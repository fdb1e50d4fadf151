"""sharectl stack commands that keep physical resources apart from a stack:
abandon, adopt, resource mark-unhealthy (doc/convergence.rst, "Keeping
what matters")."""

from __future__ import annotations

import argparse
import json

from sharemgr.cli import base
from sharemgr.cli.stack_cmds import show
from sharemgr.cli.stack_input import load_template, lookup, read, template_args


class StackAbandon(base.OnStack, base.Command):
    """Delete a stack's records, leaving its physical resources as they are
    (managed, outside any stack); print what 'stack adopt' reads, as JSON.
    Refused while a traversal is in progress."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.convergence import abandon
        from sharemgr.db import stack_keep

        stack = lookup(self.app, parsed_args.name)
        try:
            data = abandon.abandon(self.app.context.db, stack)
        except stack_keep.Refused as exc:
            raise base.UserError(str(exc))
        self.app.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        return 0


class StackAdopt(base.ShowOne):
    """Make a stack over existing physical resources (no driver call): each
    resource of the template takes the physical resource the adopt data
    names, which must exist, be available, belong to no stack and match the
    template's properties."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="the new stack's name")
        template_args(parser)
        parser.add_argument("--adopt-file", required=True, metavar="DATA",
                            help="JSON as 'sharectl stack abandon' prints it")
        parser.add_argument("--disable-rollback", action="store_true",
                            help="on a later failure leave the stack FAILED instead of "
                            "rolling back")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence import abandon, actions
        from sharemgr.convergence.template import Template, TemplateError, check_stack_name
        from sharemgr.db.stacks import StackExists

        args = parsed_args
        try:
            check_stack_name(args.name)
            data = abandon.read_data(read(args.adopt_file, "adopt data"))
        except (TemplateError, abandon.AdoptError) as exc:
            raise base.UserError(f"{args.adopt_file}: {exc}" if isinstance(
                exc, abandon.AdoptError) else str(exc))
        # The values the abandoned stack was given, under -e and -P.
        params = data.get("parameters") or {}
        assert isinstance(params, dict)  # read_data checked it
        given = Template(resources={}, parameter_values=dict(params))
        template = load_template(self.app, args.template, args, given)
        db = self.app.context.db
        timeout = actions.timeout_for(template, args.timeout,
                                      self.app.context.conf.stack_timeout_minutes)
        try:
            if args.dry_run:  # every check, nothing written
                adopted = abandon.plan(db, template, data)
                return (tuple(r.name for r in adopted),
                        tuple(f"adopted ({r.type} {r.physical_id})" for r in adopted))
            stack = abandon.adopt(db, args.name, template, data, args.disable_rollback, timeout)
        except (abandon.AdoptError, StackExists) as exc:
            raise base.UserError(f"cannot adopt stack {args.name}: {exc}")
        return show(self.app, stack)


class StackResourceMarkUnhealthy(base.OnStack, base.ShowOne):
    """Mark a stack's resource unhealthy (CHECK FAILED, Heat's
    mark-unhealthy): the next 'stack update' or 'stack converge' replaces
    it, without --allow-replace. --reset clears the mark."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("resource", metavar="RESOURCE", help="resource name")
        parser.add_argument("--reason", default=None, help="why (shown as its status_reason)")
        parser.add_argument("--reset", action="store_true",
                            help="clear the mark instead (CHECK COMPLETE)")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.convergence import actions
        from sharemgr.db import stack_keep, stacks

        db = self.app.context.db
        stack = lookup(self.app, parsed_args.name)
        row = actions.current_rows(db, stack).get(parsed_args.resource)
        if row is None or row.physical_id is None:
            raise base.UserError(f"stack {stack.name} has no resource {parsed_args.resource!r} "
                                 "with a physical resource")
        try:
            stack_keep.resource_mark_unhealthy(db, stack.id, row.id, parsed_args.reason,
                                               reset=parsed_args.reset)
        except stack_keep.Refused as exc:
            raise base.UserError(str(exc))
        marked = stacks.resource_get(db, row.id)
        if marked is None:
            raise base.OperationFailed(f"resource {row.id} is gone")
        cols = ("id", "name", "type", "physical_id", "action", "status", "status_reason")
        return cols, tuple(base.fmt(getattr(marked, c)) for c in cols)


COMMANDS: dict[str, type] = {
    "stack abandon": StackAbandon,
    "stack adopt": StackAdopt,
    "stack resource mark-unhealthy": StackResourceMarkUnhealthy,
}
