"""A share's migration, as Manila's (doc/migration.rst): the three requests
of the source host that carry out what a user asks, each under the source
instance's lock (``Operations.run``: taken, fenced, the outcome one
conditional transaction): ``migration_start`` (the driver checks it can and
starts phase 1, or the engine takes over: host-assisted), ``migration_complete``
(phase 2: the destination becomes the share's instance, the source goes,
the rules go to the destination) and ``migration_cancel``. Between them the
periodic task (manager/migration_continue.py) drives phase 1 on and settles
a migration whose request a crash cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.manager import hosts, migration_host
from sharemgr.manager import migration_rows as mrows
from sharemgr.manager.migration_plans import FLAGS
from sharemgr.manager.op_errors import NotNow, OperationFailed, Stale
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op
from sharemgr.manager.successes import deleted

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

def _request_of(ops: Operations, op: Op, verb: str) -> tuple[models.ShareInstance, str]:
    """A migration request's destination (read before the lock, as it never
    moves once written; each call takes it again once the source is taken,
    ``mrows.taken``) and the words its logs and errors name it by."""
    source = db_api.get(ops.db, mrows.SI, op.ident)
    if source is None:
        raise Stale(f"share instance {op.ident} is gone")
    dest = mrows.destination(ops, source, op)
    return dest, f"{verb} of share instance {op.ident} to {dest.host}"


def start(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration")
    wanted = {flag: bool(op.args.get(flag)) for flag in FLAGS}

    kept: list[bool] = []

    def call(row: models.ShareInstance, _read: object) -> object:
        nonlocal dest
        mrows.task(row, vocab.MIGRATION_STARTING, what)
        dest = mrows.taken(ops, dest)
        pair = mrows.Pair(ops, row, dest)
        why = "--force-host-assisted"
        if not op.args.get("force_host_assisted"):
            compat: Mapping[str, object] = pair.driver.migration_check_compatibility(
                pair.source_d, pair.dest_d, pair.server, pair.dest_server) or {}
            if compat.get("compatible"):
                missing = [f for f, asked in wanted.items() if asked and not compat.get(f)]
                if missing:
                    raise OperationFailed(
                        f"backend {hosts.host_of(row.host)!r} cannot keep the share "
                        f"{', '.join(m.replace('_', ' ') for m in missing)} while it moves "
                        f"it to {dest.host}")
                pair.driver.migration_start(*pair.args())
                return None
            why = f"backend {hosts.host_of(row.host)!r} cannot move the share itself"
        return _start_copying(ops, row, dest, wanted, why, kept)

    def done(row: models.ShareInstance, answer: object) -> list[Change]:
        if not isinstance(answer, Mapping):
            return mrows.both(row, dest, vocab.MIGRATION_DRIVER_IN_PROGRESS,
                              vocab.MIGRATION_STARTING, "0")
        # The engine copies from now on (the periodic task).
        return [(mrows.SI, row.id, {"status": vocab.MIGRATING,
                                    "task_state": vocab.DATA_COPYING_STARTING},
                 {"task_state": vocab.DATA_COPYING_IN_PROGRESS, "progress": "0"}),
                (mrows.SI, dest.id, {"status": vocab.MIGRATING_TO},
                 {"task_state": vocab.DATA_COPYING_IN_PROGRESS,
                  "export_locations": answer["export_locations"]})]

    return ops.run(op, Step(
        mrows.SI, op.ident, what, call, done,
        lambda row, _exc: mrows.failed(row, dest, any(kept)), expected=(vocab.MIGRATING,)), held)


def _start_copying(ops: Operations, row: models.ShareInstance, dest: models.ShareInstance,
                   wanted: dict[str, bool], why: str, kept: list[bool]) -> dict[str, object]:
    """A start that goes host-assisted: written first (a crash from here on
    leaves a migration the periodic task undoes), then the destination made
    and the source's clients made read-only."""
    refused = migration_host.refusal(ops, row, dest, wanted)
    if refused:
        raise OperationFailed(f"{why} ({dest.host}), and {refused}")
    if not db_api.transition_with_request(ops.db, mrows.fenced(mrows.both(
            row, dest, vocab.DATA_COPYING_STARTING, vocab.MIGRATION_STARTING), row), None):
        raise Stale(f"the migration of share instance {row.id} changed meanwhile")
    sides = migration_host.Sides(ops, row, dest)
    try:
        locations = migration_host.begin(sides)
    except Exception:
        kept.append(mrows.undone(sides))
        raise
    return {"export_locations": locations}


