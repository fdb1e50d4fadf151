"""The physical resources behind stack resources.

A stack resource row's ``physical_id`` names a share (the logical share; its
primary instance is what the driver sees), a snapshot, a replica (a share
instance), a share server, a share group or a group snapshot. This module
observes them (:func:`observe`), says where a new one goes
(:func:`target_host`) and plans what creating, updating in place or deleting
one writes (:func:`plan_create`, :func:`plan_update`, :func:`plan_delete`):
the rows in their transient status and the share operation that finishes the
job (:class:`Op`), which the worker records and runs through
``Operations`` — the same code, locks and statuses as a user's request.

The checks mirror ``manager/intake.py`` (a snapshot must be available, a
share on a backend that handles share servers needs one, …): a plan that
cannot be carried out raises :class:`CheckError`, which fails the node with
its message.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sharemgr.common import vocab
from sharemgr.convergence.template import physical_name
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.manager import views
from sharemgr.manager.intake import DELETABLE, SERVER_DELETABLE
from sharemgr.manager.operations import Operations

# What an observation says about a physical resource.
GONE = "gone"  # never made, deleted, or removed behind our back
OK = "ok"  # available / active: usable
BUSY = "busy"  # in a transient status: an operation is under way
ERROR = "error"  # any other status (error, extending_error, ...): unusable

ANY_HOST = "*"  # "*@backend": any engine that serves the backend
SNAPSHOT_DELETABLE = (vocab.AVAILABLE, vocab.ERROR, vocab.ERROR_DELETING, vocab.MANAGE_ERROR,
                      vocab.UNMANAGE_ERROR)
GROUP_DELETABLE = (vocab.AVAILABLE, vocab.ERROR)


class CheckError(Exception):
    """The physical resource cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class Observed:
    state: str
    status: str | None = None
    host: str | None = None  # 'host@backend', pool stripped
    attributes: Mapping[str, Any] = field(default_factory=dict)
    actual: Mapping[str, Any] = field(default_factory=dict)  # in-place properties as they are


