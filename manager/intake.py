"""Request intake: validate a user's request, then write the resource in its
transient status and a request row in one transaction.

Nothing here talks to a driver or a daemon: a manager serving the target host
claims the request. A status change is a conditional update, so two users
racing for one resource cannot both start an operation on it.
"""

from __future__ import annotations

import unicodedata
from typing import Any, TypeVar

from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import capacity as db_capacity
from sharemgr.db import models, quiet
from sharemgr.db.engine import Database
from sharemgr.db.records import Record
from sharemgr.manager import (
    access,
    delete_plans,
    hosts,
    kinds,
    manage_ops,
    migration_plans,
    plans,
    replica_ops,
    revert_ops,
)

# One class for every refusal: a bad request or a resource not in a state
# for the operation. Nothing was written.
InvalidRequest = plans.Refused


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


def check_name(name: str | None, model: models.ModelClass, what: str) -> None:
    """A name must fit its column (the same limit on every database) and
    hold no control character: a newline in one breaks every line-oriented
    reader of ``-f value`` output."""
    limit = model.__table__.c.name.type.length
    if name is not None and len(name) > limit:
        raise InvalidRequest(f"{what} name is {len(name)} characters long; at most {limit}")
    if name is not None and any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidRequest(f"{what} name {name!r} holds a control character (a newline, "
                             "a tab, ...)")


T = TypeVar("T")


def handles_servers(conf: cfg.ConfigOpts, backend: str) -> bool:
    """Whether ``backend``'s configuration says it handles share servers."""
    try:
        return bool(conf[backend].driver_handles_share_servers)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return False


