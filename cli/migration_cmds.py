"""sharectl commands of a share's migration, Manila's (doc/migration.rst):
``share migration start|complete|cancel|show``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.resource_cmds import (
    REQUEST_END_WAIT,
    _columns_values,
    _intake,
    add_wait,
    message_text,
    unserved,
)
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp


def _shown(app: SharectlApp, share_id: str) -> dict[str, object]:
    from sharemgr.manager import migration_plans

    return migration_plans.shown(app.context.db, share_id)


def _messages(app: SharectlApp, share_id: str) -> set[str]:
    """The ids of the share's messages now: the ones a --wait does not report."""
    from sharemgr.db import messages as db_messages

    return {m.id for m in db_messages.message_list(app.context.db, share_id)}


def _wait(app: SharectlApp, share_id: str, source_id: str, timeout: float,
          ok: tuple[str, ...], still: tuple[str, ...], seen: set[str]) -> dict[str, object]:
    """Poll the migration until its task_state leaves ``still`` (or, with
    ``still`` empty, the waiting states of a start); exit 1 unless it ends
    in one of ``ok``."""
    from sharemgr.manager import migration_plans

    host = unserved(app, source_id)
    if host is not None:
        sys.stderr.write(f"sharectl: warning: no live share-manager serves {host}: the "
                         "request waits until one starts there (see 'sharectl service "
                         "list')\n")
    deadline = time.monotonic() + timeout
    while True:
        shown = _shown(app, share_id)
        task = shown["task_state"]
        going = task in still if still else migration_plans.waits(task)
        if not going:
            if task not in ok:
                raise base.OperationFailed(f"the migration of share {share_id} ended in "
                                           f"task_state {task}: {_why(app, share_id, seen)}")
            return shown
        if time.monotonic() > deadline:
            raise base.OperationFailed(f"the migration of share {share_id} is still {task} "
                                       f"after {timeout:.0f}s")
        time.sleep(0.2)


def _why(app: SharectlApp, share_id: str, seen: set[str]) -> str:
    """The message the migration's end left about the share (written just
    after its status: waited for a little)."""
    from sharemgr.db import messages as db_messages

    deadline = time.monotonic() + REQUEST_END_WAIT
    while True:
        new = [m for m in db_messages.message_list(app.context.db, share_id)
               if m.id not in seen]
        if new:
            return message_text(new[0])
        if time.monotonic() > deadline:
            return "see 'sharectl message list'"
        time.sleep(0.1)


class _Migration(base.ShowOne):
    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("share", metavar="SHARE_ID")
        self.add_arguments(parser)
        add_wait(parser)
        return parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        pass

    def requested(self, parsed_args: argparse.Namespace, request: Callable[[], object],
                  ok: tuple[str, ...], still: tuple[str, ...] = ()) -> base.Shown:
        """``request`` written, then the migration shown (--wait: once it
        leaves ``still``; exit 1 with the message its end left unless it
        ends in ``ok``)."""
        share = parsed_args.share
        # Before the request: its failure's message may come at once.
        seen = _messages(self.app, share) if parsed_args.wait else set()
        request()
        if parsed_args.wait:
            source = str(_shown(self.app, share)["source_instance_id"])
            return _columns_values(_wait(self.app, share, source, parsed_args.timeout, ok,
                                         still, seen))
        return _columns_values(_shown(self.app, share))


def _flag(parser: argparse.ArgumentParser, name: str, text: str) -> None:
    parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=False,
                        help=f"{text} (default: no)")


class MigrationStart(_Migration):
    """Start moving a share to DEST_HOST (host@backend[#pool]): phase 1, the
    copy; 'share migration complete' switches the share over."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("destination", metavar="DEST_HOST", help="host@backend[#pool]")
        parser.add_argument("--force-host-assisted", action="store_true",
                            help="copy with the engine (rsync, then a checksum comparison), not "
                            "the source backend's driver; both backends on one host")
        _flag(parser, "writable", "clients may write to the share while it moves")
        _flag(parser, "nondisruptive", "clients keep their export throughout")
        _flag(parser, "preserve-snapshots", "the share's snapshots move with it")
        _flag(parser, "preserve-metadata", "modes, owners, times and xattrs are kept")

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.manager import migration_plans
        from sharemgr.manager.migration_plans import Request

        a = parsed_args
        req = Request(a.share, a.destination, a.writable, a.nondisruptive, a.preserve_metadata,
                      a.preserve_snapshots, a.force_host_assisted)
        # --wait: until phase 1 is done (the share is still on its source).
        return self.requested(a, lambda: _intake(self.app).migration_start(req),
                              migration_plans.COPIED)


class MigrationComplete(_Migration):
    """Switch a share whose migration copied its data (task_state
    migration_driver_phase1_done or data_copying_completed) to its
    destination."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        return self.requested(
            parsed_args, lambda: _intake(self.app).migration_complete(parsed_args.share),
            (vocab.MIGRATION_SUCCESS,), (vocab.MIGRATION_COMPLETING,))


class MigrationCancel(_Migration):
    """Stop a share's migration: the destination goes, the share stays."""

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        return self.requested(
            parsed_args, lambda: _intake(self.app).migration_cancel(parsed_args.share),
            (vocab.MIGRATION_CANCELLED,), (vocab.MIGRATION_CANCEL_IN_PROGRESS,))


class MigrationShow(base.ShowOne):
    """A share's newest migration: task_state, progress, source, destination."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("share", metavar="SHARE_ID")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        return _columns_values(_shown(self.app, parsed_args.share))


COMMANDS: dict[str, type] = {
    "share migration start": MigrationStart,
    "share migration complete": MigrationComplete,
    "share migration cancel": MigrationCancel,
    "share migration show": MigrationShow,
}
