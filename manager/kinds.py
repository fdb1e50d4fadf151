"""What each kind of resource is, declared once.

A *kind* is what the requests table's ``resource_type`` names: the row that
holds the status (its model), the lock the operations hold and the reconciler
try-locks, the statuses it may take, and where it lives (its 'host@backend').
Intake, the operations, reconciliation and convergence all read this table;
what each operation on a kind does is ``operation_table``'s; ``plans``
builds on both what an operation writes, and :func:`observe` says how a
stack sees a physical resource.

A share's and a snapshot's status are those of their (primary) instance: the
user-facing types ``share`` and ``snapshot`` map to the kinds
``share_instance`` and ``snapshot_instance`` (:data:`STATUS_KIND`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, status_reads
from sharemgr.db.engine import Database
from sharemgr.db.records import Record
from sharemgr.manager import hosts
from sharemgr.manager.lock_names import resource_lock_name

# A row of one of the kinds' models: what an operation by the table is
# carried out on (driver_args.py, successes.py).
Row = models.ShareInstance | models.ShareSnapshotInstance | models.ShareServer \
    | models.ShareGroup | models.ShareGroupSnapshot | models.ShareBackup


class StatusRow(models.HasTable, Protocol):
    """A row that holds a kind's status (``Kind.model``)."""

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> str: ...


class _Hosted(Protocol):
    @property
    def host(self) -> str | None: ...


_Row = TypeVar("_Row", bound=models.HasTable)


@dataclass(frozen=True)
class Kind:
    name: str  # requests.resource_type
    model: type  # the row that holds the status
    what: str  # how messages name one
    host_of: Callable[[Database, Any], str | None]  # 'host@backend#pool' of a row of ``model``
    lock_as: str | None = None  # lock under another kind's name (a replica is an instance)

    @property
    def statuses(self) -> tuple[str, ...]:
        return vocab.VALID_STATUSES[self.name]

    @property
    def transient(self) -> tuple[str, ...]:
        return tuple(s for s in self.statuses if s in vocab.TRANSIENT_STATUSES)

    def lock_name(self, ident: str) -> bytes:
        return resource_lock_name(self.lock_as or self.name, ident)


def _own_host(db: Database, row: _Hosted) -> str | None:
    return row.host


def _snapshot_host(db: Database, row: models.ShareSnapshotInstance | Record) -> str | None:
    inst = db_api.get(db, models.ShareInstance, row.share_instance_id, include_deleted=True)
    return inst.host if inst else None


def _group_snapshot_host(db: Database, row: models.ShareGroupSnapshot) -> str | None:
    group = db_api.get(db, models.ShareGroup, row.share_group_id, include_deleted=True)
    return group.host if group else None


SHARE_INSTANCE = Kind(vocab.SHARE_INSTANCE, models.ShareInstance, "share instance", _own_host)
REPLICA = Kind(vocab.REPLICA, models.ShareInstance, "replica", _own_host,
               lock_as=vocab.SHARE_INSTANCE)
SNAPSHOT_INSTANCE = Kind(vocab.SNAPSHOT_INSTANCE, models.ShareSnapshotInstance,
                         "snapshot instance", _snapshot_host)
SHARE_SERVER = Kind(vocab.SHARE_SERVER, models.ShareServer, "share server", _own_host)
SHARE_GROUP = Kind(vocab.SHARE_GROUP, models.ShareGroup, "share group", _own_host)
GROUP_SNAPSHOT = Kind(vocab.GROUP_SNAPSHOT, models.ShareGroupSnapshot, "group snapshot",
                      _group_snapshot_host)
BACKUP = Kind(vocab.BACKUP, models.ShareBackup, "backup", _own_host)

KINDS: dict[str, Kind] = {k.name: k for k in (
    SHARE_INSTANCE, REPLICA, SNAPSHOT_INSTANCE, SHARE_SERVER, SHARE_GROUP, GROUP_SNAPSHOT,
    BACKUP)}

# The user-facing types (sharectl's nouns, stack resource types) and the kind
# whose row holds their status.
STATUS_KIND: dict[str, Kind] = {**KINDS, vocab.SHARE: SHARE_INSTANCE,
                                vocab.SNAPSHOT: SNAPSHOT_INSTANCE}

# The user-facing types whose own row has a name (a rename writes it there).
NAMED_MODEL: dict[str, type] = {
    vocab.SHARE: models.Share, vocab.SNAPSHOT: models.ShareSnapshot,
    vocab.SHARE_GROUP: models.ShareGroup, vocab.GROUP_SNAPSHOT: models.ShareGroupSnapshot,
    vocab.BACKUP: models.ShareBackup,
}


def kind(name: str) -> Kind:
    return KINDS[name]


def is_secondary(inst: models.ShareInstance | Record) -> bool:
    """A share instance that is a secondary replica, not the share's active one."""
    return inst.replica_state not in (None, vocab.REPLICA_ACTIVE)


# Observation: a physical resource as a stack sees it -------------------------------

GONE = "gone"  # never made, deleted, or removed behind our back
OK = "ok"  # available / active: usable
BUSY = "busy"  # in a transient status: an operation is under way
ERROR = "error"  # any other status (error, extending_error, ...): unusable


