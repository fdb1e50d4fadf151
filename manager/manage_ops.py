"""Manila's manage and unmanage, for shares, snapshots and share servers.

*Manage* writes a new record in ``manage_starting`` for an object the backend
already holds (a share by its export path, a snapshot by its provider
location, a server by the backend's identifier), and the driver's
``manage_existing`` / ``manage_existing_snapshot`` / ``manage_server`` ties
the object to the record's ids and says its size and export locations:
``available`` (``active``) or ``manage_error``. *Unmanage* puts the record in
``unmanage_starting``; the driver's ``unmanage`` / ``unmanage_snapshot`` /
``unmanage_server`` lets go, and the record goes as a delete's does, the
object staying on the backend; ``unmanage_error`` when the driver refuses.

The plans are here (what starting each writes, with its checks); the three
manages are carried out by the handlers below (the driver is given the
request's options, and what it answers is checked before it is recorded);
the three unmanages by the table alone (``operations.by_table``:
``driver_args.ARGS``, ``successes.DONE``). Statuses, methods and how a
crash is settled are the operation table's (``operation_table._manage``, ``_unmanage``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.manager import driver_args, hosts, kinds, operation_table, successes, views
from sharemgr.manager.op_errors import OperationFailed, Stale
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op, Plan, Refused, get, need, share, snapshot

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

_R = TypeVar("_R", bound=kinds.StatusRow)

# What the request row carries: the user's --driver-option pairs and, for a
# share server, the backend's identifier.
OPTIONS, IDENTIFIER = "driver_options", "identifier"

# Longest export path, provider location or identifier accepted (they are
# kept in JSON and text columns; a bound keeps a typo'd paste out).
MAX_LOCATION = 1024


def check_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """``--driver-option`` pairs: string keys and values, keys not empty."""
    out: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise Refused(f"invalid driver option {key!r}={value!r}: key=value, "
                          "the key not empty")
        out[key] = value
    return out


def _location(value: str | None, what: str) -> str:
    value = (value or "").strip()
    if not value:
        raise Refused(f"{what} must not be empty")
    if len(value) > MAX_LOCATION:
        raise Refused(f"{what} is {len(value)} characters long; at most {MAX_LOCATION}")
    return value


def _paths(locations: Sequence[object] | None) -> set[str]:
    return {str(loc.get("path")) for loc in locations or [] if isinstance(loc, dict)}


# Plans --------------------------------------------------------------------------------


def plan_manage_share(db: Database, host: str, dhss: bool, export_path: str, proto: str,
                      name: str | None = None, options: Mapping[str, str] | None = None,
                      project_id: str | None = None) -> Plan:
    """A share record for the share at ``export_path`` on ``host``
    ('host@backend'): its size is 0 until the driver says it."""
    path = _location(export_path, "the export path")
    if dhss:
        raise Refused(f"backend {hosts.backend_of(host)!r} handles share servers: managing "
                      "a share there is not supported (only on backends with "
                      "driver_handles_share_servers = False)")
    # One whose manage failed holds nothing: it does not stand in the way.
    taken = [i.id for i in resources.on_host(db, models.ShareInstance, host)
             if path in _paths(i.export_locations) and i.status != vocab.MANAGE_ERROR]
    if taken:
        raise Refused(f"{path} on {host} is already managed: share instance {taken[0]}")
    row = models.Share(id=models.new_id(), name=name, size=0, share_proto=proto,
                       project_id=project_id)
    inst = models.ShareInstance(
        id=models.new_id(), share_id=row.id, host=host, status=vocab.MANAGING,
        export_locations=[{"path": path, "is_admin_only": False, "preferred": True}])
    return Plan(row.id, [row, inst], [],
                Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_MANAGE, host,
                   {OPTIONS: check_options(options)}))


def plan_manage_snapshot(db: Database, share_id: str, provider_location: str,
                         name: str | None = None, options: Mapping[str, str] | None = None
                         ) -> Plan:
    """A snapshot record of share ``share_id`` for the snapshot the backend
    holds at ``provider_location``."""
    location = _location(provider_location, "the provider location")
    row, inst = share(db, share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "manage a snapshot of")
    taken = [s.id for s in db_api.query(db, models.ShareSnapshotInstance,
                                        {"share_instance_id": inst.id})
             if s.provider_location == location and s.status != vocab.MANAGE_ERROR]
    if taken:
        raise Refused(f"snapshot {location} of share {share_id} is already managed: "
                      f"snapshot instance {taken[0]}")
    snap = models.ShareSnapshot(id=models.new_id(), share_id=row.id, name=name, size=0,
                                project_id=row.project_id)
    snap_inst = models.ShareSnapshotInstance(
        id=models.new_id(), snapshot_id=snap.id, share_instance_id=inst.id,
        status=vocab.MANAGING, provider_location=location)
    return Plan(snap.id, [snap, snap_inst], [],
                Op(vocab.SNAPSHOT_INSTANCE, snap_inst.id, vocab.ACTION_MANAGE, inst.host,
                   {OPTIONS: check_options(options)}))


def plan_manage_server(db: Database, host: str, dhss: bool, identifier: str,
                       options: Mapping[str, str] | None = None) -> Plan:
    """A share server record for the server the backend knows as ``identifier``."""
    ident = _location(identifier, "the share server identifier")
    if not dhss:
        raise Refused(f"backend {hosts.backend_of(host)!r} does not handle share servers "
                      "(driver_handles_share_servers = False)")
    taken = [s.id for s in resources.on_host(db, models.ShareServer, host)
             if (s.backend_details or {}).get(IDENTIFIER) == ident
             and s.status != vocab.MANAGE_ERROR]
    if taken:
        raise Refused(f"share server {ident} on {host} is already managed: {taken[0]}")
    server = models.ShareServer(id=models.new_id(), host=host, status=vocab.MANAGING,
                                backend_details={})
    return Plan(server.id, [server], [],
                Op(vocab.SHARE_SERVER, server.id, vocab.ACTION_MANAGE, host,
                   {IDENTIFIER: ident, OPTIONS: check_options(options)}))


def _unmanaging(kind: kinds.Kind, row: kinds.StatusRow, what: str, host: str | None,
                shown: object = None) -> Plan:
    spec = operation_table.spec(kind.name, vocab.ACTION_UNMANAGE)
    need(row.status, spec.starts_from, what, spec.verb)
    return Plan(None, [], [(kind.model, row.id, {"status": row.status},
                            {"status": spec.transient[0]})],
                Op(kind.name, row.id, vocab.ACTION_UNMANAGE, host), shown or row)


def plan_unmanage(db: Database, type_: str, ident: str) -> Plan:
    """The unmanage of a share, snapshot or share server, refused (as
    Manila's) while something still needs it: a share's snapshots and
    replicas, a server's shares and groups."""
    if type_ == vocab.SHARE:
        row, inst = share(db, ident)
        if resources.live_count(db, models.ShareSnapshot, share_id=row.id):
            raise Refused(f"share {ident} has snapshots: unmanage or delete them first")
        if any(i.id != inst.id for i in db_api.query(db, models.ShareInstance,
                                                      {"share_id": row.id})):
            raise Refused(f"share {ident} has replicas: delete them first")
        return _unmanaging(kinds.SHARE_INSTANCE, inst, f"share {ident}", inst.host, row)
    if type_ == vocab.SNAPSHOT:
        snap, snap_inst = snapshot(db, ident)
        return _unmanaging(kinds.SNAPSHOT_INSTANCE, snap_inst, f"snapshot {ident}",
                           kinds.SNAPSHOT_INSTANCE.host_of(db, snap_inst), snap)
    if type_ != vocab.SHARE_SERVER:
        raise Refused(f"a {type_.replace('_', ' ')} cannot be unmanaged")
    server = get(db, models.ShareServer, ident, "share server")
    if resources.live_count(db, models.ShareInstance, share_server_id=server.id) or \
            resources.live_count(db, models.ShareGroup, share_server_id=server.id):
        raise Refused(f"share server {ident} is in use by shares or groups")
    return _unmanaging(kinds.SHARE_SERVER, server, f"share server {ident}", server.host)


# What the driver answered ------------------------------------------------------------


def _size(answer: Mapping[str, object], method: str) -> int | None:
    """The answer's size: a whole number of GiB in range, None when left out."""
    size = answer.get("size")
    if size is None:
        return None
    if isinstance(size, float) and size.is_integer():
        size = int(size)
    if not isinstance(size, int) or isinstance(size, bool) or not \
            1 <= size <= vocab.MAX_SHARE_SIZE_GB:
        raise OperationFailed(f"{method} answered an unusable size {size!r}")
    return size


def _answer(result: object, method: str) -> Mapping[str, object]:
    if result is None:
        return {}
    if not isinstance(result, Mapping):
        raise OperationFailed(f"{method} answered {result!r}, not a dict")
    return result


# Handlers (handlers.OWN) ---------------------------------------------------------------


def _first(ops: Operations, op: Op, model: type[_R]) -> tuple[_R, str]:
    row = db_api.get(ops.db, model, op.ident)
    if row is None:
        raise Stale(f"{kinds.kind(op.kind).what} {op.ident} is gone")
    host = op.host or kinds.kind(op.kind).host_of(ops.db, row)
    if host is None:
        raise Stale(f"{kinds.kind(op.kind).what} {op.ident} is on no backend")
    return row, host


def manage_existing(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """The share's size and export locations from the driver's answer, the
    size written to the share with the instance's status."""
    spec = operation_table.spec(op.kind, op.action)
    method = str(spec.method)
    inst0, host = _first(ops, op, models.ShareInstance)
    driver = ops.driver_for(host)
    options = dict(op.args.get(OPTIONS) or {})

    def call(inst: models.ShareInstance, _read: object) -> object:
        share_d, _ = driver_args.share_parts(ops.db, inst)
        answer = _answer(driver.manage_existing(share_d, options), method)
        size = _size(answer, method)
        if size is None:
            raise OperationFailed(f"{method} did not say the share's size")
        raw = answer.get("export_locations")
        try:
            locations = successes.export_locations(raw) if raw else list(inst.export_locations)
        except (KeyError, TypeError, AttributeError) as exc:
            raise OperationFailed(f"{method} answered unusable export locations "
                                  f"{raw!r}: {exc}")
        return size, locations

    def done(inst: models.ShareInstance, result: object) -> list[Change]:
        assert isinstance(result, tuple)
        size, locations = result
        return [(models.ShareInstance, inst.id, {"status": inst.status},
                 {"status": spec.success, "export_locations": locations}),
                (models.Share, inst.share_id, {}, {"size": size})]

    return ops.run(op, Step(models.ShareInstance, inst0.id,
                            f"{spec.verb} of share instance {inst0.id}", call, done), held)


def manage_existing_snapshot(ops: Operations, op: Op, held: bool = False
                             ) -> list[Change] | None:
    """The snapshot's size (the share's when the driver leaves it out, as
    Manila) and provider location from the driver's answer."""
    spec = operation_table.spec(op.kind, op.action)
    method = str(spec.method)
    row0, host = _first(ops, op, models.ShareSnapshotInstance)
    driver = ops.driver_for(host)
    options = dict(op.args.get(OPTIONS) or {})

    def call(row: models.ShareSnapshotInstance, _read: object) -> object:
        snap_d, _ = driver_args.snapshot_parts(ops.db, row)
        answer = _answer(driver.manage_existing_snapshot(snap_d, options), method)
        size = _size(answer, method) or snap_d["share"]["size"]
        location = answer.get("provider_location") or row.provider_location
        return size, str(location) if location is not None else None

    def done(row: models.ShareSnapshotInstance, result: object) -> list[Change]:
        assert isinstance(result, tuple)
        size, location = result
        return [(models.ShareSnapshotInstance, row.id, {"status": row.status},
                 {"status": spec.success, "progress": "100%", "provider_location": location}),
                (models.ShareSnapshot, row.snapshot_id, {}, {"size": size})]

    return ops.run(op, Step(models.ShareSnapshotInstance, row0.id,
                            f"{spec.verb} of snapshot instance {row0.id}", call, done), held)


def manage_server(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """The server's backend details from the driver's answer, with the
    backend's identifier under ``identifier`` (unless the details name one)."""
    spec = operation_table.spec(op.kind, op.action)
    row0, host = _first(ops, op, models.ShareServer)
    driver = ops.driver_for(host)
    identifier = str(op.args.get(IDENTIFIER) or "")
    options = dict(op.args.get(OPTIONS) or {})

    def call(row: models.ShareServer, _read: object) -> object:
        result = driver.manage_server(views.server(row), identifier, options)
        if not isinstance(result, tuple) or len(result) != 2:
            raise OperationFailed(f"manage_server answered {result!r}, not "
                                  "(identifier, backend_details)")
        new_identifier, details = result
        if details is not None and not isinstance(details, Mapping):
            raise OperationFailed(f"manage_server answered backend details {details!r}")
        return {IDENTIFIER: str(new_identifier or identifier), **(details or {})}

    def done(row: models.ShareServer, details: object) -> list[Change]:
        return [(models.ShareServer, row.id, {"status": row.status},
                 {"status": spec.success, "backend_details": details})]

    return ops.run(op, Step(models.ShareServer, row0.id,
                            f"{spec.verb} of share server {row0.id}", call, done), held)