@dataclass(frozen=True)
class Op:
    """A share operation: a request row (recorded running) and a handler call."""

    rtype: str
    ident: str
    action: str
    host: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def request(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        return {"resource_type": self.rtype, "resource_id": self.ident, "action": self.action,
                "host": self.host, "args": {**self.args, **extra}}


@dataclass
class Plan:
    physical_id: str | None = None
    add: list = field(default_factory=list)
    changes: list = field(default_factory=list)
    op: Op | None = None


@dataclass(frozen=True)
class Placement:
    """Where this engine can put new physical resources."""

    host: str  # the engine's host name
    backends: Mapping[str, bool]  # backend -> driver_handles_share_servers

    @property
    def default_backend(self) -> str | None:
        return next(iter(self.backends), None)

    def serves(self, target: str | None) -> bool:
        """Whether this engine can act on ``target`` ('host@backend',
        '*@backend' or None: any engine — one without backends fails a node
        that needs one, rather than passing it around)."""
        if target is None:
            return True
        host, _, backend = views.host_of(target).partition("@")
        return backend in self.backends and host in (ANY_HOST, self.host)

    def concrete(self, target: str | None) -> str:
        if target is None:
            backend = self.default_backend
            if backend is None:
                raise CheckError("this engine serves no backend")
            return f"{self.host}@{backend}"
        host, _, backend = target.partition("@")
        return f"{self.host}@{backend}" if host == ANY_HOST else target


def _state(status: str | None) -> str:
    if status is None or status == vocab.DELETED:
        return GONE
    if status in (vocab.AVAILABLE, vocab.ACTIVE):
        return OK
    if status in vocab.TRANSIENT_STATUSES:
        return BUSY
    return ERROR


def _obs(status: str, host: str | None, attributes: dict[str, Any],
         actual: dict[str, Any] | None = None) -> Observed:
    return Observed(_state(status), status, views.host_of(host) if host else None,
                    attributes, actual or {})


def _get(db: Database, model: type, ident: str | None) -> Any:
    return db_api.get(db, model, ident) if ident else None


# Observation ---------------------------------------------------------------------------


def observe(db: Database, type_: str, physical_id: str | None) -> Observed:
    """The physical resource as the database sees it now."""
    if not physical_id:
        return Observed(GONE)
    return _OBSERVERS[type_](db, physical_id)


def _observe_share(db: Database, pid: str) -> Observed:
    share = _get(db, models.Share, pid)
    inst = resources.primary_instance(db, pid) if share else None
    if share is None or inst is None:
        return Observed(GONE)
    attrs = {"id": share.id, "name": share.name, "size": share.size,
             "proto": share.share_proto, "status": inst.status, "host": inst.host,
             "export_locations": list(inst.export_locations or [])}
    return _obs(inst.status, inst.host, attrs, {"size": share.size})


def _observe_snapshot(db: Database, pid: str) -> Observed:
    snap = _get(db, models.ShareSnapshot, pid)
    inst = resources.snapshot_instance_of(db, pid) if snap else None
    if snap is None or inst is None:
        return Observed(GONE)
    parent = db_api.get(db, models.ShareInstance, inst.share_instance_id, include_deleted=True)
    attrs = {"id": snap.id, "name": snap.name, "size": snap.size, "status": inst.status,
             "share_id": snap.share_id}
    return _obs(inst.status, parent.host if parent else None, attrs)


def _observe_replica(db: Database, pid: str) -> Observed:
    inst = _get(db, models.ShareInstance, pid)
    if inst is None:
        return Observed(GONE)
    attrs = {"id": inst.id, "status": inst.status, "host": inst.host,
             "replica_state": inst.replica_state,
             "export_locations": list(inst.export_locations or []), "share_id": inst.share_id}
    return _obs(inst.status, inst.host, attrs)


def _observe_server(db: Database, pid: str) -> Observed:
    row = _get(db, models.ShareServer, pid)
    if row is None:
        return Observed(GONE)
    attrs = {"id": row.id, "status": row.status, "host": row.host,
             "backend_details": dict(row.backend_details or {})}
    return _obs(row.status, row.host, attrs)


def _observe_group(db: Database, pid: str) -> Observed:
    row = _get(db, models.ShareGroup, pid)
    if row is None:
        return Observed(GONE)
    attrs = {"id": row.id, "name": row.name, "status": row.status, "host": row.host}
    return _obs(row.status, row.host, attrs)


def _observe_group_snapshot(db: Database, pid: str) -> Observed:
    row = _get(db, models.ShareGroupSnapshot, pid)
    if row is None:
        return Observed(GONE)
    group = db_api.get(db, models.ShareGroup, row.share_group_id, include_deleted=True)
    attrs = {"id": row.id, "name": row.name, "status": row.status,
             "share_group_id": row.share_group_id}
    return _obs(row.status, group.host if group else None, attrs)


_OBSERVERS = {
    "share": _observe_share,
    "snapshot": _observe_snapshot,
    "replica": _observe_replica,
    "share_server": _observe_server,
    "share_group": _observe_group,
    "group_snapshot": _observe_group_snapshot,
}


# Placement ---------------------------------------------------------------------------------


def _parent_host(db: Database, model: type, ident: str, what: str) -> str:
    if model is models.ShareSnapshot:
        inst = resources.snapshot_instance_of(db, ident)
        parent = db_api.get(db, models.ShareInstance, inst.share_instance_id) if inst else None
        host = parent.host if parent else None
    elif model is models.Share:
        inst = resources.primary_instance(db, ident)
        host = inst.host if inst else None
    else:
        row = _get(db, model, ident)
        host = row.host if row else None
    if host is None:
        raise CheckError(f"{what} {ident} does not exist")
    return views.host_of(host)


def target_host(db: Database, type_: str, props: Mapping[str, Any]) -> str | None:
    """Where a new physical resource with ``props`` goes: its parent's
    'host@backend' (a snapshot, replica or group snapshot lives with its
    share or group; a share made from a snapshot, in a group or on a server
    with that one), else '*@backend' for the ``backend`` property, else None
    (the default backend of whichever engine runs the check)."""
    parent = {
        "snapshot": (models.Share, props.get("share"), "share"),
        "replica": (models.Share, props.get("share"), "share"),
        "group_snapshot": (models.ShareGroup, props.get("share_group"), "share group"),
    }.get(type_)
    if type_ == "share":
        for prop, model, what in (("snapshot", models.ShareSnapshot, "snapshot"),
                                  ("share_group", models.ShareGroup, "share group"),
                                  ("share_server", models.ShareServer, "share server")):
            if props.get(prop):
                parent = (model, props[prop], what)
                break
    if parent is not None:
        model, ident, what = parent
        host = _parent_host(db, model, ident, what)
        backend = props.get("backend")
        if backend and views.backend_of(host) != backend:
            raise CheckError(f"backend {backend!r} differs from the {what}'s ({host})")
        return host
    backend = props.get("backend")
    return f"{ANY_HOST}@{backend}" if backend else None


# Plans ---------------------------------------------------------------------------------------


def _need(status: str, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise CheckError(f"{what} is {status} (needs {' or '.join(allowed)})")


def _available_share(db: Database, share_id: str) -> tuple[models.Share, models.ShareInstance]:
    share = _get(db, models.Share, share_id)
    inst = resources.primary_instance(db, share_id) if share else None
    if share is None or inst is None:
        raise CheckError(f"share {share_id} does not exist")
    _need(inst.status, (vocab.AVAILABLE,), f"share {share_id}")
    return share, inst


def plan_create(db: Database, type_: str, props: Mapping[str, Any], name: str,
                placement: Placement) -> Plan:
    """Rows of a new physical resource named ``name`` in its creating status
    and the operation that creates it on the backend."""
    target = placement.concrete(target_host(db, type_, props))
    return _CREATORS[type_](db, props, name, target, placement)


def _create_share(db: Database, p: Mapping[str, Any], name: str, host: str,
                  placement: Placement) -> Plan:
    status = vocab.CREATING
    if p.get("snapshot"):
        snap = _get(db, models.ShareSnapshot, p["snapshot"])
        snap_inst = resources.snapshot_instance_of(db, snap.id) if snap else None
        if snap is None or snap_inst is None:
            raise CheckError(f"snapshot {p['snapshot']} does not exist")
        _need(snap_inst.status, (vocab.AVAILABLE,), f"snapshot {snap.id}")
        if p["size"] < snap.size:
            raise CheckError(f"size {p['size']} is smaller than snapshot {snap.id} ({snap.size})")
        status = vocab.CREATING_FROM_SNAPSHOT
    dhss = placement.backends.get(views.backend_of(host), False)
    server_id = p.get("share_server")
    if dhss and not server_id:
        raise CheckError(f"backend {views.backend_of(host)!r} handles share servers: "
                         "give the share a share_server")
    if server_id:
        if not dhss:
            raise CheckError(f"backend {views.backend_of(host)!r} does not handle share servers")
        server = _get(db, models.ShareServer, server_id)
        if server is None:
            raise CheckError(f"share server {server_id} does not exist")
        _need(server.status, (vocab.ACTIVE,), f"share server {server_id}")
    if p.get("share_group"):
        group = _get(db, models.ShareGroup, p["share_group"])
        if group is None:
            raise CheckError(f"share group {p['share_group']} does not exist")
        _need(group.status, (vocab.AVAILABLE,), f"share group {group.id}")
    share = models.Share(id=models.new_id(), name=name, size=p["size"], share_proto=p["proto"],
                    snapshot_id=p.get("snapshot"), share_group_id=p.get("share_group"))
    inst = models.ShareInstance(id=models.new_id(), share_id=share.id, host=host, status=status,
                           share_server_id=server_id, export_locations=[])
    return Plan(share.id, [share, inst], [], Op(vocab.SHARE_INSTANCE, inst.id, "create", host))


def _create_snapshot(db: Database, p: Mapping[str, Any], name: str, host: str,
                     placement: Placement) -> Plan:
    share, inst = _available_share(db, p["share"])
    snap = models.ShareSnapshot(id=models.new_id(), share_id=share.id, name=name, size=share.size,
                           project_id=share.project_id)
    snap_inst = models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=snap.id,
                                        share_instance_id=inst.id, status=vocab.CREATING)
    return Plan(snap.id, [snap, snap_inst], [],
                Op(vocab.SNAPSHOT_INSTANCE, snap_inst.id, "create", inst.host))


def _create_replica(db: Database, p: Mapping[str, Any], name: str, host: str,
                    placement: Placement) -> Plan:
    share, inst = _available_share(db, p["share"])
    if placement.backends.get(views.backend_of(inst.host), False):
        raise CheckError("replicas on backends that handle share servers are not supported")
    replica = models.ShareInstance(id=models.new_id(), share_id=share.id, host=inst.host,
                              status=vocab.CREATING, replica_state=vocab.REPLICA_OUT_OF_SYNC,
                              export_locations=[])
    changes = []
    if inst.replica_state is None:
        # The first replica makes the original instance the active replica.
        changes.append((models.ShareInstance, inst.id, {"replica_state": None},
                        {"replica_state": vocab.REPLICA_ACTIVE}))
    return Plan(replica.id, [replica], changes,
                Op(vocab.REPLICA, replica.id, "create", inst.host))


def _create_server(db: Database, p: Mapping[str, Any], name: str, host: str,
                   placement: Placement) -> Plan:
    if not placement.backends.get(views.backend_of(host), False):
        raise CheckError(f"backend {views.backend_of(host)!r} does not handle share servers")
    server = models.ShareServer(id=models.new_id(), host=host, status=vocab.CREATING,
                                backend_details={})
    return Plan(server.id, [server], [], Op(vocab.SHARE_SERVER, server.id, "create", host))


def _create_group(db: Database, p: Mapping[str, Any], name: str, host: str,
                  placement: Placement) -> Plan:
    group = models.ShareGroup(id=models.new_id(), name=name, host=host, status=vocab.CREATING)
    return Plan(group.id, [group], [], Op(vocab.SHARE_GROUP, group.id, "create", host))


def _create_group_snapshot(db: Database, p: Mapping[str, Any], name: str, host: str,
                           placement: Placement) -> Plan:
    group = _get(db, models.ShareGroup, p["share_group"])
    if group is None:
        raise CheckError(f"share group {p['share_group']} does not exist")
    _need(group.status, (vocab.AVAILABLE,), f"share group {group.id}")
    gsnap = models.ShareGroupSnapshot(id=models.new_id(), share_group_id=group.id, name=name,
                                 status=vocab.CREATING)
    return Plan(gsnap.id, [gsnap], [], Op(vocab.GROUP_SNAPSHOT, gsnap.id, "create", group.host))


_CREATORS = {
    "share": _create_share,
    "snapshot": _create_snapshot,
    "replica": _create_replica,
    "share_server": _create_server,
    "share_group": _create_group,
    "group_snapshot": _create_group_snapshot,
}

_NAMED = {"share": models.Share, "snapshot": models.ShareSnapshot, "share_group": models.ShareGroup,
          "group_snapshot": models.ShareGroupSnapshot}


def plan_update(db: Database, type_: str, physical_id: str, changes: Mapping[str, Any],
                name: str | None) -> Plan:
    """Apply in-place changes: ``name`` is a database change (as Manila's
    share update; ``name`` is the new physical name), ``size`` extends or
    shrinks the share to the target unless it has that size already (a
    resize cut short by a crash and settled by reconciliation)."""
    plan = Plan(physical_id)
    if "name" in changes and type_ in _NAMED:
        plan.changes.append((_NAMED[type_], physical_id, {}, {"name": name}))
    if "size" in changes and type_ == "share":
        share = _get(db, models.Share, physical_id)
        inst = resources.primary_instance(db, physical_id) if share else None
        if share is None or inst is None:
            raise CheckError(f"share {physical_id} does not exist")
        new_size = int(changes["size"])
        if new_size != share.size:
            _need(inst.status, (vocab.AVAILABLE,), f"share {physical_id}")
            action = "extend" if new_size > share.size else "shrink"
            status = vocab.EXTENDING if action == "extend" else vocab.SHRINKING
            plan.changes.append((models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
                                 {"status": status}))
            plan.op = Op(vocab.SHARE_INSTANCE, inst.id, action, inst.host, {"new_size": new_size})
    return plan


def plan_delete(db: Database, type_: str, physical_id: str) -> Plan | None:
    """The deleting status and the delete operation; None if it is gone."""
    if observe(db, type_, physical_id).state == GONE:
        return None
    return _DELETERS[type_](db, physical_id)


def _deleting(model: type, ident: str, status: str, allowed: tuple[str, ...], what: str,
              op: Op) -> Plan:
    _need(status, allowed, what)
    return Plan(None, [], [(model, ident, {"status": status}, {"status": vocab.DELETING})], op)


def _delete_share(db: Database, pid: str) -> Plan:
    inst = resources.primary_instance(db, pid)
    if resources.live_count(db, models.ShareSnapshot, share_id=pid):
        raise CheckError(f"share {pid} has snapshots that are not part of the stack")
    others = [i for i in db_api.query(db, models.ShareInstance,
                                      {"share_id": pid}) if i.id != inst.id]
    if others:
        raise CheckError(f"share {pid} has replicas that are not part of the stack")
    return _deleting(models.ShareInstance, inst.id, inst.status, DELETABLE, f"share {pid}",
                     Op(vocab.SHARE_INSTANCE, inst.id, "delete", inst.host))


def _delete_snapshot(db: Database, pid: str) -> Plan:
    inst = resources.snapshot_instance_of(db, pid)
    parent = db_api.get(db, models.ShareInstance, inst.share_instance_id, include_deleted=True)
    return _deleting(models.ShareSnapshotInstance, inst.id, inst.status, SNAPSHOT_DELETABLE,
                     f"snapshot {pid}", Op(vocab.SNAPSHOT_INSTANCE, inst.id, "delete", parent.host))


def _delete_replica(db: Database, pid: str) -> Plan:
    inst = db_api.get(db, models.ShareInstance, pid)
    return _deleting(models.ShareInstance, pid, inst.status, DELETABLE, f"replica {pid}",
                     Op(vocab.REPLICA, pid, "delete", inst.host))


def _delete_server(db: Database, pid: str) -> Plan:
    row = db_api.get(db, models.ShareServer, pid)
    if resources.live_count(db, models.ShareInstance, share_server_id=pid) or \
            resources.live_count(db, models.ShareGroup, share_server_id=pid):
        raise CheckError(f"share server {pid} is in use by shares or groups outside the stack")
    return _deleting(models.ShareServer, pid, row.status, SERVER_DELETABLE, f"share server {pid}",
                     Op(vocab.SHARE_SERVER, pid, "delete", row.host))


def _delete_group(db: Database, pid: str) -> Plan:
    row = db_api.get(db, models.ShareGroup, pid)
    if resources.live_count(db, models.Share, share_group_id=pid) or \
            resources.live_count(db, models.ShareGroupSnapshot, share_group_id=pid):
        raise CheckError(f"share group {pid} has shares or snapshots outside the stack")
    return _deleting(models.ShareGroup, pid, row.status, GROUP_DELETABLE, f"share group {pid}",
                     Op(vocab.SHARE_GROUP, pid, "delete", row.host))


def _delete_group_snapshot(db: Database, pid: str) -> Plan:
    row = db_api.get(db, models.ShareGroupSnapshot, pid)
    group = db_api.get(db, models.ShareGroup, row.share_group_id, include_deleted=True)
    return _deleting(models.ShareGroupSnapshot, pid, row.status, GROUP_DELETABLE,
                     f"group snapshot {pid}", Op(vocab.GROUP_SNAPSHOT, pid, "delete", group.host))


_DELETERS = {
    "share": _delete_share,
    "snapshot": _delete_snapshot,
    "replica": _delete_replica,
    "share_server": _delete_server,
    "share_group": _delete_group,
    "group_snapshot": _delete_group_snapshot,
}


def new_name(stack_name: str, resource_name: str, props: Mapping[str, Any]) -> str:
    """The physical name: ``<stack>-<resource>-<suffix>``, the suffix being
    the ``name`` property when given (so a rename keeps the prefix that tells
    which stack and resource an object belongs to), else random."""
    return physical_name(stack_name, resource_name, props.get("name"))


def run(operations: Operations, op: Op, request_id: int | None) -> None:
    """Carry out ``op`` in this thread through the share operation's handler
    (its tooz lock, driver call and terminal status). Raises
    ``OperationFailed`` (the resource is in its error status) or ``Stale``."""
    req = types.SimpleNamespace(id=request_id, resource_type=op.rtype, resource_id=op.ident,
                                action=op.action, args=dict(op.args))
    operations.handlers[(op.rtype, op.action)](req)
