"""sharectl resource commands: create/list/show/delete, resize, reset-state,
backup restore, request list; ``--wait`` for a terminal status."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.nouns import NOUNS, Noun
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.db import models
    from sharemgr.manager.intake import Intake

# Seconds a refused resize waits for its request's end (and message).
REQUEST_END_WAIT = 10.0

# A refusal from the intake (plans.Refused) ends the command with exit 2
# (cli/base.py); the intake and the database modules are imported when a
# command runs, not when 'sharectl --help' lists it.


def _intake(app: SharectlApp) -> Intake:
    from sharemgr.manager.intake import Intake

    return Intake(app.context.db, app.context.conf)


def _columns_values(row: Mapping[str, object]) -> tuple[tuple[str, ...], tuple[object, ...]]:
    return tuple(row), tuple(base.fmt(v) for v in row.values())


def unserved(app: SharectlApp, ident: str) -> str | None:
    """The 'host@backend' of the resource's open request when no live
    engine of that host is there to carry it out, else None."""
    from sharemgr.db import api as db_api

    open_ = [r for r in db_api.request_list(app.context.db, resource_id=ident, limit=5)
             if r.status in vocab.REQUEST_OPEN and r.host]
    if not open_:
        return None
    host = open_[0].host
    assert host is not None  # chosen for it above
    try:
        engines = app.context.coordinator.engines()
    except Exception as exc:
        # The request is in the database: the wait follows it there alone.
        # Failing now would tell the user it was not accepted, and a retry
        # would make a second one.
        lines = str(exc).strip().splitlines()
        sys.stderr.write(f"sharectl: warning: cannot tell which engines are alive "
                         f"({lines[0] if lines else type(exc).__name__}); request accepted, "
                         f"following it through the database\n")
        return None
    # Engine ids are '<host>.<uuid4>' (daemon/service.py).
    alive = {e.rsplit(".", 1)[0] for e in engines}
    return None if host.partition("@")[0] in alive else host


def warn_unserved(app: SharectlApp, ident: str) -> None:
    """Say at once when no live engine serves the resource's open request
    (it waits on: one may be started)."""
    host = unserved(app, ident)
    if host is not None:
        sys.stderr.write(f"sharectl: warning: no live share-manager serves {host}: the "
                         "request waits until one starts there (see 'sharectl service "
                         "list')\n")


def wait_for(app: SharectlApp, kind: Noun, ident: str, timeout: float,
             deleting: bool = False) -> str:
    """Poll until the resource leaves its transient status; show progress on a
    terminal. Returns the final status. Says at once when no live engine
    serves the request (it waits on: one may be started)."""
    db = app.context.db
    tty = sys.stderr.isatty()
    start = time.monotonic()
    last = None
    warn_unserved(app, ident)
    while True:
        status = kind.status(db, ident)
        if status != last and tty:
            sys.stderr.write(f"\r{kind.noun} {ident}: {status} "
                             f"({time.monotonic() - start:.1f}s)\033[K")
            sys.stderr.flush()
        last = status
        if status not in vocab.TRANSIENT_STATUSES and not (deleting and status == vocab.DELETING):
            break
        if time.monotonic() - start > timeout:
            if tty:
                sys.stderr.write("\n")
            raise base.OperationFailed(
                f"{kind.noun} {ident} still {status} after {timeout:.0f}s"
            )
        time.sleep(0.2)
    if tty:
        sys.stderr.write("\n")
    return status


def _finish(app: SharectlApp, kind: Noun, ident: str, status: str, ok: tuple[str, ...]) -> None:
    if status not in ok:
        raise base.OperationFailed(f"{kind.noun} {ident} ended in status {status}")


def add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true",
                        help="block until a terminal status; exit 1 if it is an error")
    parser.add_argument("--timeout", type=base.seconds, default=600, metavar="SECONDS",
                        help="with --wait: give up after this long (default 600)")


def add_host(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="the engine host that serves it (default: this "
                        "machine's [DEFAULT] host)")


integer = base.whole()


# Generic commands, one class per kind made by ``commands_for``. ----------------


class ResourceList(base.Lister):
    kind: Noun

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        rows = self.kind.rows(self.app.context.db)
        cols = self.kind.columns
        return cols, [tuple(base.fmt(r[c]) for c in cols) for r in rows]


class ResourceShow(base.ShowOne):
    kind: Noun

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help=f"{self.kind.noun} id")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        return _columns_values(self.kind.show(self.app.context.db, parsed_args.id))


class ResourceDelete(base.Command):
    kind: Noun

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help=f"{self.kind.noun} id")
        parser.add_argument(
            "--force", action="store_true",
            help="(admin) delete from any status and remove the record even when the "
                 "driver cannot delete it (the driver is still tried once; what it "
                 "leaves on the backend is logged by share-manager)")
        add_wait(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        delete = self.kind.delete
        assert delete is not None  # the command exists only for nouns with a delete
        intake = _intake(self.app)
        delete(intake, parsed_args.id, parsed_args.force)
        if intake.done_at_once:
            # Its create had not begun: deleted at once (manager/delete_plans.py).
            self.app.stdout.write(f"{self.kind.noun} {parsed_args.id} deleted (no engine had "
                                  "begun its create: no driver was called)\n")
        elif parsed_args.wait:
            status = wait_for(self.app, self.kind, parsed_args.id, parsed_args.timeout,
                              deleting=True)
            _finish(self.app, self.kind, parsed_args.id, status, (vocab.DELETED,))
            self.app.stdout.write(f"{self.kind.noun} {parsed_args.id} deleted\n")
        else:
            self.app.stdout.write(f"{self.kind.noun} {parsed_args.id}: delete requested\n")
        return 0


class ResourceResetState(base.Command):
    """Set a resource's status (admin): any valid status of its type."""

    kind: Noun

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help=f"{self.kind.noun} id")
        parser.add_argument("--state", required=True, metavar="STATUS",
                            help="one of: " + ", ".join(vocab.VALID_STATUSES[self.kind.rtype]))
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        _intake(self.app).reset_state(self.kind.rtype, parsed_args.id, parsed_args.state)
        self.app.stdout.write(f"{self.kind.noun} {parsed_args.id}: {parsed_args.state}\n")
        return 0


