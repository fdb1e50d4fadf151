"""The database, read directly (plain SELECTs: no write lock on SQLite), and
what a read of the world shows: transient resources, stale rows, objects the
backend made for a row in error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.drivers.dummy_state import DB_NAME
from sqlalchemy.orm import Session

from tests.functional.harness import Deployment


def _row(obj: Any, *cols: str) -> dict[str, Any]:
    return {c: getattr(obj, c) for c in cols}


class Reader:
    def __init__(self, url: str) -> None:
        if url.startswith("sqlite"):
            self.engine = sa.create_engine(url, connect_args={"timeout": 60})
        else:
            self.engine = sa.create_engine(url, pool_size=2, max_overflow=2, pool_pre_ping=True)

    def dispose(self) -> None:
        self.engine.dispose()

    def world(self) -> dict[str, Any]:
        with Session(self.engine) as s:
            def live(model: type[models.Live] | type[models.StackResource]) -> list:
                return list(s.scalars(sa.select(model).where(model.deleted_at.is_(None))))

            instances = [_row(i, "id", "share_id", "host", "status", "replica_state",
                              "share_server_id", "created_at") for i in live(models.ShareInstance)]
            shares = {}
            primaries: dict[str, dict] = {}
            for inst in sorted(instances, key=lambda i: (i["created_at"], i["id"])):
                if inst["replica_state"] in (None, vocab.REPLICA_ACTIVE):
                    primaries.setdefault(inst["share_id"], inst)
            for sh in live(models.Share):
                primary = primaries.get(sh.id)
                shares[sh.id] = {**_row(sh, "id", "name", "size", "share_proto", "snapshot_id",
                                        "share_group_id"),
                                 "status": primary["status"] if primary else None,
                                 "instance_id": primary["id"] if primary else None}
            snap_insts = {i.snapshot_id: _row(i, "id", "snapshot_id", "share_instance_id",
                                              "status")
                          for i in live(models.ShareSnapshotInstance)}
            snapshots = {}
            for sn in live(models.ShareSnapshot):
                snap_inst = snap_insts.get(sn.id)
                snapshots[sn.id] = {**_row(sn, "id", "share_id", "name", "size"),
                                    "status": snap_inst["status"] if snap_inst else None,
                                    "instance_id": snap_inst["id"] if snap_inst else None}
            world = {
                "instances": instances,
                "shares": shares,
                "snapshots": snapshots,
                "snapshot_instances": list(snap_insts.values()),
                "groups": [
                    _row(g, "id", "name", "host", "status") for g in live(models.ShareGroup)
                ],
                "group_snapshots": [
                    _row(g, "id", "name", "share_group_id", "status")
                    for g in live(models.ShareGroupSnapshot)
                ],
                "backups": [
                    _row(b, "id", "name", "share_id", "status", "progress")
                    for b in live(models.ShareBackup)
                ],
                "servers": [_row(v, "id", "host", "status") for v in live(models.ShareServer)],
                "stacks": [
                    _row(
                        st,
                        "id",
                        "name",
                        "action",
                        "status",
                        "status_reason",
                        "template_id",
                        "prev_template_id",
                        "current_traversal",
                        "disable_rollback",
                        "deleted_at",
                        "created_at",
                    )
                    for st in s.scalars(sa.select(models.Stack).order_by(models.Stack.created_at))
                ],
                "rows": [
                    _row(
                        r,
                        "id",
                        "stack_id",
                        "name",
                        "type",
                        "template_id",
                        "physical_id",
                        "action",
                        "status",
                        "status_reason",
                        "engine_id",
                        "replaces",
                        "replaced_by",
                        "properties",
                        "current_traversal",
                    )
                    for r in live(models.StackResource)
                ],
                "requests": dict(
                    s.execute(
                        sa.select(models.Request.status, sa.func.count()).group_by(
                            models.Request.status
                        )
                    ).all()
                ),
            }
        return world

    def template(self, template_id: int | None) -> dict | None:
        if template_id is None:
            return None
        with Session(self.engine) as s:
            row = s.get(models.StackTemplate, template_id)
            return dict(row.template) if row is not None else None

    def requests(self, **filters: Any) -> list[dict[str, Any]]:
        stmt = sa.select(models.Request).order_by(models.Request.id)
        for key, value in filters.items():
            column = getattr(models.Request, key)
            stmt = stmt.where(column.in_(value) if isinstance(value, list | tuple | set)
                              else column == value)
        with Session(self.engine) as s:
            return [_row(r, "id", "created_at", "resource_type", "resource_id", "action",
                         "args", "host", "status", "engine_id", "claimed_at", "finished_at",
                         "error") for r in s.scalars(stmt)]

    def backup_shares(self) -> dict[str, str]:
        """Every backup's share, deleted backups too."""
        with Session(self.engine) as s:
            return dict(s.execute(sa.select(models.ShareBackup.id,
                                            models.ShareBackup.share_id)).all())

    def sync_points(self, stack_id: str) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            return [_row(p, "entity_id", "traversal_id", "is_update", "atomic_key",
                         "input_data") for p in s.scalars(
                sa.select(models.SyncPoint).where(models.SyncPoint.stack_id == stack_id))]


