"""The dummy driver: a real driver over a fake backend kept on disk.

Its backend state (objects and a log of every call) lives in a SQLite file
under ``dummy_state_path`` (see ``dummy_state``), so it survives a killed
manager and can be driven by several engines on one host at once.
Reconciliation asks it for ground truth; tests steer it with the knobs in
``dummy_opts`` and look at it (or change it behind the manager's back) with
the ``sharemgr-dummy-backend`` command.

This module holds the operations that change the backend; the others are
``dummy_options`` (the knobs), ``dummy_calls`` (the path every call takes:
log, gate, delay, fail, crash-before, change in one transaction,
crash-after), ``dummy_reads`` (status methods, stats, listing),
``dummy_manage`` (manage and unmanage), ``dummy_state`` (the SQLite file)
and ``dummy_cli`` (the command).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.dummy_access import apply_rules
from sharemgr.drivers.dummy_calls import CREATED, SHARE_KINDS
from sharemgr.drivers.dummy_manage import DummyManage
from sharemgr.drivers.dummy_migration import DummyMigration
from sharemgr.drivers.dummy_options import dummy_opts
from sharemgr.drivers.dummy_reads import DummyReads
from sharemgr.drivers.dummy_replicas import DummyReplicas
from sharemgr.drivers.dummy_state import Details, ProgressKey, Tx
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareBackendException

# manager/config.py lists the options from here for oslo-config-generator.
__all__ = ["DummyDriver", "dummy_opts"]


def _pool(resource: base.Share | base.Replica) -> Details:
    """The pool of a share or replica ('host@backend#pool'), kept in the
    object's details so get_share_stats can count what each pool holds."""
    host = resource.get("host") or ""
    return {"pool": host.split("#", 1)[1]} if "#" in host else {}

