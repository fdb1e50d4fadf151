"""The schema, as SQLAlchemy Core tables: what the alembic migrations
(db/migrations) create, described once. The ORM classes of db/models.py are
mapped onto these tables; a reader that needs no ORM (``sharectl``'s status
listings, db/status_reads.py) uses them without importing it."""

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

# Microseconds on MariaDB too (its DATETIME drops them by default).
DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def new_id() -> str:
    return str(uuid.uuid4())


metadata = sa.MetaData()


def _timestamps() -> list[sa.Column[datetime.datetime]]:
    """The created/updated/deleted times of a soft-deleted resource's row
    (new Column objects each call: a column belongs to one table)."""
    return [sa.Column("created_at", DateTime, default=utcnow, nullable=False),
            sa.Column("updated_at", DateTime, default=None, onupdate=utcnow),
            sa.Column("deleted_at", DateTime, default=None)]

def _fence() -> sa.Column[int]:
    """The fencing token of a resource an operation acts on (migration 0011,
    doc/reconciliation.rst "Fencing"): bumped by every take (an operation's
    re-read under its lock, a reconciliation) and every status change, and
    carried by the driver call; an outcome is written only while it is the
    row's current one."""
    return sa.Column("fence", BigInteger, default=0, server_default="0", nullable=False)

# A backend host: '<host>@<backend>' (and '#<pool>' on share instances). The
# host is a hostname (oslo.config's HostnameOpt: at most 253 characters), the
# backend a config group name: 255 would not even hold the host with a long
# backend name (migration 0005). Plain hosts (services, reconcile passes)
# stay 255.
BACKEND_HOST = 512
BACKEND_REASON = 1024  # service_backends.reason; longer reasons are cut


services = sa.Table(
    "services", metadata,
    sa.Column("id", Integer, primary_key=True, autoincrement=True),
    sa.Column("host", String(255), nullable=False),
    sa.Column("binary", String(64), nullable=False),
    sa.Column("engine_id", String(320), unique=True, nullable=False),
    sa.Column("started_at", DateTime, default=utcnow, nullable=False),
    sa.Column("heartbeat_at", DateTime),
    sa.Column("stopped_at", DateTime),
    # Why the engine is out of the engines group, as it last said (0011).
    sa.Column("out_of_group", String(255)),
)


# One backend of one engine and its state (migration 0008).
service_backends = sa.Table(
    "service_backends", metadata,
    sa.Column("engine_id", String(320), primary_key=True),
    # enabled_share_backends names have at most 128 characters (manager/config.py).
    sa.Column("backend", String(128), primary_key=True),
    sa.Column("state", String(16), nullable=False),
    sa.Column("reason", String(BACKEND_REASON)),
    sa.Column("updated_at", DateTime, default=utcnow, nullable=False),
)


requests = sa.Table(
    "requests", metadata,
    sa.Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    sa.Column("resource_type", String(32), nullable=False),
    sa.Column("resource_id", String(64), nullable=False),
    sa.Column("action", String(64), nullable=False),
    sa.Column("args", JSON, default=dict, nullable=False),
    # 'host@backend' the request is for; NULL means any engine may take it.
    sa.Column("host", String(BACKEND_HOST)),
    sa.Column("status", String(16), default=vocab.REQUEST_PENDING, nullable=False),
    sa.Column("engine_id", String(320)),
    sa.Column("claimed_at", DateTime),
    sa.Column("finished_at", DateTime),
    sa.Column("error", Text),
    # The deadline of the running operation's driver call (doc/reconciliation.rst,
    # "Leases"); NULL: no driver call under a lease (yet).
    sa.Column("lease_expires_at", DateTime),
    # The running call's hard deadline (the lease is never renewed past it):
    # a take-over of a backend that cannot fence waits for it (0011).
    sa.Column("lease_deadline", DateTime),
    # A host's pending requests in id order: the claim walks it and stops
    # after the few it takes (db/request_queue.py; 0019 added the id, which
    # SQLite's and InnoDB's indexes end in anyway, for PostgreSQL's).
    Index("ix_requests_status_host_id", "status", "host", "id"),
    # The claim takes the oldest pending ones: in this index's order, it
    # stops after the few it takes; with (status, host) alone SQLite sorted
    # every pending row at each claim (50,000 at a 50,000-share stack's create).
    Index("ix_requests_status_id", "status", "id"),
    # The pending requests of no host, in id order (a check's claim takes
    # the oldest): PostgreSQL reads no order for ``host IS NULL`` from
    # the index above; MariaDB has no partial index (it walks (status, id)).
    Index("ix_requests_pending_hostless", "id",
          postgresql_where=sa.text("status = 'pending' AND host IS NULL"))
    .ddl_if(dialect="postgresql"),
    Index("ix_requests_resource", "resource_type", "resource_id"),
    Index("ix_requests_status_lease", "status", "lease_expires_at"),
)