class _Create(base.ShowOne):
    """A create command: subclasses add arguments and call the intake."""

    kind: Noun

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        self.add_arguments(parser)
        add_wait(parser)
        return parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        pass

    def submit(self, intake: Intake, args: argparse.Namespace) -> str:
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        ident = self.submit(_intake(self.app), parsed_args)
        return self.show_after(ident, parsed_args, self.kind.ok_statuses)

    def show_after(self, ident: str, parsed_args: argparse.Namespace, ok: tuple[str, ...]
                   ) -> base.Shown:
        status = None
        if parsed_args.wait:
            status = wait_for(self.app, self.kind, ident, parsed_args.timeout)
        elif getattr(parsed_args, "host", None):
            # Another engine's host, named by hand: a typo's request would
            # wait for ever, its resource transient (the warning --wait gives).
            warn_unserved(self.app, ident)
        result = _columns_values(self.kind.show(self.app.context.db, ident))
        if status is not None and status not in ok:
            # Show the row, then exit 1.
            self.produce_output(parsed_args, *result)
            raise base.OperationFailed(f"{self.kind.noun} {ident} ended in status {status}")
        return result


class ShareCreate(_Create):
    """Create a share: SIZE in GiB."""

    kind = NOUNS["share"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("size", type=integer,
                            help=f"size in GiB, 1 to {vocab.MAX_SHARE_SIZE_GB}")
        parser.add_argument("--proto", required=True, help="NFS, CIFS, CEPHFS, ...")
        parser.add_argument("--name")
        parser.add_argument("--backend", help="backend (config group); default: the first")
        add_host(parser)
        parser.add_argument("--share-server", metavar="ID",
                            help="share server (backends that handle share servers)")
        parser.add_argument("--snapshot", metavar="ID", help="create from this snapshot")
        parser.add_argument("--share-group", metavar="ID", help="member of this group")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_share(a.size, a.proto, a.name, a.backend, a.share_server,
                                   a.snapshot, a.share_group, host=a.host).id


class _Resize(_Create):
    extend = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", help="share id")
        parser.add_argument("new_size", type=integer,
                            help=f"new size in GiB, at most {vocab.MAX_SHARE_SIZE_GB}")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.resize_share(a.id, a.new_size, extend=self.extend).id

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        shown = super().take_action(parsed_args)
        cols, vals = shown
        if parsed_args.wait and vals[cols.index("size")] != parsed_args.new_size:
            # Available at its old size: the backend refused and nothing
            # changed (a shrink that would lose data); its message says why.
            self.produce_output(parsed_args, *shown)
            why = _last_message(self.app, parsed_args.id)
            raise base.OperationFailed(f"share {parsed_args.id} was not resized to "
                                       f"{parsed_args.new_size}: {why}")
        return shown


def _last_message(app: SharectlApp, share_id: str) -> str:
    from sharemgr.db import api as db_api
    from sharemgr.db import messages as db_messages

    db = app.context.db
    # The share is available again in the outcome's transaction; the
    # request's end and its message are written just after: wait for them.
    deadline = time.monotonic() + REQUEST_END_WAIT
    while time.monotonic() < deadline:
        newest = db_api.request_list(db, resource_id=share_id, limit=1)
        if not newest or newest[0].status not in vocab.REQUEST_OPEN:
            break
        time.sleep(0.1)
    found = db_messages.message_list(db, share_id, limit=1)
    if not found:
        return "see 'sharectl message list'"
    return message_text(found[0])


def message_text(msg: models.Message) -> str:
    """A user message as one line: what failed, and the detail."""
    from sharemgr.common import messages

    text = messages.user_message(msg.resource_type, msg.action_id, msg.detail_id)
    return f"{text} ({msg.detail})" if msg.detail else text


class ShareExtend(_Resize):
    """Grow a share to NEW_SIZE GiB."""

    kind = NOUNS["share"]
    extend = True


class ShareShrink(_Resize):
    """Shrink a share to NEW_SIZE GiB."""

    kind = NOUNS["share"]
    extend = False


class _OfParent(_Create):
    """A create of a resource of PARENT (its id, the one positional), with
    an optional --name: a snapshot, a group snapshot, a backup."""

    parent: str  # the positional's metavar

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("parent", metavar=self.parent)
        parser.add_argument("--name")


class SnapshotCreate(_OfParent):
    """Snapshot a share."""

    kind = NOUNS["snapshot"]
    parent = "SHARE_ID"

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_snapshot(a.parent, a.name).id


class ReplicaCreate(_Create):
    """Add a replica of a share (on --backend, default the share's own)."""

    kind = NOUNS["replica"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("share", metavar="SHARE_ID")
        parser.add_argument("--backend")
        add_host(parser)

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_replica(a.share, a.backend, a.host).id


class ShareServerCreate(_Create):
    """Set up a share server on a backend that handles share servers."""

    kind = NOUNS["share-server"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--backend")
        add_host(parser)

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_share_server(a.backend, a.host).id


class ShareGroupCreate(_Create):
    """Create a share group."""

    kind = NOUNS["share-group"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--name")
        parser.add_argument("--backend")
        add_host(parser)
        parser.add_argument("--share-server", metavar="ID")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_share_group(a.name, a.backend, a.share_server, a.host).id


class GroupSnapshotCreate(_OfParent):
    """Snapshot a share group."""

    kind = NOUNS["group-snapshot"]
    parent = "SHARE_GROUP_ID"

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_group_snapshot(a.parent, a.name).id


class BackupCreate(_OfParent):
    """Back up a share (two-phase: the backup is available when complete)."""

    kind = NOUNS["backup"]
    parent = "SHARE_ID"

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.create_backup(a.parent, a.name).id


class BackupRestore(_Create):
    """Restore a backup into its share."""

    kind = NOUNS["backup"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", metavar="BACKUP_ID")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.restore_backup(a.id).id

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        backup = _intake(self.app).restore_backup(parsed_args.id)
        result = self.show_after(backup.id, parsed_args, (vocab.AVAILABLE,))
        if parsed_args.wait:
            share = NOUNS["share"].status(self.app.context.db, backup.share_id)
            if share != vocab.AVAILABLE:
                self.produce_output(parsed_args, *result)
                raise base.OperationFailed(f"share {backup.share_id} ended in status {share}")
        return result


class RequestList(base.Lister):
    """List requests, newest first."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", choices=vocab.REQUEST_STATUSES)
        parser.add_argument("--resource", metavar="ID",
                            help="a resource's id: a share or snapshot includes its "
                            "instances' (and a share its backups') requests")
        parser.add_argument("--limit", type=base.whole(1), default=None)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import api as db_api

        rows = db_api.request_list(self.app.context.db, parsed_args.status,
                                   parsed_args.resource, parsed_args.limit)
        cols = ("id", "created_at", "resource_type", "resource_id", "action", "host",
                "status", "engine_id", "error")
        return cols, [tuple(base.fmt(getattr(r, c)) for c in cols) for r in rows]


def commands_for() -> dict[str, type]:
    table: dict[str, type] = {}

    def make(base_cls: type, kind: Noun, doc: str) -> type:
        return type(f"{base_cls.__name__}_{kind.rtype}", (base_cls,), {"kind": kind,
                                                                         "__doc__": doc})

    for noun, kind in NOUNS.items():
        table[f"{noun} list"] = make(ResourceList, kind, f"List {noun}s.")
        table[f"{noun} show"] = make(ResourceShow, kind, f"Show one {noun}.")
        table[f"{noun} reset-state"] = make(
            ResourceResetState, kind, f"Set a {noun}'s status (admin).")
        if kind.delete is not None:
            table[f"{noun} delete"] = make(ResourceDelete, kind, f"Delete a {noun}.")
    creators: dict[str, type] = {
        "share create": ShareCreate, "share extend": ShareExtend,
        "share shrink": ShareShrink, "snapshot create": SnapshotCreate,
        "replica create": ReplicaCreate, "share-server create": ShareServerCreate,
        "share-group create": ShareGroupCreate, "group-snapshot create": GroupSnapshotCreate,
        "backup create": BackupCreate, "backup restore": BackupRestore,
        "request list": RequestList,
    }
    table.update(creators)
    return table
