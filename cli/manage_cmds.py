"""sharectl manage and unmanage (Manila's): ``share manage|unmanage``,
``snapshot manage|unmanage``, ``share-server manage|unmanage``
(manager/manage_ops.py says what each does)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.nouns import NOUNS, Noun
from sharemgr.cli.resource_cmds import _Create, _finish, _intake, add_wait, wait_for
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.manager.intake import Intake


def option(text: str) -> tuple[str, str]:
    """One ``--driver-option key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"not key=value: {text!r}")
    return key, value


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--driver-option", dest="driver_options", type=option,
                        action="append", default=[], metavar="KEY=VALUE",
                        help="an option for the driver's manage call (repeatable)")


def _options(args: argparse.Namespace) -> dict[str, str]:
    return dict(args.driver_options or [])


class ShareManage(_Create):
    """Bring an existing share of a backend under sharemgr (admin)."""

    kind = NOUNS["share"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("export_path", metavar="EXPORT_PATH",
                            help="the share's export path on the backend")
        parser.add_argument("--proto", required=True, help="NFS, CIFS, CEPHFS, ...")
        parser.add_argument("--backend", required=True, help="backend (config group)")
        parser.add_argument("--name")
        add_options(parser)

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.manage_share(a.export_path, a.proto, a.backend, a.name, _options(a)).id


class SnapshotManage(_Create):
    """Bring an existing snapshot of a managed share under sharemgr (admin)."""

    kind = NOUNS["snapshot"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("share", metavar="SHARE_ID")
        parser.add_argument("provider_location", metavar="PROVIDER_LOCATION",
                            help="where the backend keeps the snapshot")
        parser.add_argument("--name")
        add_options(parser)

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.manage_snapshot(a.share, a.provider_location, a.name, _options(a)).id


class ShareServerManage(_Create):
    """Bring an existing share server under sharemgr (admin; backends that
    handle share servers)."""

    kind = NOUNS["share-server"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("identifier", metavar="IDENTIFIER",
                            help="the backend's identifier of the server")
        parser.add_argument("--backend", required=True, help="backend (config group)")
        add_options(parser)

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.manage_share_server(a.identifier, a.backend, _options(a)).id


class Unmanage(base.Command):
    """Forget a resource, leaving it on the backend (admin)."""

    kind: Noun

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help=f"{self.kind.noun} id")
        add_wait(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        ident = parsed_args.id
        _intake(self.app).unmanage(self.kind.rtype, ident)
        if parsed_args.wait:
            status = wait_for(self.app, self.kind, ident, parsed_args.timeout)
            _finish(self.app, self.kind, ident, status, (vocab.DELETED,))
            self.app.stdout.write(f"{self.kind.noun} {ident} unmanaged\n")
        else:
            self.app.stdout.write(f"{self.kind.noun} {ident}: unmanage requested\n")
        return 0


def _unmanage(noun: str) -> type:
    kind = NOUNS[noun]
    return type(f"Unmanage_{kind.rtype}", (Unmanage,), {
        "kind": kind, "__doc__": f"Forget a {noun}, leaving it on the backend (admin)."})


COMMANDS: dict[str, type] = {
    "share manage": ShareManage,
    "share unmanage": _unmanage("share"),
    "snapshot manage": SnapshotManage,
    "snapshot unmanage": _unmanage("snapshot"),
    "share-server manage": ShareServerManage,
    "share-server unmanage": _unmanage("share-server"),
}