share_servers = sa.Table(
    "share_servers", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("host", String(BACKEND_HOST), nullable=False),
    sa.Column("status", String(32), nullable=False),
    sa.Column("task_state", String(64)),
    sa.Column("backend_details", JSON, default=dict, nullable=False),
    _fence(),
    *_timestamps(),
    Index("ix_share_servers_host_status", "host", "status"),
    Index("ix_share_servers_status", "status"),
)


shares = sa.Table(
    "shares", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("name", String(255)),
    sa.Column("size", Integer, nullable=False),
    sa.Column("share_proto", String(16), nullable=False),
    sa.Column("project_id", String(255)),
    sa.Column("snapshot_id", String(36)),
    sa.Column("share_group_id", String(36), ForeignKey("share_groups.id")),
    *_timestamps(),
)


share_instances = sa.Table(
    "share_instances", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_id", String(36), ForeignKey("shares.id"), nullable=False),
    sa.Column("host", String(BACKEND_HOST), nullable=False),
    sa.Column("status", String(40), nullable=False),
    sa.Column("share_server_id", String(36), ForeignKey("share_servers.id")),
    sa.Column("replica_state", String(32)),
    sa.Column("task_state", String(64)),
    sa.Column("progress", String(32)),
    # Manila's shape: [{"path": ..., "is_admin_only": bool, "preferred": bool}]
    sa.Column("export_locations", JSON, default=list, nullable=False),
    # Manila's summary of the instance's access rules: active, syncing, error.
    sa.Column("access_rules_status", String(32), default=vocab.ACCESS_ACTIVE,
              server_default=vocab.ACCESS_ACTIVE, nullable=False),
    # What the last drift check found on the backend (reconcile/drift.py);
    # NULL when the backend agrees.
    sa.Column("drift", JSON, default=None),
    # The size an extend under way asks for (migration 0014): a pool counts
    # it while the status is 'extending' (db/capacity.py).
    sa.Column("pending_size", Integer),
    _fence(),
    *_timestamps(),
    Index("ix_share_instances_host_status", "host", "status"),
    Index("ix_share_instances_status", "status"),
    Index("ix_share_instances_share_id", "share_id"),
)


share_snapshots = sa.Table(
    "share_snapshots", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_id", String(36), ForeignKey("shares.id"), nullable=False),
    sa.Column("name", String(255)),
    sa.Column("size", Integer, nullable=False),
    sa.Column("project_id", String(255)),
    sa.Column("share_group_snapshot_id", String(36), ForeignKey("share_group_snapshots.id")),
    *_timestamps(),
    # A share's delete counts its snapshots (migration 0016).
    Index("ix_share_snapshots_share_id", "share_id"),
)


share_snapshot_instances = sa.Table(
    "share_snapshot_instances", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("snapshot_id", String(36), ForeignKey("share_snapshots.id"), nullable=False),
    sa.Column("share_instance_id", String(36), ForeignKey("share_instances.id"), nullable=False),
    sa.Column("status", String(32), nullable=False),
    sa.Column("progress", String(32)),
    # The driver's own text (Manila: VARCHAR(255)); drivers' locations may be
    # longer, and a snapshot the backend made must not fail on its record.
    sa.Column("provider_location", Text),
    # What the last drift check found on the backend (reconcile/drift.py).
    sa.Column("drift", JSON, default=None),
    _fence(),
    *_timestamps(),
    Index("ix_snapshot_instances_status", "status"),
    Index("ix_snapshot_instances_share_instance", "share_instance_id"),
)


share_groups = sa.Table(
    "share_groups", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("name", String(255)),
    sa.Column("host", String(BACKEND_HOST), nullable=False),
    sa.Column("status", String(32), nullable=False),
    sa.Column("project_id", String(255)),
    sa.Column("share_server_id", String(36), ForeignKey("share_servers.id")),
    _fence(),
    *_timestamps(),
    Index("ix_share_groups_host_status", "host", "status"),
    Index("ix_share_groups_status", "status"),
)


share_group_snapshots = sa.Table(
    "share_group_snapshots", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_group_id", String(36), ForeignKey("share_groups.id"), nullable=False),
    sa.Column("name", String(255)),
    sa.Column("status", String(32), nullable=False),
    sa.Column("project_id", String(255)),
    _fence(),
    *_timestamps(),
    Index("ix_group_snapshots_status", "status"),
)


