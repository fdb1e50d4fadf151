"""Rows → the plain dicts drivers receive (doc/drivers.rst has the shapes)."""

from __future__ import annotations

from collections.abc import Sequence

from sharemgr.db import models


def _fence(row: object) -> int | None:
    """The row's fencing token for the driver (doc/drivers.rst, "Fencing")."""
    return getattr(row, "fence", None)


def share(inst: models.ShareInstance, logical: models.Share) -> dict[str, object]:
    return {
        "id": inst.id,
        "share_id": logical.id,
        "name": logical.name or f"share-{logical.id}",
        "size": logical.size,
        "share_proto": logical.share_proto,
        "host": inst.host,
        "share_server_id": inst.share_server_id,
        "export_locations": list(inst.export_locations or []),
        "snapshot_id": logical.snapshot_id,
        "replica_state": inst.replica_state,
        "fence_token": _fence(inst),
    }


def snapshot(
    snap_inst: models.ShareSnapshotInstance,
    snap: models.ShareSnapshot,
    inst: models.ShareInstance,
    logical: models.Share,
) -> dict[str, object]:
    return {
        "id": snap_inst.id,
        "snapshot_id": snap.id,
        "share_instance_id": inst.id,
        "share_id": logical.id,
        "name": snap.name or f"snapshot-{snap.id}",
        "size": snap.size,
        "share": share(inst, logical),
        "provider_location": snap_inst.provider_location,
        "fence_token": _fence(snap_inst),
    }


def server(row: models.ShareServer) -> dict[str, object]:
    return {"id": row.id, "host": row.host, "backend_details": dict(row.backend_details or {}),
            "fence_token": _fence(row)}


def group(row: models.ShareGroup) -> dict[str, object]:
    return {
        "id": row.id,
        "name": row.name or f"group-{row.id}",
        "host": row.host,
        "share_server_id": row.share_server_id,
        "fence_token": _fence(row),
    }


def group_snapshot(row: models.ShareGroupSnapshot, grp: models.ShareGroup,
                   members: Sequence[models.ShareGroupSnapshotMember] = ()
                   ) -> dict[str, object]:
    """``members``: the shares it is taken of (Manila's
    ``share_group_snapshot_members``), one dict each."""
    return {
        "id": row.id,
        "name": row.name or f"group-snapshot-{row.id}",
        "share_group_id": grp.id,
        "share_group": group(grp),
        "members": [{"id": m.id, "share_id": m.share_id, "share_instance_id": m.share_instance_id,
                     "size": m.size, "share_proto": m.share_proto} for m in members],
        "fence_token": _fence(row),
    }


def backup(row: models.ShareBackup) -> dict[str, object]:
    return {
        "id": row.id,
        "share_id": row.share_id,
        "name": row.name or f"backup-{row.id}",
        "size": row.size,
        "fence_token": _fence(row),
    }
