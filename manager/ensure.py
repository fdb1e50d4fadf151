"""ensure_driver_resources: at start, let each driver re-check the shares it
holds in available/ensuring, unless its backend info is unchanged since the
last start (as Manila does)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import successes, views
from sharemgr.manager.plans import Op

LOG = logging.getLogger(__name__)


def info_hash(info: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(info, sort_keys=True, default=str).encode()).hexdigest()


def ensure_backend(db: Database, host: str, driver: ShareDriver) -> int:
    """Ensure one backend's shares; returns how many were ensured (0 when
    skipped because the backend info is unchanged)."""
    try:
        info = driver.get_backend_info() or {}
        # Empty means "cannot tell" (the driver contract): ensure every time.
        new_hash = info_hash(info) if info else None
    except Exception as exc:
        LOG.warning("%s: get_backend_info failed (%s); ensuring all shares", host, exc)
        new_hash = None
    if new_hash is not None and resources.backend_info_hash(db, host) == new_hash:
        LOG.info("%s: backend info unchanged since the last start; ensure skipped", host)
        return 0
    rows = resources.on_host(db, models.ShareInstance, host, (vocab.AVAILABLE, vocab.ENSURING))
    mine = []
    for inst in rows:
        # Only what we moved to ensuring is ours to finish.
        if inst.status == vocab.ENSURING or db_api.conditional_update(
            db,
            models.ShareInstance,
            inst.id,
            {"status": vocab.AVAILABLE},
            {"status": vocab.ENSURING},
        ):
            mine.append(inst)
    if mine:
        dicts = []
        for inst in mine:
            share = db_api.get(db, models.Share, inst.share_id, include_deleted=True)
            dicts.append(views.share(inst, share))
        try:
            updates = driver.ensure_shares(dicts) or {}
        except Exception as exc:
            # A driver's own error is one line; anything else is a driver bug.
            LOG.error("%s: ensure_shares failed: %s: %s", host, type(exc).__name__, exc,
                      exc_info=None if isinstance(exc, ShareBackendException) else exc)
            updates = {}
        ensured = []
        for inst in mine:
            update: Mapping[str, object] = updates.get(inst.id) or {}
            values: dict[str, object] = {"status": update.get("status") or vocab.AVAILABLE}
            if update.get("export_locations") is not None:
                values["export_locations"] = successes.export_locations(update["export_locations"])
            if db_api.conditional_update(db, models.ShareInstance, inst.id,
                                         {"status": vocab.ENSURING}, values) and \
                    values["status"] == vocab.AVAILABLE:
                ensured.append(inst)
        reapply_access(db, ensured)
    if new_hash is not None:
        resources.set_backend_info_hash(db, host, new_hash)
    LOG.info("%s: ensured %d share instance(s)", host, len(mine))
    return len(mine)


def reapply_access(db: Database, instances: list[models.ShareInstance]) -> int:
    """A backend that was re-checked gets the full rule set of each of its
    shares that has rules (as Manila's ensure does), through update_access
    requests with ``resync``: under the share's lock, after anything queued.
    Returns how many were requested."""
    by_id = {inst.id: inst for inst in instances}
    ids = db_access.instances_with_rules(db, list(by_id))
    db_access.add_requests(db, [
        Op(vocab.SHARE_INSTANCE, i, vocab.ACTION_UPDATE_ACCESS, by_id[i].host,
           {"resync": True}).request() for i in ids])
    return len(ids)