def complete(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration complete")

    def call(row: models.ShareInstance, _read: object) -> object:
        nonlocal dest
        mrows.task(row, vocab.MIGRATION_COMPLETING, what)
        dest = mrows.taken(ops, dest)
        if mrows.host_assisted(dest):
            sides = migration_host.Sides(ops, row, dest)
            try:
                return {"export_locations": migration_host.switch(sides)}
            except (NotNow, Stale):
                raise
            except Exception as exc:
                # The destination holds the checked copy and the source's
                # delete may have begun: the only way is forward. Nothing
                # is written; the migration stays completing, and the
                # periodic task carries the complete out again.
                raise Stale(f"{what}: {exc}; it is carried out again") from exc
        pair = mrows.Pair(ops, row, dest)
        return pair.driver.migration_complete(*pair.args()) or {}

    def done(row: models.ShareInstance, answer: object) -> list[Change]:
        locations = answer.get("export_locations") if isinstance(answer, Mapping) else None
        if not isinstance(locations, list):
            locations = []
        # The rules are the share's: sent to the destination once it is the
        # share's instance (queued now, so a crash before the request is
        # written leaves them to the reconciliation pass's resend).
        rules = [r for r in db_access.rules_of(ops.db, row.share_id)
                 if r.state == vocab.ACCESS_ACTIVE]
        return [
            (mrows.SI, dest.id, {"status": vocab.MIGRATING_TO},
             {"status": vocab.AVAILABLE, "task_state": vocab.MIGRATION_SUCCESS,
              "export_locations": locations,
              **({"access_rules_status": vocab.ACCESS_RULES_SYNCING} if rules else {})}),
            (mrows.SI, row.id, {"status": row.status, "task_state": vocab.MIGRATION_COMPLETING},
             {**deleted(), "task_state": vocab.MIGRATION_SUCCESS, "progress": None}),
            *((models.ShareAccessRule, r.id, {"state": vocab.ACCESS_ACTIVE},
               {"state": vocab.ACCESS_QUEUED_TO_APPLY}) for r in rules),
        ]

    def then(_row: models.ShareInstance, changes: list[Change]) -> None:
        if any(m is models.ShareAccessRule for m, *_ in changes):
            db_access.add_requests(ops.db, [Op(vocab.SHARE_INSTANCE, dest.id,
                                               vocab.ACTION_UPDATE_ACCESS, dest.host).request()])

    return ops.run(op, Step(
        mrows.SI, op.ident, what, call, done, lambda row, _exc: mrows.failed(row, dest),
        expected=(vocab.MIGRATING,), then=then), held)


def cancel(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration cancel")

    def call(row: models.ShareInstance, _read: object) -> object:
        nonlocal dest
        mrows.task(row, vocab.MIGRATION_CANCEL_IN_PROGRESS, what)
        dest = mrows.taken(ops, dest)
        if mrows.host_assisted(dest):
            migration_host.undo(migration_host.Sides(ops, row, dest))
            return None
        pair = mrows.Pair(ops, row, dest)
        pair.driver.migration_cancel(*pair.args())
        return None

    def failed(row: models.ShareInstance, _exc: Exception) -> list[Change]:
        # What the destination still holds is unknown; the source is served
        # as before.
        return [mrows.source_back(row, vocab.MIGRATION_ERROR), mrows.dest_in_error(dest)]

    return ops.run(op, Step(
        mrows.SI, op.ident, what, call,
        lambda row, _r: [mrows.source_back(row, vocab.MIGRATION_CANCELLED),
                         mrows.dest_gone(dest, vocab.MIGRATION_CANCELLED)],
        failed, expected=(vocab.MIGRATING,)), held)