def transient_resources(world: dict) -> list[tuple[str, dict]]:
    out = []
    for kind, rows in (("share instance", world["instances"]),
                       ("snapshot instance", world["snapshot_instances"]),
                       ("share group", world["groups"]),
                       ("group snapshot", world["group_snapshots"]),
                       ("backup", world["backups"]),
                       ("share server", world["servers"])):
        out += [(kind, r) for r in rows if r["status"] in vocab.TRANSIENT_STATUSES]
    return out


def backend_now(d: Deployment) -> dict[str, dict[str, Any]]:
    """The dummy backend's objects by id, read straight from its state file
    (cheap enough to do every few seconds)."""
    path = Path(d.sections["dummy"]["dummy_state_path"]) / DB_NAME
    conn = sqlite3.connect(path, timeout=30)
    try:
        rows = conn.execute("SELECT id, kind, name, status, share_id FROM objects").fetchall()
    finally:
        conn.close()
    return {r[0]: {"id": r[0], "kind": r[1], "name": r[2], "status": r[3], "share_id": r[4]}
            for r in rows}


def made_but_error(world: dict, backend: dict[str, dict], reader: Reader
                   ) -> list[tuple[str, str]]:
    """Resources being created that the database (read first) says are
    ``error`` while the backend (read after) holds them. With the dummy
    driver a create that fails changes nothing, and reconciliation marks a
    ``creating`` resource error only when the backend does not have it; so
    this is a create settled while its driver call was still running (a live
    engine's operation taken for a dead one's). Only resources whose latest
    request is their create count: reconciliation marks some statuses error
    without asking the backend (a share in ``backup_creating``, by the spec's
    table), and a healthy share may well be behind those. A backup's
    requests are the backup's, not its share's: they count as the share's
    here."""
    out = []
    for inst in world["instances"]:
        if inst["status"] == vocab.ERROR and backend.get(inst["id"],
                                                         {}).get("status") == "available":
            share = world["shares"].get(inst["share_id"]) or {}
            kind = "replica" if inst["replica_state"] not in (None,
                                                              vocab.REPLICA_ACTIVE) else "share"
            out.append((inst["id"], f"{kind} instance {inst['id']} ({share.get('name')})"))
    for snap in world["snapshots"].values():
        iid = snap["instance_id"]
        if snap["status"] == vocab.ERROR and backend.get(iid, {}).get("status") == "available":
            out.append((iid, f"snapshot instance {iid} ({snap['name']})"))
    if not out:
        return out
    share_of = {inst["id"]: inst["share_id"] for inst in world["instances"]}
    owner = {ident: ident for ident, _ in out}  # request's resource id -> flagged id
    for backup_id, share_id in reader.backup_shares().items():
        for ident, _ in out:
            if share_id == share_of.get(ident):
                owner[backup_id] = ident
    latest: dict[str, tuple[str, str]] = {}  # flagged id -> (resource id, action)
    for req in reader.requests(resource_id=list(owner)):  # in id order: the last wins
        latest[owner[req["resource_id"]]] = (req["resource_id"], req["action"])
    return [(ident, what) for ident, what in out if latest.get(ident) == (ident, "create")]


def stale_rows(world: dict) -> list[dict]:
    """Rows IN_PROGRESS in a stack whose traversal is over."""
    over = {s["id"] for s in world["stacks"] if s["status"] != "IN_PROGRESS"}
    return [r for r in world["rows"] if r["status"] == "IN_PROGRESS" and r["stack_id"] in over]
