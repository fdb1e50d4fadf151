"""The ORM classes, mapped onto the tables of db/tables.py (the schema is
described there once, and created by the alembic migrations of
db/migrations). Each class names its columns again as ``Mapped[]``
annotations (those several tables share in the mixins ``_Stamps``,
``_Resource`` and ``_Fenced``), for the type checker only: with ``__table__``
given, SQLAlchemy maps the table's columns and reads no column from them
(tests/unit/db/test_models.py checks the two agree). The names below are
re-exported for the code that reads them through this module."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import sqlalchemy as sa
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import tables
from sharemgr.db.tables import BACKEND_HOST as BACKEND_HOST  # re-exported
from sharemgr.db.tables import BACKEND_REASON as BACKEND_REASON
from sharemgr.db.tables import new_id as new_id
from sharemgr.db.tables import utcnow as utcnow
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Mapped


class Base(DeclarativeBase):
    metadata = tables.metadata

    if TYPE_CHECKING:
        # Each class's ``__table__`` is one of db/tables.py's tables (SQLAlchemy
        # types it as any FROM clause): a name, a primary key, typed columns.
        __table__: ClassVar[sa.Table]


# The columns a helper taking one of several mapped classes reads by name,
# as the classes have them (``Share.deleted_at``: a column attribute).

class HasTable(Protocol):
    """A mapped class, as a conditional update takes it: its table."""

    __table__: ClassVar[sa.Table]


class Live(HasTable, Protocol):
    """Rows keyed by a uuid, stamped, and deleted softly: the resources."""

    id: ClassVar[InstrumentedAttribute[str]]
    created_at: ClassVar[InstrumentedAttribute[datetime.datetime]]
    updated_at: ClassVar[InstrumentedAttribute[datetime.datetime | None]]
    deleted_at: ClassVar[InstrumentedAttribute[datetime.datetime | None]]


class WithStatus(Live, Protocol):
    """A resource with a status of its own (a share's is its instances')."""

    status: ClassVar[InstrumentedAttribute[str]]


class Hosted(WithStatus, Protocol):
    """A resource on a backend (``host@backend#pool``)."""

    host: ClassVar[InstrumentedAttribute[str]]


# A helper taking one mapped class and giving back its rows: ``get_tx(session,
# models.Share, id)`` is a ``models.Share | None``.
M = TypeVar("M", bound=HasTable)
S = TypeVar("S", bound=WithStatus)
H = TypeVar("H", bound=Hosted)


# A mapped class chosen at run time, as code outside db/ takes one (it reads
# columns a model may lack: manager/intake.py, a name's length).
ModelClass = type[Any]
# A request's arguments: JSON whose shape its action decides, read by key and
# converted by its readers (convergence/watchdog.py: ``int(args.get(
# "resource_id", 0))``), which a JSON value's type refuses.
RequestArgs = dict[str, Any]



# Columns several tables share, named once (a class's own annotations are the
# rest of its table's columns).

class _Stamps:
    """Made, changed, and deleted softly (``deleted_at`` set, the row kept)."""

    created_at: Mapped[datetime.datetime]
    updated_at: Mapped[datetime.datetime | None]
    deleted_at: Mapped[datetime.datetime | None]


class _Resource(_Stamps):
    """A resource users name by its uuid (``new_id``)."""

    id: Mapped[str]


class _Fenced(_Resource):
    """A resource whose driver calls carry its fencing token
    (doc/reconciliation.rst, "Fencing")."""

    fence: Mapped[int]


class Service(Base):
    __table__ = tables.services

    id: Mapped[int]
    host: Mapped[str]
    binary: Mapped[str]
    engine_id: Mapped[str]
    started_at: Mapped[datetime.datetime]
    heartbeat_at: Mapped[datetime.datetime | None]
    stopped_at: Mapped[datetime.datetime | None]
    out_of_group: Mapped[str | None]


class ServiceBackend(Base):
    """One backend of one engine and its state (migration 0008)."""

    __table__ = tables.service_backends

    engine_id: Mapped[str]
    backend: Mapped[str]
    state: Mapped[str]
    reason: Mapped[str | None]
    updated_at: Mapped[datetime.datetime]


class Request(Base):
    __table__ = tables.requests

    id: Mapped[int]
    created_at: Mapped[datetime.datetime]
    resource_type: Mapped[str]
    resource_id: Mapped[str]
    action: Mapped[str]
    args: Mapped[RequestArgs]
    host: Mapped[str | None]
    status: Mapped[str]
    engine_id: Mapped[str | None]
    claimed_at: Mapped[datetime.datetime | None]
    finished_at: Mapped[datetime.datetime | None]
    error: Mapped[str | None]
    lease_expires_at: Mapped[datetime.datetime | None]
    lease_deadline: Mapped[datetime.datetime | None]


class ShareServer(_Fenced, Base):
    __table__ = tables.share_servers

    host: Mapped[str]
    status: Mapped[str]
    task_state: Mapped[str | None]
    backend_details: Mapped[dict[str, JSONValue]]


class Share(_Resource, Base):
    __table__ = tables.shares

    name: Mapped[str | None]
    size: Mapped[int]
    share_proto: Mapped[str]
    project_id: Mapped[str | None]
    snapshot_id: Mapped[str | None]
    share_group_id: Mapped[str | None]


class ShareInstance(_Fenced, Base):
    __table__ = tables.share_instances

    share_id: Mapped[str]
    host: Mapped[str]
    status: Mapped[str]
    share_server_id: Mapped[str | None]
    replica_state: Mapped[str | None]
    task_state: Mapped[str | None]
    progress: Mapped[str | None]
    export_locations: Mapped[list[JSONValue]]
    access_rules_status: Mapped[str]
    drift: Mapped[dict[str, JSONValue] | None]
    pending_size: Mapped[int | None]


class ShareSnapshot(_Resource, Base):
    __table__ = tables.share_snapshots

    share_id: Mapped[str]
    name: Mapped[str | None]
    size: Mapped[int]
    project_id: Mapped[str | None]
    share_group_snapshot_id: Mapped[str | None]


class ShareSnapshotInstance(_Fenced, Base):
    __table__ = tables.share_snapshot_instances

    snapshot_id: Mapped[str]
    share_instance_id: Mapped[str]
    status: Mapped[str]
    progress: Mapped[str | None]
    provider_location: Mapped[str | None]
    drift: Mapped[dict[str, JSONValue] | None]


class ShareGroup(_Fenced, Base):
    __table__ = tables.share_groups

    name: Mapped[str | None]
    host: Mapped[str]
    status: Mapped[str]
    project_id: Mapped[str | None]
    share_server_id: Mapped[str | None]


class ShareGroupSnapshot(_Fenced, Base):
    __table__ = tables.share_group_snapshots

    share_group_id: Mapped[str]
    name: Mapped[str | None]
    status: Mapped[str]
    project_id: Mapped[str | None]


class ShareGroupSnapshotMember(Base):
    __table__ = tables.share_group_snapshot_members

    id: Mapped[str]
    share_group_snapshot_id: Mapped[str]
    share_id: Mapped[str]
    share_instance_id: Mapped[str]
    size: Mapped[int]
    share_proto: Mapped[str]
    created_at: Mapped[datetime.datetime]


class ShareBackup(_Fenced, Base):
    __table__ = tables.share_backups

    share_id: Mapped[str]
    name: Mapped[str | None]
    host: Mapped[str]
    status: Mapped[str]
    size: Mapped[int | None]
    progress: Mapped[str | None]
    restore_progress: Mapped[str | None]


class ShareAccessRule(_Resource, Base):
    """One rule of who may mount a share (Manila's share access map); a
    denied rule keeps its row with ``deleted_at`` set."""

    __table__ = tables.share_access_rules

    share_id: Mapped[str]
    access_type: Mapped[str]
    access_to: Mapped[str]
    access_level: Mapped[str]
    state: Mapped[str]
    access_key: Mapped[str | None]


class BackendStats(Base):
    """A backend's last get_share_stats() report: capabilities and pools."""

    __table__ = tables.backend_stats

    host: Mapped[str]
    stats: Mapped[dict[str, JSONValue]]
    engine_id: Mapped[str | None]
    updated_at: Mapped[datetime.datetime | None]


class BackendInfo(Base):
    """Hash of a backend's get_backend_info() at the last ensure-resources."""

    __table__ = tables.backend_info

    host: Mapped[str]
    info_hash: Mapped[str | None]
    updated_at: Mapped[datetime.datetime | None]


class Message(Base):
    __table__ = tables.messages

    id: Mapped[str]
    created_at: Mapped[datetime.datetime]
    expires_at: Mapped[datetime.datetime]
    resource_type: Mapped[str]
    resource_id: Mapped[str]
    action_id: Mapped[str]
    detail_id: Mapped[str]
    message_level: Mapped[str]
    request_id: Mapped[int | None]
    detail: Mapped[str | None]


class ReconcilePass(Base):
    __table__ = tables.reconcile_passes

    id: Mapped[int]
    host: Mapped[str]
    engine_id: Mapped[str]
    trigger: Mapped[str]
    dry_run: Mapped[bool]
    started_at: Mapped[datetime.datetime]
    finished_at: Mapped[datetime.datetime | None]
    # Indexed deep by its reader (cli/reconcile_cmds.py), which a JSON value's
    # type refuses.
    summary: Mapped[dict[str, Any]]


class StackTemplate(Base):
    __table__ = tables.stack_templates

    id: Mapped[int]
    stack_id: Mapped[str | None]
    template: Mapped[dict[str, JSONValue]]
    created_at: Mapped[datetime.datetime]


class Stack(_Resource, Base):
    __table__ = tables.stacks

    name: Mapped[str]
    action: Mapped[str]
    status: Mapped[str]
    status_reason: Mapped[str | None]
    template_id: Mapped[int | None]
    prev_template_id: Mapped[int | None]
    current_traversal: Mapped[str | None]
    current_deps: Mapped[dict[str, JSONValue]]
    disable_rollback: Mapped[bool]
    timeout_seconds: Mapped[int | None]
    traversal_started_at: Mapped[datetime.datetime | None]


class StackResource(_Stamps, Base):
    __table__ = tables.stack_resources

    id: Mapped[int]
    stack_id: Mapped[str]
    name: Mapped[str]
    type: Mapped[str]
    template_id: Mapped[int | None]
    properties: Mapped[dict[str, JSONValue]]
    attributes: Mapped[dict[str, JSONValue]]
    physical_id: Mapped[str | None]
    action: Mapped[str]
    status: Mapped[str]
    status_reason: Mapped[str | None]
    engine_id: Mapped[str | None]
    atomic_key: Mapped[int]
    requires: Mapped[list[int]]
    replaces: Mapped[int | None]
    replaced_by: Mapped[int | None]
    current_traversal: Mapped[str | None]


class StackEvent(Base):
    __table__ = tables.stack_events

    id: Mapped[int]
    stack_id: Mapped[str]
    resource_name: Mapped[str | None]
    resource_id: Mapped[int | None]
    physical_id: Mapped[str | None]
    action: Mapped[str]
    status: Mapped[str]
    reason: Mapped[str | None]
    traversal_id: Mapped[str | None]
    created_at: Mapped[datetime.datetime]


class SyncPoint(Base):
    __table__ = tables.sync_points

    entity_id: Mapped[str]
    traversal_id: Mapped[str]
    is_update: Mapped[bool]
    stack_id: Mapped[str]
    atomic_key: Mapped[int]
    input_data: Mapped[dict[str, JSONValue]]
    created_at: Mapped[datetime.datetime]
    updated_at: Mapped[datetime.datetime | None]


RESOURCE_MODELS = {
    "share_server": ShareServer,
    "share": Share,
    "share_instance": ShareInstance,
    "snapshot": ShareSnapshot,
    "snapshot_instance": ShareSnapshotInstance,
    "share_group": ShareGroup,
    "group_snapshot": ShareGroupSnapshot,
    "backup": ShareBackup,
}