class DummyDriver(DummyManage, DummyReplicas, DummyMigration, DummyReads):
    """A share driver over a fake backend persisted in SQLite."""

    # Set-up -----------------------------------------------------------------

    def do_setup(self) -> None:
        with self._op("do_setup", None):
            blocker = self.configuration.dummy_unreachable_file
            if blocker and os.path.exists(blocker):
                with open(blocker) as f:
                    why = f.readline().strip()
                raise ShareBackendException(f"cannot reach array: {why or blocker}")

    def check_for_setup_error(self) -> None:
        with self._op("check_for_setup_error", None, write=False):
            pass

    # Shares -------------------------------------------------------------------

    def _create_share(self, tx: Tx, share: base.Share, server: base.ShareServer | None,
                      snapshot_id: str | None = None, size: int | None = None
                      ) -> list[base.ExportLocation]:
        server_id = self._check_server(tx, server, "a share")
        existing = tx.get(share["id"])
        if existing is not None:
            if existing["kind"] != "share":
                raise InvalidShareRequest(
                    f"dummy backend: id {share['id']} is a {existing['kind']}"
                )
            return existing["export_locations"]
        locations = self._export_locations(share["id"], server)
        tx.insert(
            id=share["id"], kind="share", share_id=share.get("share_id"),
            snapshot_id=snapshot_id, share_server_id=server_id, name=share.get("name"),
            size=size if size is not None else self._size(share.get("size")),
            status=CREATED, export_locations=locations,
            details={"share_proto": share.get("share_proto"), **_pool(share)},
        )
        return locations

    def create_share(self, share: base.Share, share_server: base.ShareServer | None = None
                     ) -> list[base.ExportLocation]:
        with self._op("create_share", share) as tx:
            return self._create_share(tx, share, share_server)

    def create_share_from_snapshot(
        self, share: base.Share, snapshot: base.Snapshot,
        share_server: base.ShareServer | None = None
    ) -> list[base.ExportLocation]:
        with self._op("create_share_from_snapshot", share) as tx:
            snap = self._need(tx, snapshot.get("id"), ("snapshot",), "snapshot")
            size = self._size(share.get("size"))
            if size < (snap["size"] or 0):
                raise InvalidShareRequest(
                    f"dummy backend: share of {size} GiB is smaller than snapshot "
                    f"{snap['id']} ({snap['size']} GiB)"
                )
            snapshot_id = share.get("snapshot_id") or snapshot.get("snapshot_id") or snap["id"]
            return self._create_share(tx, share, share_server, snapshot_id, size)

    def _drop_instance(self, method: str, obj: base.Share | base.Replica, what: str) -> None:
        """A share's instance gone, of either kind (a promote makes a replica
        the share's instance, and the share's first one a replica)."""
        with self._op(method, obj) as tx:
            if tx.get(obj["id"], SHARE_KINDS) is not None:
                # A real backend cannot drop a volume that still has snapshots.
                self._refuse_if_used(tx, "share_instance_id", obj["id"], ("snapshot",), what)
                held = [g["id"] for g in tx.objects("group_snapshot")
                        if obj["id"] in g["details"].get("members", ())]
                if held:
                    raise InvalidShareRequest(f"dummy backend: {what} {obj['id']} is in use by "
                                              f"group snapshot {', '.join(held)}")
                tx.delete(obj["id"])

    def delete_share(self, share: base.Share, share_server: base.ShareServer | None = None) -> None:
        self._drop_instance("delete_share", share, "share")
        # Its files, if a host-assisted migration asked for them.
        shutil.rmtree(self.data_folder(share["id"]), ignore_errors=True)

    def _resize(self, method: str, share: base.Share, new_size: int, grow: bool) -> None:
        with self._op(method, share) as tx:
            obj = self._need(tx, share["id"], SHARE_KINDS, "share")
            new_size = self._size(new_size)
            current = obj["size"] or 0  # a share always has one
            if (grow and new_size < current) or (not grow and new_size > current):
                verb = "extend" if grow else "shrink"
                raise InvalidShareRequest(
                    f"dummy backend: cannot {verb} share {obj['id']} of {obj['size']} GiB "
                    f"to {new_size} GiB"
                )
            tx.update(obj["id"], size=new_size)

    def extend_share(self, share: base.Share, new_size: int,
                     share_server: base.ShareServer | None = None) -> None:
        self._resize("extend_share", share, new_size, grow=True)

    def shrink_share(self, share: base.Share, new_size: int,
                     share_server: base.ShareServer | None = None) -> None:
        self._resize("shrink_share", share, new_size, grow=False)

    # Access rules ------------------------------------------------------------

    def update_access(self, share: base.Share, access_rules: list[base.AccessRule],
                      add_rules: list[base.AccessRule], delete_rules: list[base.AccessRule],
                      share_server: base.ShareServer | None = None
                      ) -> dict[str, base.RuleError] | None:
        """The share's export allows exactly the rules of ``access_rules``
        it can serve (kept in the object's details, which
        ``sharemgr-dummy-backend list`` shows); ``add_rules`` and
        ``delete_rules`` are not needed: the full set is the truth."""
        with self._op("update_access", share) as tx:
            obj = self._need(tx, share["id"], SHARE_KINDS, "share")
            return apply_rules(tx, obj, share, access_rules) or None

    # Snapshots -------------------------------------------------------------

    def create_snapshot(self, snapshot: base.Snapshot,
                        share_server: base.ShareServer | None = None) -> None:
        with self._op("create_snapshot", snapshot) as tx:
            parent = self._need(tx, snapshot.get("share_instance_id"), SHARE_KINDS, "share")
            if tx.get(snapshot["id"], ("snapshot",)) is not None:
                return None
            tx.insert(
                id=snapshot["id"], kind="snapshot", snapshot_id=snapshot.get("snapshot_id"),
                share_id=snapshot.get("share_id") or parent["share_id"],
                share_instance_id=parent["id"], name=snapshot.get("name"),
                size=parent["size"], status=CREATED,
            )
        return None

    def delete_snapshot(self, snapshot: base.Snapshot,
                        share_server: base.ShareServer | None = None) -> None:
        with self._op("delete_snapshot", snapshot) as tx:
            if tx.get(snapshot["id"], ("snapshot",)) is not None:
                tx.delete(snapshot["id"])

    # Replicas ---------------------------------------------------------------

    def create_replica(
        self, replica: base.Replica, active_replica: base.Replica,
        share_server: base.ShareServer | None = None
    ) -> base.ReplicaUpdate:
        with self._op("create_replica", replica) as tx:
            server_id = self._check_server(tx, share_server, "a replica")
            active = self._need(tx, active_replica.get("id"), SHARE_KINDS, "active replica")
            existing = tx.get(replica["id"], ("replica",))
            if existing is None:
                existing = tx.insert(
                    id=replica["id"], kind="replica",
                    share_id=replica.get("share_id") or active["share_id"],
                    share_server_id=server_id, name=replica.get("name"),
                    size=active["size"], status=CREATED, replica_state=vocab.REPLICA_IN_SYNC,
                    export_locations=self._export_locations(replica["id"], share_server),
                    details=_pool(replica),
                )
            return {
                "export_locations": existing["export_locations"],
                "replica_state": existing["replica_state"],
            }

    def delete_replica(self, replica: base.Replica,
                       share_server: base.ShareServer | None = None) -> None:
        self._drop_instance("delete_replica", replica, "replica")

    # Share groups ---------------------------------------------------------------

    def create_share_group(self, group: base.ShareGroup,
                           share_server: base.ShareServer | None = None) -> None:
        with self._op("create_share_group", group) as tx:
            server_id = share_server["id"] if share_server else None
            if tx.get(group["id"], ("share_group",)) is None:
                tx.insert(
                    id=group["id"], kind="share_group", share_group_id=group["id"],
                    share_server_id=server_id, name=group.get("name"), status=CREATED,
                )
        return None

    def delete_share_group(self, group: base.ShareGroup,
                           share_server: base.ShareServer | None = None) -> None:
        with self._op("delete_share_group", group) as tx:
            if tx.get(group["id"], ("share_group",)) is not None:
                self._refuse_if_used(tx, "share_group_id", group["id"], ("group_snapshot",),
                                     "share group")
                tx.delete(group["id"])

    def create_share_group_snapshot(
        self, group_snapshot: base.GroupSnapshot, share_server: base.ShareServer | None = None
    ) -> None:
        with self._op("create_share_group_snapshot", group_snapshot) as tx:
            group = self._need(
                tx, group_snapshot.get("share_group_id"), ("share_group",), "share group"
            )
            if tx.get(group_snapshot["id"], ("group_snapshot",)) is None:
                # Each member's share snapshotted with the rest, as an array's
                # consistency group does: one missing, none is.
                members = [self._need(tx, m.get("share_instance_id"), SHARE_KINDS, "share")["id"]
                           for m in group_snapshot.get("members", [])]
                tx.insert(
                    id=group_snapshot["id"], kind="group_snapshot",
                    share_group_id=group["id"], name=group_snapshot.get("name"),
                    status=CREATED, details={"members": members},
                )
        return None

    def delete_share_group_snapshot(
        self, group_snapshot: base.GroupSnapshot, share_server: base.ShareServer | None = None
    ) -> None:
        with self._op("delete_share_group_snapshot", group_snapshot) as tx:
            if tx.get(group_snapshot["id"], ("group_snapshot",)) is not None:
                tx.delete(group_snapshot["id"])

    # Share servers --------------------------------------------------------------

    def setup_server(self, server: base.ShareServer,
                     network_info: Mapping[str, object] | None = None) -> base.JSONDict:
        with self._op("setup_server", server) as tx:
            if not self.driver_handles_share_servers:
                raise InvalidShareRequest(
                    f"dummy backend {self.backend_name} does not handle share servers "
                    "(driver_handles_share_servers = False)"
                )
            existing = tx.get(server["id"], ("share_server",))
            if existing is not None:
                # What the first call made and returned (the details hold no more).
                made = existing["details"]
                return {"server_name": made["server_name"], "address": made["address"]}
            details: Details = {
                "server_name": f"dummy-server-{server['id']}",
                "address": f"{server['id'][:8]}.{self.backend_name}.dummy",
            }
            tx.insert(id=server["id"], kind="share_server", share_server_id=server["id"],
                      name=details["server_name"], status=CREATED, details=details)
            return {"server_name": details["server_name"], "address": details["address"]}

    def teardown_server(self, server: base.ShareServer,
                        backend_details: Mapping[str, object]) -> None:
        with self._op("teardown_server", server) as tx:
            if tx.get(server["id"], ("share_server",)) is not None:
                self._refuse_if_used(tx, "share_server_id", server["id"],
                                     ("share", "replica", "share_group"), "share server")
                tx.delete(server["id"])

    # Backups ---------------------------------------------------------------------
    # Progress moves by half on every *_continue call, so a backup takes two
    # periodic runs: enough to see the transient status, no clocks involved.

    def create_backup(self, share: base.Share, backup: base.Backup) -> None:
        with self._op("create_backup", backup) as tx:
            parent = self._need(tx, share.get("id"), SHARE_KINDS, "share")
            if tx.get(backup["id"], ("backup",)) is None:
                tx.insert(
                    id=backup["id"], kind="backup",
                    share_id=backup.get("share_id") or parent["share_id"],
                    share_instance_id=parent["id"], name=backup.get("name"),
                    size=parent["size"], status=vocab.CREATING, details={"progress": 0},
                )
        return None

    def _advance(self, method: str, backup: base.Backup, key: ProgressKey,
                 done_status: str) -> base.Progress:
        with self._op(method, backup) as tx:
            obj = self._need(tx, backup.get("id"), ("backup",), "backup")
            details = obj["details"].copy()
            details[key] = min(100, int(details.get(key, 0)) + 50)
            status = done_status if details[key] == 100 else obj["status"]
            tx.update(obj["id"], details=details, status=status)
            return {"total_progress": str(details[key])}

    def create_backup_continue(self, share: base.Share, backup: base.Backup) -> base.Progress:
        return self._advance("create_backup_continue", backup, "progress", CREATED)

    def restore_backup(self, backup: base.Backup, share: base.Share) -> None:
        with self._op("restore_backup", backup) as tx:
            obj = self._need(tx, backup.get("id"), ("backup",), "backup")
            self._need(tx, share.get("id"), SHARE_KINDS, "share")
            if obj["status"] not in (CREATED, vocab.RESTORING):
                raise InvalidShareRequest(
                    f"dummy backend: backup {obj['id']} is {obj['status']}, not available"
                )
            details: Details = {**obj["details"], "restore_progress": 0,
                                "restore_to": share["id"]}
            tx.update(obj["id"], status=vocab.RESTORING, details=details)

    def restore_backup_continue(self, backup: base.Backup, share: base.Share) -> base.Progress:
        return self._advance("restore_backup_continue", backup, "restore_progress", CREATED)

    def delete_backup(self, backup: base.Backup) -> None:
        with self._op("delete_backup", backup) as tx:
            if tx.get(backup["id"], ("backup",)) is not None:
                tx.delete(backup["id"])