# What a group snapshot holds: one row per share of its group when it was
# taken (Manila's share group snapshot members, migration 0020). A member
# lives while its group snapshot does, and keeps its share from a delete.
share_group_snapshot_members = sa.Table(
    "share_group_snapshot_members", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_group_snapshot_id", String(36), ForeignKey("share_group_snapshots.id"),
              nullable=False),
    sa.Column("share_id", String(36), ForeignKey("shares.id"), nullable=False),
    sa.Column("share_instance_id", String(36), ForeignKey("share_instances.id"), nullable=False),
    sa.Column("size", Integer, nullable=False),
    sa.Column("share_proto", String(16), nullable=False),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    Index("ix_group_snapshot_members_snapshot", "share_group_snapshot_id"),
    # A share's delete looks for the group snapshots that hold it.
    Index("ix_group_snapshot_members_share", "share_id"),
)


share_backups = sa.Table(
    "share_backups", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_id", String(36), ForeignKey("shares.id"), nullable=False),
    sa.Column("name", String(255)),
    sa.Column("host", String(BACKEND_HOST), nullable=False),
    sa.Column("status", String(32), nullable=False),
    sa.Column("size", Integer),
    sa.Column("progress", String(32)),
    sa.Column("restore_progress", String(32)),
    _fence(),
    *_timestamps(),
    Index("ix_share_backups_host_status", "host", "status"),
    Index("ix_share_backups_status", "status"),
)


# One rule of who may mount a share (Manila's share access map); a denied
# rule keeps its row with ``deleted_at`` set.
share_access_rules = sa.Table(
    "share_access_rules", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("share_id", String(36), ForeignKey("shares.id"), nullable=False),
    sa.Column("access_type", String(32), nullable=False),  # ip, user, cert, cephx
    sa.Column("access_to", String(255), nullable=False),
    sa.Column("access_level", String(2), nullable=False),  # rw, ro
    sa.Column("state", String(32), nullable=False),
    sa.Column("access_key", String(255), nullable=True),  # a cephx rule's key (0018)
    *_timestamps(),
    Index("ix_share_access_rules_share", "share_id"),
    Index("ix_share_access_rules_state", "state"),
)


# A backend's last get_share_stats() report: capabilities and pools.
backend_stats = sa.Table(
    "backend_stats", metadata,
    sa.Column("host", String(BACKEND_HOST), primary_key=True),
    sa.Column("stats", JSON, default=dict, nullable=False),
    sa.Column("engine_id", String(320)),
    sa.Column("updated_at", DateTime, default=utcnow, onupdate=utcnow),
)


# Hash of a backend's get_backend_info() at the last ensure-resources.
backend_info = sa.Table(
    "backend_info", metadata,
    sa.Column("host", String(BACKEND_HOST), primary_key=True),
    sa.Column("info_hash", String(64)),
    sa.Column("updated_at", DateTime, onupdate=utcnow),
)


# User messages (migration 0012, common/messages.py): one per request of a
# user's resource that failed or was abandoned, until ``expires_at``.
messages = sa.Table(
    "messages", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    sa.Column("expires_at", DateTime, nullable=False),
    sa.Column("resource_type", String(32), nullable=False),
    sa.Column("resource_id", String(64), nullable=False),
    sa.Column("action_id", String(3), nullable=False),
    sa.Column("detail_id", String(3), nullable=False),
    sa.Column("message_level", String(16), nullable=False),
    sa.Column("request_id", BigInteger().with_variant(Integer, "sqlite")),
    sa.Column("detail", Text),
    Index("ix_messages_resource", "resource_id"),
    Index("ix_messages_expires", "expires_at"),
)


reconcile_passes = sa.Table(
    "reconcile_passes", metadata,
    sa.Column("id", Integer, primary_key=True, autoincrement=True),
    sa.Column("host", String(255), nullable=False),
    sa.Column("engine_id", String(320), nullable=False),
    sa.Column("trigger", String(400), nullable=False),  # 'peer:<engine id>' fits
    sa.Column("dry_run", Boolean, default=False, nullable=False),
    sa.Column("started_at", DateTime, default=utcnow, nullable=False),
    sa.Column("finished_at", DateTime),
    sa.Column("summary", JSON, default=dict, nullable=False),
    Index("ix_reconcile_passes_host", "host"),
)


