"""The ORM classes, mapped onto the tables of db/tables.py (the schema is
described there once, and created by the alembic migrations of
db/migrations). The names below are re-exported for the code that reads
them through this module."""

from __future__ import annotations

from sharemgr.db import tables
from sharemgr.db.tables import (  # noqa: F401  (re-exported)
    BACKEND_HOST,
    BACKEND_REASON,
    DateTime,
    new_id,
    utcnow,
)
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    metadata = tables.metadata



class Service(Base):
    __table__ = tables.services


class ServiceBackend(Base):
    """One backend of one engine and its state (migration 0008)."""

    __table__ = tables.service_backends


class Request(Base):
    __table__ = tables.requests


class ShareServer(Base):
    __table__ = tables.share_servers


class Share(Base):
    __table__ = tables.shares


class ShareInstance(Base):
    __table__ = tables.share_instances


class ShareSnapshot(Base):
    __table__ = tables.share_snapshots


class ShareSnapshotInstance(Base):
    __table__ = tables.share_snapshot_instances


class ShareGroup(Base):
    __table__ = tables.share_groups


class ShareGroupSnapshot(Base):
    __table__ = tables.share_group_snapshots


class ShareBackup(Base):
    __table__ = tables.share_backups


class ShareAccessRule(Base):
    """One rule of who may mount a share (Manila's share access map); a
    denied rule keeps its row with ``deleted_at`` set."""

    __table__ = tables.share_access_rules


class BackendStats(Base):
    """A backend's last get_share_stats() report: capabilities and pools."""

    __table__ = tables.backend_stats


class BackendInfo(Base):
    """Hash of a backend's get_backend_info() at the last ensure-resources."""

    __table__ = tables.backend_info


class Message(Base):
    __table__ = tables.messages


class ReconcilePass(Base):
    __table__ = tables.reconcile_passes


class StackTemplate(Base):
    __table__ = tables.stack_templates


class Stack(Base):
    __table__ = tables.stacks


class StackResource(Base):
    __table__ = tables.stack_resources


class SyncPoint(Base):
    __table__ = tables.sync_points


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
