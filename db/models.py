"""SQLAlchemy models. The schema itself is created by alembic migrations
(db/migrations); these classes describe it to the ORM and to alembic."""

from __future__ import annotations

import datetime
import uuid

import sqlalchemy as sa
from sharemgr.common import vocab
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Microseconds on MariaDB too (its DATETIME drops them by default).
DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def new_id() -> str:
    return str(uuid.uuid4())


class Base(DeclarativeBase):
    pass


# A backend host: '<host>@<backend>' (and '#<pool>' on share instances). The
# host is a hostname (oslo.config's HostnameOpt: at most 253 characters), the
# backend a config group name: 255 would not even hold the host with a long
# backend name (migration 0005). Plain hosts (services, reconcile passes)
# stay 255.
BACKEND_HOST = 512
BACKEND_REASON = 1024  # service_backends.reason; longer reasons are cut


class TimestampMixin:
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime.datetime | None] = mapped_column(
        DateTime, default=None, onupdate=utcnow
    )
    deleted_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, default=None)


class Service(Base):
    __tablename__ = "services"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(64))
    engine_id: Mapped[str] = mapped_column(String(320), unique=True)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    stopped_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class ServiceBackend(Base):
    """One backend of one engine and its state (migration 0008)."""

    __tablename__ = "service_backends"
    engine_id: Mapped[str] = mapped_column(String(320), primary_key=True)
    # enabled_share_backends names have at most 128 characters (manager/config.py).
    backend: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(BACKEND_REASON))
    updated_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class Request(Base):
    __tablename__ = "requests"
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    resource_type: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    args: Mapped[dict] = mapped_column(JSON, default=dict)
    # 'host@backend' the request is for; NULL means any engine may take it.
    host: Mapped[str | None] = mapped_column(String(BACKEND_HOST))
    status: Mapped[str] = mapped_column(String(16), default=vocab.REQUEST_PENDING)
    engine_id: Mapped[str | None] = mapped_column(String(320))
    claimed_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    error: Mapped[str | None] = mapped_column(Text)
    # The deadline of the running operation's driver call (doc/reconciliation.rst,
    # "Leases"); NULL: no driver call under a lease (yet).
    lease_expires_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)

    __table_args__ = (
        Index("ix_requests_status_host", "status", "host"),
        Index("ix_requests_resource", "resource_type", "resource_id"),
        Index("ix_requests_status_lease", "status", "lease_expires_at"),
    )


class ShareServer(TimestampMixin, Base):
    __tablename__ = "share_servers"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    host: Mapped[str] = mapped_column(String(BACKEND_HOST))
    status: Mapped[str] = mapped_column(String(32))
    task_state: Mapped[str | None] = mapped_column(String(64))
    backend_details: Mapped[dict] = mapped_column(JSON, default=dict)
    __table_args__ = (Index("ix_share_servers_host_status", "host", "status"),
                      Index("ix_share_servers_status", "status"))


class Share(TimestampMixin, Base):
    __tablename__ = "shares"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(Integer)
    share_proto: Mapped[str] = mapped_column(String(16))
    project_id: Mapped[str | None] = mapped_column(String(255))
    snapshot_id: Mapped[str | None] = mapped_column(String(36))
    share_group_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("share_groups.id")
    )


class ShareInstance(TimestampMixin, Base):
    __tablename__ = "share_instances"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    share_id: Mapped[str] = mapped_column(String(36), ForeignKey("shares.id"))
    host: Mapped[str] = mapped_column(String(BACKEND_HOST))
    status: Mapped[str] = mapped_column(String(40))
    share_server_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("share_servers.id")
    )
    replica_state: Mapped[str | None] = mapped_column(String(32))
    task_state: Mapped[str | None] = mapped_column(String(64))
    progress: Mapped[str | None] = mapped_column(String(32))
    # Manila's shape: [{"path": ..., "is_admin_only": bool, "preferred": bool}]
    export_locations: Mapped[list] = mapped_column(JSON, default=list)
    # Manila's summary of the instance's access rules: active, syncing, error.
    access_rules_status: Mapped[str] = mapped_column(
        String(32), default=vocab.ACCESS_ACTIVE, server_default=vocab.ACCESS_ACTIVE)
    # What the last drift check found on the backend (reconcile/drift.py);
    # NULL when the backend agrees.
    drift: Mapped[dict | None] = mapped_column(JSON, default=None)
    __table_args__ = (
        Index("ix_share_instances_host_status", "host", "status"),
        Index("ix_share_instances_status", "status"),
        Index("ix_share_instances_share_id", "share_id"),
    )


class ShareSnapshot(TimestampMixin, Base):
    __tablename__ = "share_snapshots"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    share_id: Mapped[str] = mapped_column(String(36), ForeignKey("shares.id"))
    name: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[str | None] = mapped_column(String(255))
    share_group_snapshot_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("share_group_snapshots.id")
    )


class ShareSnapshotInstance(TimestampMixin, Base):
    __tablename__ = "share_snapshot_instances"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    snapshot_id: Mapped[str] = mapped_column(String(36), ForeignKey("share_snapshots.id"))
    share_instance_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("share_instances.id")
    )
    status: Mapped[str] = mapped_column(String(32))
    progress: Mapped[str | None] = mapped_column(String(32))
    # The driver's own text (Manila: VARCHAR(255)); drivers' locations may be
    # longer, and a snapshot the backend made must not fail on its record.
    provider_location: Mapped[str | None] = mapped_column(Text)
    # What the last drift check found on the backend (reconcile/drift.py).
    drift: Mapped[dict | None] = mapped_column(JSON, default=None)
    __table_args__ = (
        Index("ix_snapshot_instances_status", "status"),
        Index("ix_snapshot_instances_share_instance", "share_instance_id"),
    )


