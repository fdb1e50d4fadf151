"""sharectl stack event list (``--follow``), stack event show, stack failures
list: what happened to a stack and its resources, as Heat's (doc/convergence.rst,
"Events")."""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.stack_input import lookup
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.db import models

# --follow reads the stack's head and its new events this often: two indexed
# reads, so a new event shows within a quarter of a second.
FOLLOW_POLL = 0.25

COLUMNS = ("id", "resource_name", "physical_id", "resource_id", "action", "status", "reason",
           "traversal", "time")


def _row(event: models.StackEvent) -> tuple[object, ...]:
    return (event.id, event.resource_name, event.physical_id, event.resource_id, event.action,
            event.status, event.reason, event.traversal_id, base.fmt(event.created_at))


def _line(stack_name: str, event: models.StackEvent) -> str:
    """One event as ``--follow`` prints it (Heat's shape: time, [resource],
    action and status, reason)."""
    when = base.fmt(event.created_at)
    reason = f"  {event.reason}" if event.reason else ""
    return (f"{when}Z #{event.id} [{event.resource_name or stack_name}]: "
            f"{event.action} {event.status}{reason}\n")


class StackEventList(base.OnStack, base.Lister):
    """List a stack's events, oldest first; with --follow, keep printing new
    ones until the stack's action ends (or Ctrl-C)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--resource", metavar="RESOURCE",
                            help="only the events of this resource (by name)")
        parser.add_argument("--follow", action="store_true",
                            help="print events as lines as they happen, until the stack "
                            "is no longer IN_PROGRESS (Ctrl-C stops, exit 0)")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import stack_events

        stack = lookup(self.app, parsed_args.name)
        if parsed_args.follow:
            # Ctrl-C sets a flag the loop reads between reads: raised as
            # KeyboardInterrupt inside a database call, it could leave the
            # connection pool's lock held, and the exit's dispose waited on
            # it for ever (a --follow that never ended under load). A second
            # Ctrl-C interrupts at once (a database that does not answer).
            stopped: list[int] = []

            def on_interrupt(signum: int, _frame: object) -> None:
                stopped.append(signum)
                signal.signal(signal.SIGINT, previous or signal.default_int_handler)

            previous = signal.signal(signal.SIGINT, on_interrupt)
            try:
                self._follow(stack, parsed_args.resource, stopped)
            finally:
                signal.signal(signal.SIGINT, previous or signal.default_int_handler)
                self.app.stdout.flush()
            return COLUMNS, []
        rows = stack_events.events(self.app.context.db, stack.id, parsed_args.resource)
        if not rows and parsed_args.resource is not None:
            from sharemgr.db import stacks

            names = {r.name for r in stacks.resource_list(self.app.context.db, stack.id)}
            if parsed_args.resource not in names:  # a typo, not a quiet resource (as Heat)
                raise base.UserError(f"stack {stack.name} has no resource "
                                     f"{parsed_args.resource!r}")
        return COLUMNS, [_row(e) for e in rows]

    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Iterable[Sequence[object]]) -> int:
        if parsed_args.follow:  # printed as it came
            return 0
        return super().produce_output(parsed_args, column_names, data)

    def _follow(self, stack: models.Stack, resource: str | None, stopped: list[int]) -> None:
        """Print the events as they come: read the head, then the events
        after the last printed; a head read terminal before them means its
        final event (written with it) is among them, and the loop ends."""
        from sharemgr.db import stack_events, stack_work

        db, out, last = self.app.context.db, self.app.stdout, 0
        while not stopped:
            head = stack_work.stack_head(db, stack.id, include_deleted=True)
            for event in stack_events.events(db, stack.id, resource, after=last):
                out.write(_line(stack.name, event))
                last = event.id
            out.flush()
            if head is None or head.deleted_at is not None:
                # A completed DELETE takes the stack's events with it.
                out.write(f"stack {stack.name}: DELETE COMPLETE (deleted, with its events)\n")
                return
            if head.status != vocab.STACK_IN_PROGRESS:
                return
            time.sleep(FOLLOW_POLL)  # a signal's handler runs in it; the loop then ends


class StackEventShow(base.OnStack, base.ShowOne):
    """Show one event of a stack."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("event", metavar="EVENT_ID", help="event id (from 'event list')")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import stack_events

        stack = lookup(self.app, parsed_args.name)
        try:
            event_id = int(parsed_args.event)
        except ValueError:
            raise base.UserError(f"not an event id: {parsed_args.event!r}")
        event = stack_events.event_get(self.app.context.db, stack.id, event_id)
        if event is None:
            raise base.UserError(f"stack {stack.name} has no event {event_id} (older events "
                                 "beyond max_events_per_stack are deleted)")
        return COLUMNS, _row(event)


class StackFailuresList(base.OnStack, base.Lister):
    """List a stack's failed resources with their reasons (Heat's stack
    failures list)."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import stack_events

        stack = lookup(self.app, parsed_args.name)
        cols = ("resource_name", "type", "physical_id", "resource_id", "action", "status",
                "reason")
        rows = stack_events.failures(self.app.context.db, stack.id)
        return cols, [(r.name, r.type, r.physical_id, r.id, r.action, r.status, r.status_reason)
                      for r in rows]


COMMANDS: dict[str, type] = {
    "stack event list": StackEventList,
    "stack event show": StackEventShow,
    "stack failures list": StackFailuresList,
}