stack_templates = sa.Table(
    "stack_templates", metadata,
    sa.Column("id", Integer, primary_key=True, autoincrement=True),
    sa.Column("stack_id", String(36)),
    sa.Column("template", JSON, nullable=False),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    Index("ix_stack_templates_stack", "stack_id"),
    # Purged rows' ids must never come back (a stale reference would point at
    # a new row): SQLite reuses the largest id without AUTOINCREMENT.
    sqlite_autoincrement=True,
)


stacks = sa.Table(
    "stacks", metadata,
    sa.Column("id", String(36), primary_key=True, default=new_id),
    sa.Column("name", String(255), nullable=False),
    sa.Column("action", String(16), nullable=False),
    sa.Column("status", String(16), nullable=False),
    sa.Column("status_reason", Text),
    sa.Column("template_id", Integer, ForeignKey("stack_templates.id")),
    sa.Column("prev_template_id", Integer, ForeignKey("stack_templates.id")),
    sa.Column("current_traversal", String(36)),
    sa.Column("current_deps", JSON, default=dict, nullable=False),
    sa.Column("disable_rollback", Boolean, default=False, nullable=False),
    sa.Column("timeout_seconds", Integer),  # None: no timeout
    sa.Column("traversal_started_at", DateTime),
    *_timestamps(),
    Index("ix_stacks_name", "name"),
)


stack_resources = sa.Table(
    "stack_resources", metadata,
    sa.Column("id", Integer, primary_key=True, autoincrement=True),
    sa.Column("stack_id", String(36), ForeignKey("stacks.id"), nullable=False),
    sa.Column("name", String(255), nullable=False),
    sa.Column("type", String(32), nullable=False),
    sa.Column("template_id", Integer, ForeignKey("stack_templates.id")),
    sa.Column("properties", JSON, default=dict, nullable=False),
    sa.Column("attributes", JSON, default=dict, nullable=False),
    sa.Column("physical_id", String(64)),
    sa.Column("action", String(16), default=vocab.STACK_INIT, nullable=False),
    sa.Column("status", String(16), default=vocab.STACK_COMPLETE, nullable=False),
    sa.Column("status_reason", Text),
    sa.Column("engine_id", String(320)),
    sa.Column("atomic_key", Integer, default=0, nullable=False),
    sa.Column("requires", JSON, default=list, nullable=False),
    sa.Column("replaces", Integer),
    sa.Column("replaced_by", Integer),
    sa.Column("current_traversal", String(36)),
    *_timestamps(),
    Index("ix_stack_resources_stack", "stack_id"),
    sqlite_autoincrement=True,
)


# Stack events (migration 0015, db/stack_events.py): one per status change of
# a stack (``resource_name`` NULL) or of one of its resource rows, written in
# the transaction of the change. Ordered by ``id`` (never by time: two events
# of one transaction may share a timestamp); the newest
# ``max_events_per_stack`` of a stack are kept.
stack_events = sa.Table(
    "stack_events", metadata,
    sa.Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("stack_id", String(36), nullable=False),
    sa.Column("resource_name", String(255)),
    sa.Column("resource_id", Integer),  # the stack_resources row (purged rows' too)
    sa.Column("physical_id", String(64)),
    sa.Column("action", String(16), nullable=False),
    sa.Column("status", String(16), nullable=False),
    sa.Column("reason", Text),
    sa.Column("traversal_id", String(36)),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    Index("ix_stack_events_stack", "stack_id", "id"),
    Index("ix_stack_events_resource", "stack_id", "resource_name", "id"),
    # Purged events' ids must never come back: a follower reads "after id N".
    sqlite_autoincrement=True,
)


sync_points = sa.Table(
    "sync_points", metadata,
    sa.Column("entity_id", String(64), primary_key=True),
    sa.Column("traversal_id", String(36), primary_key=True),
    sa.Column("is_update", Boolean, primary_key=True),
    sa.Column("stack_id", String(36), ForeignKey("stacks.id"), nullable=False),
    sa.Column("atomic_key", Integer, default=0, nullable=False),
    sa.Column("input_data", JSON, default=dict, nullable=False),
    sa.Column("created_at", DateTime, default=utcnow, nullable=False),
    sa.Column("updated_at", DateTime, onupdate=utcnow),
    Index("ix_sync_points_stack_traversal", "stack_id", "traversal_id"),
)



# What ``db sync`` records about the schema it left (migration 0013):
# 'engine_floor', the oldest head whose engines still work on it.
schema_info = sa.Table(
    "schema_info", metadata,
    sa.Column("name", String(64), primary_key=True),
    sa.Column("value", String(255), nullable=False),
)