class ShareGroup(TimestampMixin, Base):
    __tablename__ = "share_groups"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(BACKEND_HOST))
    status: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(255))
    share_server_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("share_servers.id")
    )
    __table_args__ = (Index("ix_share_groups_host_status", "host", "status"),
                      Index("ix_share_groups_status", "status"))


class ShareGroupSnapshot(TimestampMixin, Base):
    __tablename__ = "share_group_snapshots"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    share_group_id: Mapped[str] = mapped_column(String(36), ForeignKey("share_groups.id"))
    name: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str | None] = mapped_column(String(255))
    __table_args__ = (Index("ix_group_snapshots_status", "status"),)


class ShareBackup(TimestampMixin, Base):
    __tablename__ = "share_backups"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    share_id: Mapped[str] = mapped_column(String(36), ForeignKey("shares.id"))
    name: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(BACKEND_HOST))
    status: Mapped[str] = mapped_column(String(32))
    size: Mapped[int | None] = mapped_column(Integer)
    progress: Mapped[str | None] = mapped_column(String(32))
    restore_progress: Mapped[str | None] = mapped_column(String(32))
    __table_args__ = (Index("ix_share_backups_host_status", "host", "status"),
                      Index("ix_share_backups_status", "status"))


class ShareAccessRule(TimestampMixin, Base):
    """One rule of who may mount a share (Manila's share access map); a
    denied rule keeps its row with ``deleted_at`` set."""

    __tablename__ = "share_access_rules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    share_id: Mapped[str] = mapped_column(String(36), ForeignKey("shares.id"))
    access_type: Mapped[str] = mapped_column(String(32))  # ip, user, cert
    access_to: Mapped[str] = mapped_column(String(255))
    access_level: Mapped[str] = mapped_column(String(2))  # rw, ro
    state: Mapped[str] = mapped_column(String(32))
    __table_args__ = (Index("ix_share_access_rules_share", "share_id"),
                      Index("ix_share_access_rules_state", "state"))


class BackendStats(Base):
    """A backend's last get_share_stats() report: capabilities and pools."""

    __tablename__ = "backend_stats"
    host: Mapped[str] = mapped_column(String(BACKEND_HOST), primary_key=True)
    stats: Mapped[dict] = mapped_column(JSON, default=dict)
    engine_id: Mapped[str | None] = mapped_column(String(320))
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, default=utcnow,
                                                                 onupdate=utcnow)


class BackendInfo(Base):
    """Hash of a backend's get_backend_info() at the last ensure-resources."""

    __tablename__ = "backend_info"
    host: Mapped[str] = mapped_column(String(BACKEND_HOST), primary_key=True)
    info_hash: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, onupdate=utcnow)


class ReconcilePass(Base):
    __tablename__ = "reconcile_passes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(255))
    engine_id: Mapped[str] = mapped_column(String(320))
    trigger: Mapped[str] = mapped_column(String(400))  # 'peer:<engine id>' fits
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    summary: Mapped[dict] = mapped_column(JSON, default=dict)
    __table_args__ = (Index("ix_reconcile_passes_host", "host"),)


class StackTemplate(Base):
    __tablename__ = "stack_templates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    stack_id: Mapped[str | None] = mapped_column(String(36))
    template: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # Purged rows' ids must never come back (a stale reference would point at
    # a new row): SQLite reuses the largest id without AUTOINCREMENT.
    __table_args__ = (Index("ix_stack_templates_stack", "stack_id"),
                      {"sqlite_autoincrement": True})


class Stack(TimestampMixin, Base):
    __tablename__ = "stacks"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    template_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("stack_templates.id"))
    prev_template_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("stack_templates.id")
    )
    current_traversal: Mapped[str | None] = mapped_column(String(36))
    current_deps: Mapped[dict] = mapped_column(JSON, default=dict)
    disable_rollback: Mapped[bool] = mapped_column(Boolean, default=False)
    timeout_seconds: Mapped[int | None] = mapped_column(Integer)  # None: no timeout
    traversal_started_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    __table_args__ = (Index("ix_stacks_name", "name"),)


class StackResource(TimestampMixin, Base):
    __tablename__ = "stack_resources"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    stack_id: Mapped[str] = mapped_column(String(36), ForeignKey("stacks.id"))
    name: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(32))
    template_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("stack_templates.id"))
    properties: Mapped[dict] = mapped_column(JSON, default=dict)
    attributes: Mapped[dict] = mapped_column(JSON, default=dict)
    physical_id: Mapped[str | None] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(16), default=vocab.STACK_INIT)
    status: Mapped[str] = mapped_column(String(16), default=vocab.STACK_COMPLETE)
    status_reason: Mapped[str | None] = mapped_column(Text)
    engine_id: Mapped[str | None] = mapped_column(String(320))
    atomic_key: Mapped[int] = mapped_column(Integer, default=0)
    requires: Mapped[list] = mapped_column(JSON, default=list)
    replaces: Mapped[int | None] = mapped_column(Integer)
    replaced_by: Mapped[int | None] = mapped_column(Integer)
    current_traversal: Mapped[str | None] = mapped_column(String(36))
    __table_args__ = (Index("ix_stack_resources_stack", "stack_id"),
                      {"sqlite_autoincrement": True})


class SyncPoint(Base):
    __tablename__ = "sync_points"
    entity_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    traversal_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    is_update: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    stack_id: Mapped[str] = mapped_column(String(36), ForeignKey("stacks.id"))
    atomic_key: Mapped[int] = mapped_column(Integer, default=0)
    input_data: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime, onupdate=utcnow)
    __table_args__ = (Index("ix_sync_points_stack_traversal", "stack_id", "traversal_id"),)


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
