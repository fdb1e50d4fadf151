"""Request intake: validate a user's request, then write the resource in its
transient status and a request row in one transaction.

Nothing here talks to a driver or a daemon: a manager serving the target host
claims the request. A status change is a conditional update, so two users
racing for one resource cannot both start an operation on it.
"""

from __future__ import annotations

from typing import Any

from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.manager import views

PROTOCOLS = ("NFS", "CIFS", "CEPHFS", "GLUSTERFS", "HDFS", "MAPRFS")

# Statuses from which a delete may start (everything settled).
DELETABLE = (
    vocab.AVAILABLE,
    vocab.ERROR,
    vocab.ERROR_DELETING,
    vocab.EXTENDING_ERROR,
    vocab.SHRINKING_ERROR,
    vocab.SHRINKING_POSSIBLE_DATA_LOSS_ERROR,
    vocab.MANAGE_ERROR,
    vocab.UNMANAGE_ERROR,
    vocab.REVERTING_ERROR,
    vocab.BACKUP_RESTORING_ERROR,
    vocab.INACTIVE,
)
SERVER_DELETABLE = (vocab.ACTIVE, vocab.ERROR, vocab.INACTIVE, vocab.MANAGE_ERROR,
                    vocab.UNMANAGE_ERROR)

# How a resource type's status is stored: reset-state on a share sets its
# primary instance, on a snapshot its instance.
STATUS_MODEL = {
    vocab.SHARE_INSTANCE: models.ShareInstance,
    vocab.REPLICA: models.ShareInstance,
    vocab.SNAPSHOT_INSTANCE: models.ShareSnapshotInstance,
    vocab.SHARE_SERVER: models.ShareServer,
    vocab.SHARE_GROUP: models.ShareGroup,
    vocab.GROUP_SNAPSHOT: models.ShareGroupSnapshot,
    vocab.BACKUP: models.ShareBackup,
}


class InvalidRequest(Exception):
    """Bad input or a resource not in a state for the operation. Nothing was
    written."""


def check_size(size: object, what: str = "size") -> int:
    """A share size in GiB: a whole number from 1 to ``MAX_SHARE_SIZE_GB``
    (what the size columns hold on every database). Checked before anything
    is written, so a size no database can store never reaches a driver."""
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InvalidRequest(f"{what} must be a positive integer (GiB), got {size!r}")
    if size > vocab.MAX_SHARE_SIZE_GB:
        raise InvalidRequest(f"{what} {size} GiB is larger than the maximum share size, "
                             f"{vocab.MAX_SHARE_SIZE_GB} GiB")
    return size


def check_name(name: str | None, model: type, what: str) -> None:
    """A name must fit its column (the same limit on every database)."""
    limit = model.__table__.c.name.type.length
    if name is not None and len(name) > limit:
        raise InvalidRequest(f"{what} name is {len(name)} characters long; at most {limit}")


def _request(rtype: str, rid: str, action: str, host: str, **args: Any) -> dict:
    # Requests go to 'host@backend' (an engine serves a backend and all its
    # pools), so claims can match the host exactly.
    return {"resource_type": rtype, "resource_id": rid, "action": action,
            "host": views.host_of(host), "args": args}


