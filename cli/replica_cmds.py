"""sharectl commands of the replica lifecycle and revert: ``share revert``,
``replica promote``, ``replica resync``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli.nouns import NOUNS
from sharemgr.cli.resource_cmds import _Create

if TYPE_CHECKING:
    from sharemgr.manager.intake import Intake


class ShareRevert(_Create):
    """Revert a share to SNAPSHOT_ID, its latest snapshot."""

    kind = NOUNS["share"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("snapshot", metavar="SNAPSHOT_ID")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.revert_share(a.snapshot).id


class ReplicaPromote(_Create):
    """Make a replica the active one of its share (the old active becomes a replica)."""

    kind = NOUNS["replica"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", metavar="REPLICA_ID")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.promote_replica(a.id).id


class ReplicaResync(_Create):
    """Ask the backend for a replica's state now (update_replica_state)."""

    kind = NOUNS["replica"]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", metavar="REPLICA_ID")

    def submit(self, intake: Intake, a: argparse.Namespace) -> str:
        return intake.resync_replica(a.id).id


COMMANDS: dict[str, type] = {
    "share revert": ShareRevert,
    "replica promote": ReplicaPromote,
    "replica resync": ReplicaResync,
}