class Intake:
    def __init__(self, db: Database, conf: cfg.ConfigOpts) -> None:
        self.db = db
        self.conf = conf
        # Whether the last write was all of it, no operation queued (a forced
        # delete of a resource whose create no engine took: delete_plans.py).
        self.done_at_once = False

    # Helpers ---------------------------------------------------------------

    def host_for(self, backend: str | None, host: str | None = None) -> str:
        """'host@backend' of a new resource: this machine's ``host`` unless
        ``host`` names another engine's; the backend must be one this
        configuration enables (engines of one deployment share them)."""
        backends = list(self.conf.enabled_share_backends)
        if not backends:
            raise InvalidRequest("no backend is enabled (enabled_share_backends is empty)")
        backend = backend or backends[0]
        if backend not in backends:
            raise InvalidRequest(
                f"unknown backend {backend!r}; enabled backends: {', '.join(backends)}"
            )
        if host is not None and (not host or "@" in host or "#" in host):
            raise InvalidRequest(f"invalid host {host!r}: a host name, as in the "
                                 "engine's [DEFAULT] host")
        host = f"{host or self.conf.host}@{backend}"
        if len(host) > models.BACKEND_HOST:
            raise InvalidRequest(f"'{host}' is longer than {models.BACKEND_HOST} characters: "
                                 "use a shorter backend name")
        return host

    def dhss(self, host: str) -> bool:
        return handles_servers(self.conf, hosts.backend_of(host))

    def _write(self, plan: plans.Plan, what: str, model: type[T]) -> T:
        """The plan's rows, changes and pending request in one transaction; a
        concurrent change makes it fail with a clear message. Returns the
        resource's row as the plan wrote or read it (checked against ``model``
        before anything is written)."""
        assert isinstance(plan.row, model), (plan.row, model)
        # No operation: the plan's changes are all of it (a forced delete of
        # a resource whose create no engine took: delete_plans.py).
        action = plan.op.action if plan.op is not None else vocab.ACTION_DELETE
        try:
            written = db_api.transition_with_request(
                self.db, plan.changes, plan.op.request() if plan.op is not None else None,
                rows=plan.add, claims=plan.claims, conditions=plan.conditions)
        except quiet.Busy as exc:  # busy meanwhile (its plan's early check passed)
            raise InvalidRequest(str(exc))
        except db_capacity.NoRoom as exc:
            # Placed meanwhile by another request: the room is gone.
            raise InvalidRequest(f"cannot {action} {what}: {exc} (placed meanwhile "
                                 "by other requests)")
        if not written:
            raise InvalidRequest(f"cannot {action} {what}: it changed meanwhile, "
                                 "try again")
        self.done_at_once = plan.op is None
        return plan.row

    def _delete(self, type_: str, ident: str, force: bool, model: type[T]) -> T:
        return self._write(delete_plans.delete(self.db, type_, ident, force),
                           f"{type_.replace('_', ' ')} {ident}", model)

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
        host: str | None = None,
    ) -> models.Share:
        check_size(size)
        check_name(name, models.Share, "share")
        proto = (proto or "").upper()
        if proto not in vocab.PROTOCOLS:
            raise InvalidRequest(f"unknown protocol {proto!r}; one of "
                                 f"{', '.join(vocab.PROTOCOLS)}")
        if snapshot_id and backend is None:
            # A share from a snapshot goes where the snapshot is.
            _, snap_inst = plans.snapshot(self.db, snapshot_id)
            found = kinds.SNAPSHOT_INSTANCE.host_of(self.db, snap_inst)
            if found is None:
                raise InvalidRequest(f"snapshot {snapshot_id} is on no backend: its share "
                                     "is gone")
            host = found
        elif share_group_id and backend is None and host is None:
            # A share goes where its group is (as Manila places it).
            host = plans.get(self.db, models.ShareGroup, share_group_id, "share group").host
        else:
            host = self.host_for(backend, host)
        plan = plans.create_share(self.db, host, self.dhss(host), size, proto, name,
                                  snapshot_id, share_server_id, share_group_id, project_id)
        return self._write(plan, "share", models.Share)

    def delete_share(self, share_id: str, force: bool = False) -> Record:
        # The share as its delete plan read it: a plain record (db/resources.py).
        return self._delete(vocab.SHARE, share_id, force, Record)

    def resize_share(self, share_id: str, new_size: int, extend: bool) -> models.Share:
        check_size(new_size, "new size")
        plan = plans.resize_share(self.db, share_id, new_size, extend=extend)
        return self._write(plan, f"share {share_id}", models.Share)

    # Access rules ------------------------------------------------------------

    def allow_access(self, share_id: str, access_type: str, access_to: str,
                     access_level: str = "rw") -> models.ShareAccessRule:
        spec = access.check(access_type, access_to, access_level)
        return self._write(access.allow(self.db, share_id, spec), f"share {share_id}",
                           models.ShareAccessRule)

    def deny_access(self, share_id: str, rule_id: str) -> models.ShareAccessRule:
        return self._write(access.deny(self.db, share_id, rule_id), f"share {share_id}",
                           models.ShareAccessRule)

    # Snapshots -------------------------------------------------------------

    def create_snapshot(self, share_id: str, name: str | None = None) -> models.ShareSnapshot:
        check_name(name, models.ShareSnapshot, "snapshot")
        return self._write(plans.create_snapshot(self.db, share_id, name),
                           f"snapshot of share {share_id}", models.ShareSnapshot)

    def delete_snapshot(self, snapshot_id: str, force: bool = False) -> models.ShareSnapshot:
        return self._delete(vocab.SNAPSHOT, snapshot_id, force, models.ShareSnapshot)

    # Replicas --------------------------------------------------------------

    def create_replica(self, share_id: str, backend: str | None = None,
                       host: str | None = None) -> models.ShareInstance:
        _, inst = plans.share(self.db, share_id)
        host = self.host_for(backend, host) if backend or host else inst.host
        return self._write(plans.create_replica(self.db, share_id, host, self.dhss(host)),
                           f"share {share_id}", models.ShareInstance)

    def replica(self, replica_id: str) -> models.ShareInstance:
        return plans.replica(self.db, replica_id)

    def delete_share_instance(self, instance_id: str, force: bool = False
                              ) -> models.ShareInstance:
        """An instance a migration left behind (``delete_plans``)."""
        return self._delete(vocab.SHARE_INSTANCE, instance_id, force, models.ShareInstance)

    def delete_replica(self, replica_id: str, force: bool = False) -> models.ShareInstance:
        return self._delete(vocab.REPLICA, replica_id, force, models.ShareInstance)

    def promote_replica(self, replica_id: str) -> models.ShareInstance:
        return self._write(replica_ops.plan_promote(self.db, replica_id),
                           f"replica {replica_id}", models.ShareInstance)

    def resync_replica(self, replica_id: str) -> models.ShareInstance:
        return self._write(replica_ops.plan_resync(self.db, replica_id),
                           f"replica {replica_id}", models.ShareInstance)

    def revert_share(self, snapshot_id: str) -> models.Share:
        return self._write(revert_ops.plan_revert(self.db, snapshot_id),
                           f"snapshot {snapshot_id}", models.Share)

    # Migration (manager/migration_plans.py) -----------------------------------

    def migration_start(self, req: migration_plans.Request) -> models.Share:
        return self._write(migration_plans.start(self.db, req), f"share {req.share_id}",
                           models.Share)

    def migration_complete(self, share_id: str) -> models.Share:
        return self._write(migration_plans.complete(self.db, share_id), f"share {share_id}",
                           models.Share)

    def migration_cancel(self, share_id: str) -> models.Share:
        return self._write(migration_plans.cancel(self.db, share_id), f"share {share_id}",
                           models.Share)

    # Share servers -----------------------------------------------------------

    def create_share_server(self, backend: str | None = None,
                            host: str | None = None) -> models.ShareServer:
        host = self.host_for(backend, host)
        return self._write(plans.create_share_server(host, self.dhss(host)), "share server",
                           models.ShareServer)

    def delete_share_server(self, server_id: str, force: bool = False) -> models.ShareServer:
        return self._delete(vocab.SHARE_SERVER, server_id, force, models.ShareServer)

    # Share groups and group snapshots ------------------------------------------

    def create_share_group(self, name: str | None = None, backend: str | None = None,
                           share_server_id: str | None = None,
                           host: str | None = None) -> models.ShareGroup:
        check_name(name, models.ShareGroup, "share group")
        plan = plans.create_share_group(self.db, self.host_for(backend, host), name,
                                        share_server_id)
        return self._write(plan, "share group", models.ShareGroup)

    def delete_share_group(self, group_id: str, force: bool = False) -> models.ShareGroup:
        return self._delete(vocab.SHARE_GROUP, group_id, force, models.ShareGroup)

    def create_group_snapshot(self, group_id: str, name: str | None = None
                              ) -> models.ShareGroupSnapshot:
        check_name(name, models.ShareGroupSnapshot, "group snapshot")
        return self._write(plans.create_group_snapshot(self.db, group_id, name),
                           f"snapshot of share group {group_id}", models.ShareGroupSnapshot)

    def delete_group_snapshot(self, gsnap_id: str, force: bool = False
                              ) -> models.ShareGroupSnapshot:
        return self._delete(vocab.GROUP_SNAPSHOT, gsnap_id, force, models.ShareGroupSnapshot)

    # Backups -----------------------------------------------------------------

    def create_backup(self, share_id: str, name: str | None = None) -> models.ShareBackup:
        check_name(name, models.ShareBackup, "backup")
        return self._write(plans.create_backup(self.db, share_id, name), f"share {share_id}",
                           models.ShareBackup)

    def delete_backup(self, backup_id: str, force: bool = False) -> models.ShareBackup:
        return self._delete(vocab.BACKUP, backup_id, force, models.ShareBackup)

    def restore_backup(self, backup_id: str) -> models.ShareBackup:
        return self._write(plans.restore_backup(self.db, backup_id), f"backup {backup_id}",
                           models.ShareBackup)

    # Manage and unmanage (manager/manage_ops.py) ---------------------------------

    def manage_share(self, export_path: str, proto: str, backend: str,
                     name: str | None = None, driver_options: dict[str, str] | None = None
                     ) -> models.Share:
        check_name(name, models.Share, "share")
        proto = (proto or "").upper()
        if proto not in vocab.PROTOCOLS:
            raise InvalidRequest(f"unknown protocol {proto!r}; one of "
                                 f"{', '.join(vocab.PROTOCOLS)}")
        host = self.host_for(backend)
        plan = manage_ops.plan_manage_share(self.db, host, self.dhss(host), export_path, proto,
                                            name, driver_options)
        return self._write(plan, "share", models.Share)

    def manage_snapshot(self, share_id: str, provider_location: str, name: str | None = None,
                        driver_options: dict[str, str] | None = None) -> models.ShareSnapshot:
        check_name(name, models.ShareSnapshot, "snapshot")
        return self._write(manage_ops.plan_manage_snapshot(self.db, share_id,
                                                           provider_location, name,
                                                           driver_options),
                           f"snapshot of share {share_id}", models.ShareSnapshot)

    def manage_share_server(self, identifier: str, backend: str,
                            driver_options: dict[str, str] | None = None
                            ) -> models.ShareServer:
        host = self.host_for(backend)
        plan = manage_ops.plan_manage_server(self.db, host, self.dhss(host), identifier,
                                             driver_options)
        return self._write(plan, "share server", models.ShareServer)

    def unmanage(self, type_: str, ident: str) -> models.Base:
        return self._write(manage_ops.plan_unmanage(self.db, type_, ident),
                           f"{type_.replace('_', ' ')} {ident}", models.Base)

    # Admin -----------------------------------------------------------------

    def reset_state(self, rtype: str, ident: str, status: str) -> Any:
        """Set any valid status of the type, unconditionally (admin)."""
        valid = vocab.VALID_STATUSES[rtype]
        if status not in valid:
            raise InvalidRequest(
                f"invalid status {status!r} for {rtype.replace('_', ' ')}; valid: "
                + ", ".join(valid)
            )
        row: Any  # the mapped row of whichever type
        if rtype == vocab.SHARE:
            _, row = plans.share(self.db, ident)
        elif rtype == vocab.SNAPSHOT:
            _, row = plans.snapshot(self.db, ident)
        elif rtype == vocab.REPLICA:
            row = plans.replica(self.db, ident)
        else:
            row = plans.get(self.db, kinds.STATUS_KIND[rtype].model, ident,
                            rtype.replace("_", " "))
        db_api.conditional_update(self.db, type(row), row.id, {}, {"status": status})
        return row
