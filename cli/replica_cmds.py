"""sharectl commands of the replica lifecycle and revert: ``share revert``,
``replica promote``, ``replica resync``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.nouns import NOUNS
from sharemgr.cli.reconcile_cmds import wait_request
from sharemgr.cli.resource_cmds import _columns_values, _Create, _intake

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

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        """A resync changes no status, so ``--wait`` waits for its request
        (it returned at once, before the state was asked: a suite run saw
        the old state)."""
        if not parsed_args.wait:
            return super().take_action(parsed_args)
        from sharemgr.common import vocab
        from sharemgr.db import api as db_api

        db = self.app.context.db
        before = [r.id for r in db_api.request_list(db, resource_id=parsed_args.id, limit=1)]
        ident = self.submit(_intake(self.app), parsed_args)
        mine = [r for r in db_api.request_list(db, resource_id=ident)
                if r.action == vocab.ACTION_RESYNC and r.id > max(before, default=0)]
        if not mine:  # written by the intake just now: gone only if purged meanwhile
            raise base.OperationFailed(f"the resync request of replica {ident} is gone")
        req = mine[-1]  # newest first: the first one written after ``before``
        wait_request(self.app.context, req.id, parsed_args.timeout, "share-manager",
                     f"the resync of replica {ident}")
        return _columns_values(self.kind.show(db, ident))


COMMANDS: dict[str, type] = {
    "share revert": ShareRevert,
    "replica promote": ReplicaPromote,
    "replica resync": ReplicaResync,
}