@dataclass(frozen=True)
class Observed:
    state: str
    status: str | None = None
    host: str | None = None  # 'host@backend', pool stripped
    attributes: Mapping[str, object] = field(default_factory=dict)
    actual: Mapping[str, object] = field(default_factory=dict)  # in-place properties as they are


def state_of(status: str | None) -> str:
    if status is None or status == vocab.DELETED:
        return GONE
    if status in (vocab.AVAILABLE, vocab.ACTIVE):
        return OK
    if status in vocab.TRANSIENT_STATUSES:
        return BUSY
    return ERROR


def _obs(status: str, host: str | None, attributes: Mapping[str, object],
         actual: Mapping[str, object] | None = None) -> Observed:
    return Observed(state_of(status), status, hosts.host_of(host) if host else None,
                    attributes, actual or {})


def observe(db: Database, type_: str, physical_id: str | None) -> Observed:
    """The physical resource of user-facing type ``type_`` as the database
    sees it now."""
    if not physical_id:
        return Observed(GONE)
    return _OBSERVERS[type_](db, physical_id)


def _share_seen(share: models.Share | Record, inst: models.ShareInstance | Record) -> Observed:
    attrs = {"id": share.id, "name": share.name, "size": share.size,
             "proto": share.share_proto, "status": inst.status, "host": inst.host,
             "export_locations": list(inst.export_locations or [])}
    return _obs(inst.status, inst.host, attrs, {"size": share.size})


def _observe_share(db: Database, pid: str) -> Observed:
    # One statement (a delete takes the instance and the share together).
    found = status_reads.share_with_status(db, pid)
    if found is None or found[1] is None:
        return Observed(GONE)
    return _share_seen(found[0], found[1])


def _observe_snapshot(db: Database, pid: str) -> Observed:
    found = status_reads.snapshot_with_status(db, pid)
    if found is None:
        return Observed(GONE)
    snap, inst = found
    if inst is None:
        return Observed(GONE)
    attrs = {"id": snap.id, "name": snap.name, "size": snap.size, "status": inst.status,
             "share_id": snap.share_id}
    return _obs(inst.status, _snapshot_host(db, inst), attrs)


def _replica_seen(inst: models.ShareInstance) -> Observed:
    attrs = {"id": inst.id, "status": inst.status, "host": inst.host,
             "replica_state": inst.replica_state,
             "export_locations": list(inst.export_locations or []), "share_id": inst.share_id}
    return _obs(inst.status, inst.host, attrs)


def _server_seen(row: models.ShareServer) -> Observed:
    attrs = {"id": row.id, "status": row.status, "host": row.host,
             "backend_details": dict(row.backend_details or {})}
    return _obs(row.status, row.host, attrs)


def _group_seen(row: models.ShareGroup) -> Observed:
    attrs = {"id": row.id, "name": row.name, "status": row.status, "host": row.host}
    return _obs(row.status, row.host, attrs)


def _by_key(model: type[_Row], seen: Callable[[_Row], Observed]
            ) -> Callable[[Database, str], Observed]:
    def observe_row(db: Database, pid: str) -> Observed:
        row = db_api.get(db, model, pid)
        return Observed(GONE) if row is None else seen(row)
    return observe_row


def _observe_group_snapshot(db: Database, pid: str) -> Observed:
    row = db_api.get(db, models.ShareGroupSnapshot, pid)
    if row is None:
        return Observed(GONE)
    attrs = {"id": row.id, "name": row.name, "status": row.status,
             "share_group_id": row.share_group_id}
    return _obs(row.status, _group_snapshot_host(db, row), attrs)


_OBSERVERS: dict[str, Callable[[Database, str], Observed]] = {
    vocab.SHARE: _observe_share,
    vocab.SNAPSHOT: _observe_snapshot,
    vocab.REPLICA: _by_key(models.ShareInstance, _replica_seen),
    vocab.SHARE_SERVER: _by_key(models.ShareServer, _server_seen),
    vocab.SHARE_GROUP: _by_key(models.ShareGroup, _group_seen),
    vocab.GROUP_SNAPSHOT: _observe_group_snapshot,
}

# The types whose observation needs no more than their own rows: the models
# read, in the order the builder takes them. A snapshot's host is its share
# instance's, read apart; so is a group snapshot's.
_FROM_ROWS: dict[str, tuple[tuple[type, ...], Callable[..., Observed]]] = {
    vocab.SHARE: ((models.Share, models.ShareInstance), _share_seen),
    vocab.REPLICA: ((models.ShareInstance,), _replica_seen),
    vocab.SHARE_SERVER: ((models.ShareServer,), _server_seen),
    vocab.SHARE_GROUP: ((models.ShareGroup,), _group_seen),
}


def observe_rows(type_: str, rows: Mapping[type, object]) -> Observed | None:
    """:func:`observe` from rows in hand (by model), as a read would return
    them; None when ``type_`` is not seen from its own rows or one is
    missing (the caller reads)."""
    entry = _FROM_ROWS.get(type_)
    if entry is None or any(m not in rows for m in entry[0]):
        return None
    return entry[1](*(rows[m] for m in entry[0]))