class Intake:
    def __init__(self, db: Database, conf: cfg.ConfigOpts) -> None:
        self.db = db
        self.conf = conf

    # Helpers ---------------------------------------------------------------

    def host_for(self, backend: str | None) -> str:
        backends = list(self.conf.enabled_share_backends)
        if not backends:
            raise InvalidRequest("no backend is enabled (enabled_share_backends is empty)")
        backend = backend or backends[0]
        if backend not in backends:
            raise InvalidRequest(
                f"unknown backend {backend!r}; enabled backends: {', '.join(backends)}"
            )
        host = f"{self.conf.host}@{backend}"
        if len(host) > models.BACKEND_HOST:
            raise InvalidRequest(f"'{host}' is longer than {models.BACKEND_HOST} characters: "
                                 "use a shorter backend name")
        return host

    def dhss(self, host: str) -> bool:
        backend = views.backend_of(host)
        try:
            return bool(self.conf[backend].driver_handles_share_servers)
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
            return False

    def _get(self, model: type, ident: str, what: str) -> Any:
        row = db_api.get(self.db, model, ident) if ident else None
        if row is None:
            raise InvalidRequest(f"no {what} with id {ident!r}")
        return row

    def share(self, share_id: str) -> tuple[models.Share, models.ShareInstance]:
        share = self._get(models.Share, share_id, "share")
        inst = resources.primary_instance(self.db, share.id)
        if inst is None:
            raise InvalidRequest(f"share {share_id} has no instance")
        return share, inst

    def snapshot(self, snapshot_id: str) -> tuple[models.ShareSnapshot,
                                                  models.ShareSnapshotInstance]:
        snap = self._get(models.ShareSnapshot, snapshot_id, "snapshot")
        inst = resources.snapshot_instance_of(self.db, snap.id)
        if inst is None:
            raise InvalidRequest(f"snapshot {snapshot_id} has no instance")
        return snap, inst

    @staticmethod
    def _need(status: str, allowed: tuple[str, ...], what: str, op: str) -> None:
        if status not in allowed:
            raise InvalidRequest(
                f"cannot {op} {what}: its status is {status!r} (needs {' or '.join(allowed)})"
            )

    def _transition(self, model: type, ident: str, current: str, allowed: tuple[str, ...],
                    new: str, what: str, op: str, request: dict | None,
                    extra: list | None = None, values: dict | None = None) -> None:
        """Move ``ident`` from one of ``allowed`` to ``new`` and add the request,
        atomically; a concurrent change makes it fail with a clear message."""
        self._need(current, allowed, what, op)
        changes = [(model, ident, {"status": allowed}, {"status": new, **(values or {})})]
        changes += extra or []
        if not db_api.transition_with_request(self.db, changes, request):
            raise InvalidRequest(f"cannot {op} {what}: it changed meanwhile, try again")

    # Shares ----------------------------------------------------------------

    def create_share(
        self,
        size: int,
        proto: str,
        name: str | None = None,
        backend: str | None = None,
        share_server_id: str | None = None,
        snapshot_id: str | None = None,
        share_group_id: str | None = None,
        project_id: str | None = None,
    ) -> models.Share:
        check_size(size)
        check_name(name, models.Share, "share")
        proto = (proto or "").upper()
        if proto not in PROTOCOLS:
            raise InvalidRequest(f"unknown protocol {proto!r}; one of {', '.join(PROTOCOLS)}")
        status = vocab.CREATING
        if snapshot_id:
            snap, snap_inst = self.snapshot(snapshot_id)
            self._need(snap_inst.status, (vocab.AVAILABLE,), f"snapshot {snapshot_id}",
                       "create a share from")
            if size < snap.size:
                raise InvalidRequest(
                    f"size {size} is smaller than snapshot {snapshot_id} ({snap.size})"
                )
            source = db_api.get(self.db, models.ShareInstance, snap_inst.share_instance_id)
            host = source.host if backend is None else self.host_for(backend)
            if views.host_of(host) != views.host_of(source.host):
                raise InvalidRequest("a share from a snapshot must be on the snapshot's backend")
            status = vocab.CREATING_FROM_SNAPSHOT
        else:
            host = self.host_for(backend)
        if self.dhss(host):
            if not share_server_id:
                raise InvalidRequest(
                    f"backend {views.backend_of(host)!r} handles share servers: "
                    "give --share-server ID"
                )
            server = self._get(models.ShareServer, share_server_id, "share server")
            self._need(server.status, (vocab.ACTIVE,), f"share server {share_server_id}",
                       "place a share on")
            if server.host != views.host_of(host):
                raise InvalidRequest(
                    f"share server {share_server_id} is on {server.host}, not {host}"
                )
        elif share_server_id:
            raise InvalidRequest(
                f"backend {views.backend_of(host)!r} does not handle share servers "
                "(driver_handles_share_servers = False)"
            )
        if share_group_id:
            group = self._get(models.ShareGroup, share_group_id, "share group")
            self._need(group.status, (vocab.AVAILABLE,), f"share group {share_group_id}",
                       "add a share to")
            if group.host != views.host_of(host):
                raise InvalidRequest(f"share group {share_group_id} is on {group.host}")
        share = models.Share(id=models.new_id(), name=name, size=size, share_proto=proto,
                        project_id=project_id, snapshot_id=snapshot_id,
                        share_group_id=share_group_id)
        inst = models.ShareInstance(id=models.new_id(), share_id=share.id, host=host, status=status,
                               share_server_id=share_server_id, export_locations=[])
        db_api.add_with_request(
            self.db, [share, inst], _request(vocab.SHARE_INSTANCE, inst.id, "create", host)
        )
        return share

    def delete_share(self, share_id: str) -> models.Share:
        share, inst = self.share(share_id)
        if resources.live_count(self.db, models.ShareSnapshot, share_id=share.id):
            raise InvalidRequest(f"share {share_id} has snapshots: delete them first")
        replicas = [i for i in db_api.query(self.db, models.ShareInstance, {"share_id": share.id})
                    if i.id != inst.id]
        if replicas:
            raise InvalidRequest(f"share {share_id} has replicas: delete them first")
        self._transition(models.ShareInstance, inst.id, inst.status, DELETABLE, vocab.DELETING,
                         f"share {share_id}", "delete",
                         _request(vocab.SHARE_INSTANCE, inst.id, "delete", inst.host))
        return share

    def resize_share(self, share_id: str, new_size: int, extend: bool) -> models.Share:
        check_size(new_size, "new size")
        share, inst = self.share(share_id)
        op = "extend" if extend else "shrink"
        if extend and new_size <= share.size:
            raise InvalidRequest(
                f"cannot extend share {share_id} to {new_size}: it is already {share.size}"
            )
        if not extend and new_size >= share.size:
            raise InvalidRequest(
                f"cannot shrink share {share_id} to {new_size}: it is only {share.size}"
            )
        # A snapshot being made records the share's size when it is asked
        # for, the backend when its driver call runs: resizing in between
        # would leave the two disagreeing.
        busy = sorted({si.status for si in db_api.query(self.db, models.ShareSnapshotInstance,
                                                         {"share_instance_id": inst.id})
                       if si.status in vocab.TRANSIENT_STATUSES})
        if busy:
            raise InvalidRequest(f"cannot {op} share {share_id}: it has a snapshot that is "
                                 f"{', '.join(busy)}; try again when it is done")
        self._transition(models.ShareInstance, inst.id, inst.status, (vocab.AVAILABLE,),
                         vocab.EXTENDING if extend else vocab.SHRINKING, f"share {share_id}", op,
                         _request(vocab.SHARE_INSTANCE, inst.id, op, inst.host, new_size=new_size))
        return share

    # Snapshots -------------------------------------------------------------

    def create_snapshot(self, share_id: str, name: str | None = None) -> models.ShareSnapshot:
        check_name(name, models.ShareSnapshot, "snapshot")
        share, inst = self.share(share_id)
        self._need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "snapshot")
        snap = models.ShareSnapshot(
            id=models.new_id(),
            share_id=share.id,
            name=name,
            size=share.size,
            project_id=share.project_id,
        )
        snap_inst = models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=snap.id,
                                            share_instance_id=inst.id, status=vocab.CREATING)
        db_api.add_with_request(
            self.db, [snap, snap_inst],
            _request(vocab.SNAPSHOT_INSTANCE, snap_inst.id, "create", inst.host),
        )
        return snap

    def delete_snapshot(self, snapshot_id: str) -> models.ShareSnapshot:
        snap, snap_inst = self.snapshot(snapshot_id)
        inst = db_api.get(self.db, models.ShareInstance, snap_inst.share_instance_id,
                          include_deleted=True)
        self._transition(models.ShareSnapshotInstance, snap_inst.id, snap_inst.status,
                         (vocab.AVAILABLE, vocab.ERROR, vocab.ERROR_DELETING, vocab.MANAGE_ERROR,
                          vocab.UNMANAGE_ERROR),
                         vocab.DELETING, f"snapshot {snapshot_id}", "delete",
                         _request(vocab.SNAPSHOT_INSTANCE, snap_inst.id, "delete", inst.host))
        return snap

    # Replicas --------------------------------------------------------------

    def create_replica(self, share_id: str, backend: str | None = None) -> models.ShareInstance:
        share, inst = self.share(share_id)
        self._need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "replicate")
        host = self.host_for(backend) if backend else inst.host
        if self.dhss(host):
            raise InvalidRequest("replicas on backends that handle share servers are not "
                                 "supported")
        replica = models.ShareInstance(id=models.new_id(), share_id=share.id, host=host,
                                  status=vocab.CREATING, replica_state=vocab.REPLICA_OUT_OF_SYNC,
                                  export_locations=[])
        extra = []
        if inst.replica_state is None:
            # The first replica makes the original instance the active replica.
            extra.append((models.ShareInstance, inst.id, {"replica_state": None},
                          {"replica_state": vocab.REPLICA_ACTIVE}))
        if not db_api.transition_with_request(
            self.db, extra, _request(vocab.REPLICA, replica.id, "create", host), rows=[replica]
        ):
            raise InvalidRequest(f"cannot replicate share {share_id}: it changed meanwhile")
        return replica

    def replica(self, replica_id: str) -> models.ShareInstance:
        row = self._get(models.ShareInstance, replica_id, "replica")
        if row.replica_state in (None, vocab.REPLICA_ACTIVE):
            raise InvalidRequest(f"{replica_id} is the active instance of its share, "
                                 "not a secondary replica")
        return row

    def delete_replica(self, replica_id: str) -> models.ShareInstance:
        row = self.replica(replica_id)
        self._transition(models.ShareInstance, row.id, row.status, DELETABLE, vocab.DELETING,
                         f"replica {replica_id}", "delete",
                         _request(vocab.REPLICA, row.id, "delete", row.host))
        return row

    # Share servers -----------------------------------------------------------

    def create_share_server(self, backend: str | None = None) -> models.ShareServer:
        host = self.host_for(backend)
        if not self.dhss(host):
            raise InvalidRequest(
                f"backend {views.backend_of(host)!r} does not handle share servers "
                "(driver_handles_share_servers = False)"
            )
        server = models.ShareServer(id=models.new_id(), host=host, status=vocab.CREATING,
                                    backend_details={})
        db_api.add_with_request(
            self.db, [server], _request(vocab.SHARE_SERVER, server.id, "create", host)
        )
        return server

    def delete_share_server(self, server_id: str) -> models.ShareServer:
        server = self._get(models.ShareServer, server_id, "share server")
        if resources.live_count(self.db, models.ShareInstance, share_server_id=server.id) or \
                resources.live_count(self.db, models.ShareGroup, share_server_id=server.id):
            raise InvalidRequest(f"share server {server_id} is in use by shares or groups")
        self._transition(models.ShareServer, server.id, server.status, SERVER_DELETABLE,
                         vocab.DELETING, f"share server {server_id}", "delete",
                         _request(vocab.SHARE_SERVER, server.id, "delete", server.host))
        return server

    # Share groups and group snapshots ------------------------------------------

    def create_share_group(self, name: str | None = None, backend: str | None = None,
                           share_server_id: str | None = None) -> models.ShareGroup:
        check_name(name, models.ShareGroup, "share group")
        host = self.host_for(backend)
        if share_server_id:
            server = self._get(models.ShareServer, share_server_id, "share server")
            self._need(server.status, (vocab.ACTIVE,), f"share server {share_server_id}", "use")
        group = models.ShareGroup(id=models.new_id(), name=name, host=host, status=vocab.CREATING,
                             share_server_id=share_server_id)
        db_api.add_with_request(
            self.db, [group], _request(vocab.SHARE_GROUP, group.id, "create", host)
        )
        return group

    def delete_share_group(self, group_id: str) -> models.ShareGroup:
        group = self._get(models.ShareGroup, group_id, "share group")
        if resources.live_count(self.db, models.Share, share_group_id=group.id):
            raise InvalidRequest(f"share group {group_id} has shares: delete them first")
        if resources.live_count(self.db, models.ShareGroupSnapshot, share_group_id=group.id):
            raise InvalidRequest(f"share group {group_id} has snapshots: delete them first")
        self._transition(models.ShareGroup, group.id, group.status, (vocab.AVAILABLE, vocab.ERROR),
                         vocab.DELETING, f"share group {group_id}", "delete",
                         _request(vocab.SHARE_GROUP, group.id, "delete", group.host))
        return group

    def create_group_snapshot(self, group_id: str, name: str | None = None
                              ) -> models.ShareGroupSnapshot:
        check_name(name, models.ShareGroupSnapshot, "group snapshot")
        group = self._get(models.ShareGroup, group_id, "share group")
        self._need(group.status, (vocab.AVAILABLE,), f"share group {group_id}", "snapshot")
        gsnap = models.ShareGroupSnapshot(id=models.new_id(), share_group_id=group.id, name=name,
                                     status=vocab.CREATING)
        db_api.add_with_request(
            self.db, [gsnap], _request(vocab.GROUP_SNAPSHOT, gsnap.id, "create", group.host)
        )
        return gsnap

    def delete_group_snapshot(self, gsnap_id: str) -> models.ShareGroupSnapshot:
        gsnap = self._get(models.ShareGroupSnapshot, gsnap_id, "group snapshot")
        group = db_api.get(self.db, models.ShareGroup, gsnap.share_group_id, include_deleted=True)
        self._transition(
            models.ShareGroupSnapshot,
            gsnap.id,
            gsnap.status,
            (vocab.AVAILABLE, vocab.ERROR),
            vocab.DELETING,
            f"group snapshot {gsnap_id}",
            "delete",
            _request(vocab.GROUP_SNAPSHOT, gsnap.id, "delete", group.host),
        )
        return gsnap

    # Backups -----------------------------------------------------------------

    def create_backup(self, share_id: str, name: str | None = None) -> models.ShareBackup:
        check_name(name, models.ShareBackup, "backup")
        share, inst = self.share(share_id)
        backup = models.ShareBackup(id=models.new_id(), share_id=share.id, name=name,
                               host=views.host_of(inst.host), status=vocab.CREATING,
                               size=share.size)
        # The share is busy (backup_creating) until the backup is done.
        self._need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "back up")
        if not db_api.transition_with_request(
            self.db,
            [(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
              {"status": vocab.BACKUP_CREATING})],
            _request(vocab.BACKUP, backup.id, "create", backup.host),
            rows=[backup],
        ):
            raise InvalidRequest(f"cannot back up share {share_id}: it changed meanwhile")
        return backup

    def delete_backup(self, backup_id: str) -> models.ShareBackup:
        backup = self._get(models.ShareBackup, backup_id, "backup")
        self._transition(
            models.ShareBackup,
            backup.id,
            backup.status,
            (vocab.AVAILABLE, vocab.ERROR),
            vocab.DELETING,
            f"backup {backup_id}",
            "delete",
            _request(vocab.BACKUP, backup.id, "delete", backup.host),
        )
        return backup

    def restore_backup(self, backup_id: str) -> models.ShareBackup:
        backup = self._get(models.ShareBackup, backup_id, "backup")
        share, inst = self.share(backup.share_id)
        self._need(inst.status, (vocab.AVAILABLE,), f"share {share.id}", "restore into")
        self._transition(
            models.ShareBackup, backup.id, backup.status, (vocab.AVAILABLE,), vocab.RESTORING,
            f"backup {backup_id}", "restore",
            _request(vocab.BACKUP, backup.id, "restore", backup.host),
            extra=[(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
                    {"status": vocab.BACKUP_RESTORING})],
            values={"restore_progress": None},
        )
        return backup

    # Admin -----------------------------------------------------------------

    def reset_state(self, rtype: str, ident: str, status: str) -> Any:
        """Set any valid status of the type, unconditionally (admin)."""
        valid = vocab.VALID_STATUSES[rtype]
        if status not in valid:
            raise InvalidRequest(
                f"invalid status {status!r} for {rtype.replace('_', ' ')}; valid: "
                + ", ".join(valid)
            )
        if rtype == vocab.SHARE:
            _, row = self.share(ident)
        elif rtype == vocab.SNAPSHOT:
            _, row = self.snapshot(ident)
        elif rtype == vocab.REPLICA:
            row = self.replica(ident)
        else:
            row = self._get(STATUS_MODEL[rtype], ident, rtype.replace("_", " "))
        model = type(row)
        db_api.conditional_update(self.db, model, row.id, {}, {"status": status})
        return row
