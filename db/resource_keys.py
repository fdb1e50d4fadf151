"""The ids a resource's requests and messages are keyed by: what
``sharectl request list`` and ``message list`` filter on when a user names a
share or a snapshot (its instances and backups do the work)."""

from __future__ import annotations

import sqlalchemy as sa
from sharemgr.db import models
from sqlalchemy.orm import Session


def request_keys(session: Session, ident: str) -> list[str]:
    """The ids requests about ``ident`` are keyed by: a share's requests
    name its instances (and its backups), a snapshot's its instance."""
    keys = [ident]
    for model, column in ((models.ShareInstance, models.ShareInstance.share_id),
                          (models.ShareBackup, models.ShareBackup.share_id),
                          (models.ShareSnapshotInstance,
                           models.ShareSnapshotInstance.snapshot_id)):
        keys += session.scalars(sa.select(model.id).where(column == ident))
    return keys
