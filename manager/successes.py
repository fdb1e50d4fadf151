"""What an operation's success writes, given the driver's answer: the spec's
``success`` status, and for some operations more (``DONE``, by the spec's
key: a record going, a share going with its last instance, a create's
export locations, a server's backend details). The one place a driver's
answer is read into values the database stores."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db.engine import Database
from sharemgr.manager.kinds import Row
from sharemgr.manager.op_errors import OperationFailed
from sharemgr.manager.operation_table import Spec
from sharemgr.manager.plans import Change

LOG = logging.getLogger(__name__)


# (the database, the spec, the re-read row, the driver's answer, a forced delete)
Done = Callable[[Database, Spec, Row, object, bool], list[Change]]


def deleted() -> dict[str, object]:
    return {"status": vocab.DELETED, "deleted_at": models.utcnow()}


def export_locations(raw: Any) -> list[dict[str, object]]:
    """Manila's shape: path, is_admin_only, preferred. Drivers may return
    plain path strings. ``raw`` is what a driver returned, unchecked (a
    broken answer fails here, as the caller expects)."""
    out = []
    for item in raw or []:
        if isinstance(item, str):
            item = {"path": item}
        out.append(
            {
                "path": item["path"],
                "is_admin_only": bool(item.get("is_admin_only", False)),
                "preferred": bool(item.get("preferred", False)),
            }
        )
    return out


def changes(db: Database, spec: Spec, row: Row, answer: object, force: bool = False
            ) -> list[Change]:
    """What ``spec``'s success writes about ``row``, given the answer."""
    return DONE.get((spec.kind, spec.action), _status)(db, spec, row, answer, force)


def _status(db: Database, spec: Spec, row: Row, answer: object, force: bool) -> list[Change]:
    values = deleted() if spec.success == vocab.DELETED else {"status": spec.success}
    return [(type(row), row.id, {"status": row.status}, values)]


def share_gone(inst: models.ShareInstance) -> list[Change]:
    """The instance is deleted; the logical share goes with its last
    instance (decided in the outcome's transaction)."""
    return [(models.ShareInstance, inst.id, {"status": inst.status}, deleted()),
            *resources.share_gone_with_last_instance(inst.share_id)]


def _share_gone(db: Database, spec: Spec, row: Row, answer: object, force: bool
                ) -> list[Change]:
    assert isinstance(row, models.ShareInstance)
    return share_gone(row)


def checked(answer: object, *later: str) -> object:
    """A create's answer whose status the manager can record: none,
    available, or one of ``later`` (a failure of the call otherwise: the
    create ends in error)."""
    if isinstance(answer, Mapping) and answer.get("status") not in (
            None, vocab.AVAILABLE, *later):
        raise OperationFailed(f"the driver answered status {answer.get('status')!r}")
    return answer


def creation_values(answer: object, success: str) -> dict[str, object]:
    """A create's outcome: the success status with the export locations; or,
    when the driver goes on in the background (Manila's asynchronous create
    from a snapshot: ``{"status": "creating_from_snapshot", ...}``), the
    status kept and ``progress`` set, which hands the instance to the status
    poll (``clone_poll``)."""
    if not isinstance(answer, Mapping):
        return {"status": success, "export_locations": export_locations(answer)}
    locations = export_locations(answer.get("export_locations"))
    if answer.get("status") == vocab.CREATING_FROM_SNAPSHOT:
        return {"export_locations": locations,
                "progress": str(answer.get("progress") or "0%")[:32]}
    return {"status": success, "export_locations": locations}


def copy_goes_on(written: Iterable[Change]) -> bool:
    """Whether a create's outcome (``creation_values``) left the copy to the
    status poll."""
    return any(m is models.ShareInstance and "progress" in v and "status" not in v
               for m, _i, _e, v in written)


def _share_made(db: Database, spec: Spec, row: Row, answer: object, force: bool
                ) -> list[Change]:
    # From a snapshot, the driver may go on copying (its status poll ends it);
    # nothing would end a plain create left so.
    copying = row.status == vocab.CREATING_FROM_SNAPSHOT
    checked(answer, *((vocab.CREATING_FROM_SNAPSHOT,) if copying else ()))
    values = creation_values(answer, spec.success or vocab.AVAILABLE)
    return [(models.ShareInstance, row.id, {"status": row.status}, values)]


def _replica_made(db: Database, spec: Spec, row: Row, answer: object, force: bool
                  ) -> list[Change]:
    made = answer if isinstance(answer, dict) else {}
    return [(models.ShareInstance, row.id, {"status": row.status}, {
        "status": vocab.AVAILABLE,
        "replica_state": made.get("replica_state") or vocab.REPLICA_IN_SYNC,
        "export_locations": export_locations(made.get("export_locations")),
    })]


def _snapshot_made(db: Database, spec: Spec, row: Row, answer: object, force: bool
                   ) -> list[Change]:
    values: dict[str, object] = {"status": vocab.AVAILABLE, "progress": "100%"}
    if isinstance(answer, dict) and answer.get("provider_location"):
        values["provider_location"] = str(answer["provider_location"])
    return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, values)]


def _snapshot_gone(db: Database, spec: Spec, row: Row, answer: object, force: bool
                   ) -> list[Change]:
    assert isinstance(row, models.ShareSnapshotInstance)
    return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, deleted()),
            (models.ShareSnapshot, row.snapshot_id, {"deleted_at": None},
             {"deleted_at": models.utcnow()})]


def _server_set_up(db: Database, spec: Spec, row: Row, answer: object, force: bool
                   ) -> list[Change]:
    return [(models.ShareServer, row.id, {"status": row.status},
             {"status": vocab.ACTIVE, "backend_details": answer or {}})]


def _group_gone(db: Database, spec: Spec, row: Row, answer: object, force: bool
                ) -> list[Change]:
    written = _status(db, spec, row, answer, force)
    if force:
        # A forced group delete takes its group snapshots' records along
        # (Manila's force-delete does); their backend objects are not asked.
        gsnaps = db_api.query(db, models.ShareGroupSnapshot, {"share_group_id": row.id})
        if gsnaps:
            LOG.warning("forced delete of share group %s removes the records of its "
                        "group snapshots %s; they may remain on backend %s",
                        row.id, ", ".join(g.id for g in gsnaps), getattr(row, "host", None))
        written += [(models.ShareGroupSnapshot, g.id, {"status": g.status}, deleted())
                    for g in gsnaps]
    return written


_SI, _REP, _SNAP = vocab.SHARE_INSTANCE, vocab.REPLICA, vocab.SNAPSHOT_INSTANCE

DONE: dict[tuple[str, str], Done] = {
    (_SI, vocab.ACTION_CREATE): _share_made,
    (_SI, vocab.ACTION_DELETE): _share_gone,
    (_REP, vocab.ACTION_CREATE): _replica_made,
    (_REP, vocab.ACTION_DELETE): _share_gone,
    (_SNAP, vocab.ACTION_CREATE): _snapshot_made,
    (_SNAP, vocab.ACTION_DELETE): _snapshot_gone,
    (vocab.SHARE_SERVER, vocab.ACTION_CREATE): _server_set_up,
    (vocab.SHARE_GROUP, vocab.ACTION_DELETE): _group_gone,
    # Unmanage: the records go as a delete's do; the objects stay.
    (_SI, vocab.ACTION_UNMANAGE): _share_gone,
    (_SNAP, vocab.ACTION_UNMANAGE): _snapshot_gone,
}
