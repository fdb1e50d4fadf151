"""The status poll of shares whose create from a snapshot goes on in the
backend after the driver's call returned (Manila's asynchronous create:
the driver answers ``{"status": "creating_from_snapshot", ...}`` and the
instance keeps that status with its ``progress`` set). Periodically, per
backend, each such instance is asked about with ``get_share_status``
under its try-lock: ``available`` ends the create (export locations, the
access rules queued meanwhile), an error or a missing share ends it in
``error``, ``creating_from_snapshot`` leaves it for the next run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.drivers.exceptions import (
    FencedCall,
    ShareBackendException,
    ShareResourceNotFound,
)
from sharemgr.manager import access_sync, driver_args, kinds, operation_table, successes
from sharemgr.manager.op_errors import log_failure

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

_STATUS = operation_table.STATUS_METHOD[vocab.SHARE_INSTANCE]


def poll_clones(ops: Operations, hosts: list[str]) -> None:
    """One run over these hosts' creates in progress; a failure about one
    is logged and leaves it for the next run."""
    ops.coordinator.each_unlocked(
        kinds.SHARE_INSTANCE.lock_name, [i.id for i in resources.clones_in_progress(ops.db, hosts)],
        lambda ident: poll_one(ops, ident), "the status poll")


def poll_one(ops: Operations, ident: str) -> str | None:
    """Ask about one instance (the caller holds its lock); the status
    written, or None when nothing was."""
    inst = db_api.get(ops.db, models.ShareInstance, ident)
    if inst is None or inst.status != vocab.CREATING_FROM_SNAPSHOT or inst.progress is None:
        return None
    what = f"create of share instance {ident} from a snapshot"
    share_d, server = driver_args.share_parts(ops.db, inst)
    try:
        answer = ops.driver_for(inst.host).get_share_status(share_d, server)
    except FencedCall as exc:  # a newer owner asks and settles it
        LOG.info("%s: the status poll was fenced: %s", what, exc)
        return None
    except ShareResourceNotFound as exc:
        log_failure(what, _STATUS, exc)
        answer = {"status": vocab.ERROR}
    except ShareBackendException as exc:  # an outage: asked again next run
        log_failure(what, _STATUS, exc)
        return None
    status = answer.get("status") if isinstance(answer, dict) else None
    seen = {"status": inst.status, "fence": inst.fence}
    if status == vocab.CREATING_FROM_SNAPSHOT:
        progress = answer.get("progress") if isinstance(answer, dict) else None
        if progress is not None:
            db_api.conditional_update(ops.db, models.ShareInstance, ident, seen,
                                      {"progress": str(progress)[:32]})
        return None
    if status == vocab.AVAILABLE:
        values: dict[str, object] = {"status": vocab.AVAILABLE, "progress": "100%"}
        if answer.get("export_locations") is not None:
            values["export_locations"] = successes.export_locations(answer["export_locations"])
    else:
        LOG.warning("%s ended on the backend with %r", what, answer)
        values = {"status": vocab.ERROR}
    if not db_api.conditional_update(ops.db, models.ShareInstance, ident, seen, values):
        return None
    LOG.info("%s: %s", what, values["status"])
    if values["status"] == vocab.AVAILABLE:
        done = db_api.get(ops.db, models.ShareInstance, ident)
        if done is not None:
            access_sync.flush_access(ops, done)
    return str(values["status"])
