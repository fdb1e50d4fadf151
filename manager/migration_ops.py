"""A share's migration, driver-assisted as Manila's (doc/migration.rst).

Three requests of the source host carry out what a user asks, each under the
source instance's lock (``Operations.run``: taken, fenced, the outcome one
conditional transaction): ``migration_start`` (the driver checks it can,
then starts phase 1), ``migration_complete`` (phase 2: the destination
becomes the share's instance, the source goes, the rules go to the
destination) and ``migration_cancel``. Between them the periodic
``continue_migrations`` of the source host drives phase 1 on
(``migration_continue``, progress) and settles a migration whose request a
crash cut short: a start is undone (``migration_cancel``: the source stays,
as it was), a complete or a cancel is carried out again (both idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import messages, vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import messages as db_messages
from sharemgr.db import models, resources
from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.manager import data_mover, migration_host, views
from sharemgr.manager.migration_plans import FLAGS, destination_of
from sharemgr.manager.operations import (
    OperationFailed,
    Stale,
    Step,
    deleted,
    lock_name,
    log_failure,
)
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.drivers.base import ShareDriver
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

_SI = models.ShareInstance
# A migration's request, by the task_state its plan wrote: what a crash that
# cut it short leaves to ``continue_migrations``.
_REQUESTED = {vocab.MIGRATION_STARTING: vocab.ACTION_MIGRATION_START,
              vocab.DATA_COPYING_STARTING: vocab.ACTION_MIGRATION_START,
              vocab.MIGRATION_COMPLETING: vocab.ACTION_MIGRATION_COMPLETE,
              vocab.MIGRATION_CANCEL_IN_PROGRESS: vocab.ACTION_MIGRATION_CANCEL}


class _Pair:
    """A migration's two instances as the driver is given them."""

    def __init__(self, ops: Operations, source: models.ShareInstance,
                 dest: models.ShareInstance) -> None:
        self.source, self.dest = source, dest
        self.driver: ShareDriver = ops.driver_for(source.host)
        self.source_d, self.server = ops.share_parts(source)
        self.dest_d, self.dest_server = ops.share_parts(dest)

    def args(self) -> tuple[dict, dict, list, dict, dict | None, dict | None]:
        # No snapshots move yet (intake refuses a share that has any).
        return self.source_d, self.dest_d, [], {}, self.server, self.dest_server


class _NoDestination(Stale):
    """The destination row is gone or no longer migrating_to (an admin's
    reset): nothing for the driver to move to."""


def _dest(ops: Operations, source: models.ShareInstance, op: Op | None = None
          ) -> models.ShareInstance:
    ident = op.args.get("destination") if op is not None else None
    dest = db_api.get(ops.db, _SI, str(ident)) if ident else \
        destination_of(ops.db, source.share_id)
    if dest is None or dest.status != vocab.MIGRATING_TO:
        raise _NoDestination(f"share instance {source.id} has no migration destination")
    return dest


def _task(row: models.ShareInstance, task_state: str, what: str) -> None:
    if row.task_state != task_state:
        raise Stale(f"{what}: task_state is {row.task_state!r}, not {task_state!r}")


def _source_back(source: models.ShareInstance, task_state: str,
                 expected_task: str | tuple[str, ...] | None = None) -> Change:
    """The source available again, its migration ended with ``task_state``."""
    return (_SI, source.id,
            {"status": vocab.MIGRATING, "task_state": expected_task or source.task_state},
            {"status": vocab.AVAILABLE, "task_state": task_state, "progress": None})


def _dest_gone(dest: models.ShareInstance, task_state: str) -> Change:
    return (_SI, dest.id, {"status": vocab.MIGRATING_TO},
            {**deleted(), "task_state": task_state})


def _both(source: models.ShareInstance, dest: models.ShareInstance, task_state: str,
          expected: str, progress: str | None = None) -> list[Change]:
    values: dict[str, object] = {"task_state": task_state}
    return [(_SI, source.id, {"status": vocab.MIGRATING, "task_state": expected},
             {**values, **({"progress": progress} if progress is not None else {})}),
            (_SI, dest.id, {"status": vocab.MIGRATING_TO}, values)]


def _dest_in_error(dest: models.ShareInstance) -> Change:
    """A destination the driver could not remove: kept, in error, for an admin."""
    return (_SI, dest.id, {"status": vocab.MIGRATING_TO},
            {"status": vocab.ERROR, "task_state": vocab.MIGRATION_ERROR})


def _request_of(ops: Operations, op: Op, verb: str) -> tuple[models.ShareInstance, str]:
    """A migration request's destination (read before the lock, as it never
    moves once written) and the words its logs and errors name it by."""
    source = db_api.get(ops.db, _SI, op.ident)
    if source is None:
        raise Stale(f"share instance {op.ident} is gone")
    dest = _dest(ops, source, op)
    return dest, f"{verb} of share instance {op.ident} to {dest.host}"


def _host_assisted(dest: models.ShareInstance) -> bool:
    """Whether the engine copies this migration (its destination's
    task_state is a data copy's: the plans of complete and cancel move the
    source's only)."""
    return dest.task_state in vocab.DATA_COPYING


def _failed(source: models.ShareInstance, dest: models.ShareInstance,
            kept: bool = False) -> list[Change]:
    # A start may have gone host-assisted (its own write) before it failed.
    expected = (source.task_state, vocab.DATA_COPYING_STARTING) \
        if source.task_state == vocab.MIGRATION_STARTING else None
    return [_source_back(source, vocab.MIGRATION_ERROR, expected),
            _dest_in_error(dest) if kept else _dest_gone(dest, vocab.MIGRATION_ERROR)]


def _undone(sides: migration_host.Sides, undo: bool) -> bool:
    """After a host-assisted step failed: its destination removed and the
    source's rules given back (``undo``); whether the destination is kept
    (it could not be removed: in error, for an admin)."""
    if not undo:
        return False
    try:
        migration_host.undo(sides)
    except Exception as exc:
        log_failure(f"undo of the migration of share instance {sides.source.id}",
                    "delete_share", exc)
        return True
    return False


def start(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration")
    wanted = {flag: bool(op.args.get(flag)) for flag in FLAGS}

    kept: list[bool] = []

    def call(row: models.ShareInstance) -> object:
        _task(row, vocab.MIGRATION_STARTING, what)
        pair = _Pair(ops, row, dest)
        why = "--force-host-assisted"
        if not op.args.get("force_host_assisted"):
            compat: Mapping[str, object] = pair.driver.migration_check_compatibility(
                pair.source_d, pair.dest_d, pair.server, pair.dest_server) or {}
            if compat.get("compatible"):
                missing = [f for f, asked in wanted.items() if asked and not compat.get(f)]
                if missing:
                    raise OperationFailed(
                        f"backend {views.host_of(row.host)!r} cannot keep the share "
                        f"{', '.join(m.replace('_', ' ') for m in missing)} while it moves "
                        f"it to {dest.host}")
                pair.driver.migration_start(*pair.args())
                return None
            why = f"backend {views.host_of(row.host)!r} cannot move the share itself"
        return _start_copying(ops, row, dest, wanted, why, kept)

    def done(row: models.ShareInstance, answer: object) -> list[Change]:
        if not isinstance(answer, Mapping):
            return _both(row, dest, vocab.MIGRATION_DRIVER_IN_PROGRESS,
                         vocab.MIGRATION_STARTING, "0")
        # The engine copies from now on (the periodic task).
        return [(_SI, row.id, {"status": vocab.MIGRATING,
                               "task_state": vocab.DATA_COPYING_STARTING},
                 {"task_state": vocab.DATA_COPYING_IN_PROGRESS, "progress": "0"}),
                (_SI, dest.id, {"status": vocab.MIGRATING_TO},
                 {"task_state": vocab.DATA_COPYING_IN_PROGRESS,
                  "export_locations": answer["export_locations"]})]

    return ops.run(op, Step(
        _SI, op.ident, what, call, done,
        lambda row, _exc: _failed(row, dest, bool(kept)), expected=(vocab.MIGRATING,)), held)


def _start_copying(ops: Operations, row: models.ShareInstance, dest: models.ShareInstance,
                   wanted: dict[str, bool], why: str, kept: list[bool]) -> dict[str, object]:
    """A start that goes host-assisted: written first (a crash from here on
    leaves a migration the periodic task undoes), then the destination made
    and the source's clients made read-only."""
    refused = migration_host.refusal(ops, row, dest, wanted)
    if refused:
        raise OperationFailed(f"{why} ({dest.host}), and {refused}")
    if not db_api.transition_with_request(ops.db, _fenced(_both(
            row, dest, vocab.DATA_COPYING_STARTING, vocab.MIGRATION_STARTING), row), None):
        raise Stale(f"the migration of share instance {row.id} changed meanwhile")
    sides = migration_host.Sides(ops, row, dest)
    try:
        locations = migration_host.begin(sides)
    except Exception:
        kept.append(_undone(sides, True))
        raise
    return {"export_locations": locations}


def complete(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration complete")

    kept: list[bool] = []

    def call(row: models.ShareInstance) -> object:
        _task(row, vocab.MIGRATION_COMPLETING, what)
        if _host_assisted(dest):
            sides = migration_host.Sides(ops, row, dest)
            try:
                return {"export_locations": migration_host.switch(sides)}
            except Exception:
                kept.append(_undone(sides, True))
                raise
        pair = _Pair(ops, row, dest)
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
            (_SI, dest.id, {"status": vocab.MIGRATING_TO},
             {"status": vocab.AVAILABLE, "task_state": vocab.MIGRATION_SUCCESS,
              "export_locations": locations,
              **({"access_rules_status": vocab.ACCESS_RULES_SYNCING} if rules else {})}),
            (_SI, row.id, {"status": row.status, "task_state": vocab.MIGRATION_COMPLETING},
             {**deleted(), "task_state": vocab.MIGRATION_SUCCESS, "progress": None}),
            *((models.ShareAccessRule, r.id, {"state": vocab.ACCESS_ACTIVE},
               {"state": vocab.ACCESS_QUEUED_TO_APPLY}) for r in rules),
        ]

    def then(_row: models.ShareInstance, changes: list[Change]) -> None:
        if any(m is models.ShareAccessRule for m, *_ in changes):
            db_access.add_requests(ops.db, [Op(vocab.SHARE_INSTANCE, dest.id,
                                               vocab.ACTION_UPDATE_ACCESS, dest.host).request()])

    return ops.run(op, Step(
        _SI, op.ident, what, call, done, lambda row, _exc: _failed(row, dest, bool(kept)),
        expected=(vocab.MIGRATING,), then=then), held)


def cancel(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    dest, what = _request_of(ops, op, "migration cancel")

    def call(row: models.ShareInstance) -> object:
        _task(row, vocab.MIGRATION_CANCEL_IN_PROGRESS, what)
        if _host_assisted(dest):
            migration_host.undo(migration_host.Sides(ops, row, dest))
            return None
        pair = _Pair(ops, row, dest)
        pair.driver.migration_cancel(*pair.args())
        return None

    def failed(row: models.ShareInstance, _exc: Exception) -> list[Change]:
        # What the destination still holds is unknown; the source is served
        # as before.
        return [_source_back(row, vocab.MIGRATION_ERROR), _dest_in_error(dest)]

    return ops.run(op, Step(
        _SI, op.ident, what, call,
        lambda row, _r: [_source_back(row, vocab.MIGRATION_CANCELLED),
                         _dest_gone(dest, vocab.MIGRATION_CANCELLED)],
        failed, expected=(vocab.MIGRATING,)), held)


# The periodic task ------------------------------------------------------------------


def continue_migrations(ops: Operations, hosts: list[str]) -> None:
    """Periodic, for the migrations whose source is on these hosts: phase 1
    driven on, and migrations a crash cut short settled. Any engine of the
    host may; the try-lock keeps each migration to one at a time."""
    migrating = [i for h in hosts for i in resources.on_host(ops.db, _SI, h, [vocab.MIGRATING])]
    by_id = {i.id: i for i in migrating}
    orphans = _orphans(ops, [i for i in migrating if i.task_state in _REQUESTED])

    def act(ident: str) -> None:
        state = by_id[ident].task_state
        if state == vocab.MIGRATION_DRIVER_IN_PROGRESS:
            _continue_one(ops, ident)
        elif state == vocab.DATA_COPYING_IN_PROGRESS:
            _copy_one(ops, ident)
        elif ident in orphans:
            _settle_orphan(ops, ident, str(state))

    ops.each_unlocked(vocab.SHARE_INSTANCE, by_id, act, "migration continue")


def _orphans(ops: Operations, waiting: list[models.ShareInstance]) -> set[str]:
    """Of these sources, the ones no open request is about: the request
    their task_state names ended without them (its engine died and a
    reconciliation pass abandoned it, or it failed before its outcome)."""
    if not waiting:
        return set()
    open_ = db_api.query(ops.db, models.Request,
                         {"resource_id": [i.id for i in waiting],
                          "status": list(vocab.REQUEST_OPEN)})
    busy = {r.resource_id for r in open_}
    return {i.id for i in waiting if i.id not in busy}


def _fresh(ops: Operations, ident: str, task_state: str, what: str
           ) -> tuple[models.ShareInstance, _Pair]:
    """The source re-read and taken (its fencing token bumped: a call of
    an earlier holder left running cannot land after this one's), and this
    engine allowed to call its driver now (a member, the lock still held:
    else NotNow, and the next run tries again)."""
    row = ops.fresh(_SI, ident, (vocab.MIGRATING,), take=True)
    _task(row, task_state, what)
    pair = _Pair(ops, row, _dest(ops, row))
    ops.guard(what, None, lock_name(vocab.SHARE_INSTANCE, ident))
    return row, pair


def _continue_one(ops: Operations, ident: str) -> None:
    what = f"migration of share instance {ident}"
    try:
        row, pair = _fresh(ops, ident, vocab.MIGRATION_DRIVER_IN_PROGRESS, what)
    except Stale:  # moved on, or NotNow: the next run looks again
        return
    try:
        finished = pair.driver.migration_continue(*pair.args())
        progress = "100" if finished else _progress(pair)
    except Exception as exc:
        log_failure(what, "migration_continue", exc)
        _fail(ops, row, pair, vocab.MIGRATION_DRIVER_IN_PROGRESS,
              f"{what} to {pair.dest.host} failed in migration_continue: {exc}")
        return
    task = vocab.MIGRATION_DRIVER_PHASE1_DONE if finished else vocab.MIGRATION_DRIVER_IN_PROGRESS
    db_api.transition_with_request(
        ops.db, _fenced(_both(row, pair.dest, task, vocab.MIGRATION_DRIVER_IN_PROGRESS,
                              progress), row), None)


def _fail(ops: Operations, row: models.ShareInstance, pair: _Pair, expected_task: str,
          text: str) -> None:
    """The migration ended in error by the periodic task; no request of
    the user's fails here, so a user message says it."""
    if _end_in_error(ops, row, pair, expected_task):
        db_messages.record_about(
            ops.db, vocab.SHARE, row.share_id,
            messages.ACTION_IDS[vocab.ACTION_MIGRATION_START], messages.FAILED, text,
            messages.LEVEL_ERROR)


def _copy_one(ops: Operations, ident: str) -> None:
    """The engine's copy of a host-assisted migration, run to its end (or
    until it is cancelled, taken over, or this engine may call no driver),
    then compared; equal: phase 1 is done. A copy cut short is run again
    by the next run (rsync goes on from what is there)."""
    what = f"host-assisted migration of share instance {ident}"
    try:
        row, pair = _fresh(ops, ident, vocab.DATA_COPYING_IN_PROGRESS, what)
    except Stale:
        return
    lock = lock_name(vocab.SHARE_INSTANCE, ident)

    def stop() -> str | None:
        try:
            why = ops.why_not_call(lock)
            now = db_api.get(ops.db, _SI, ident)
        except Exception as exc:  # the database or coordination away: stop, try later
            return f"cannot check the migration: {exc}"
        if why:
            return why
        if now is None or now.fence != row.fence or \
                now.task_state != vocab.DATA_COPYING_IN_PROGRESS:
            return "the migration changed meanwhile (cancelled, or taken over)"
        return None

    shown: list[int] = []

    def progress(percent: int) -> None:
        if percent >= 100 or (shown and shown[-1] == percent):
            return
        shown.append(percent)
        db_api.transition_with_request(ops.db, _fenced([
            (_SI, row.id, {"status": vocab.MIGRATING,
                           "task_state": vocab.DATA_COPYING_IN_PROGRESS},
             {"progress": str(percent)})], row), None)

    sides = migration_host.Sides(ops, row, pair.dest)
    try:
        differ = migration_host.copy(sides, stop, progress, ops.copy_bwlimit_kib)
    except (data_mover.CopyBusy, data_mover.CopyStopped) as exc:
        LOG.info("%s: the copy waits for the next run: %s", what, exc)
        return
    except Exception as exc:
        log_failure(what, "the data copy", exc)
        _fail(ops, row, pair, vocab.DATA_COPYING_IN_PROGRESS,
              f"{what} to {pair.dest.host} failed while copying: {exc}")
        return
    if differ:
        LOG.error("%s: the copy differs from the source: %s", what, "; ".join(differ))
        _fail(ops, row, pair, vocab.DATA_COPYING_IN_PROGRESS,
              f"{what} to {pair.dest.host}: the copy differs from the source: "
              f"{'; '.join(differ)}")
        return
    LOG.info("%s: copied and checked equal", what)
    db_api.transition_with_request(ops.db, _fenced(_both(
        row, pair.dest, vocab.DATA_COPYING_COMPLETED, vocab.DATA_COPYING_IN_PROGRESS, "100"),
        row), None)


def _progress(pair: _Pair) -> str:
    """The driver's ``total_progress`` as a whole percentage, '0' when it
    cannot say."""
    try:
        answer = pair.driver.migration_get_progress(*pair.args()) or {}
        return str(max(0, min(99, int(float(str(answer.get("total_progress", 0)))))))
    except Exception as exc:  # optional: a driver that cannot say
        LOG.debug("migration_get_progress of %s: %s", pair.source.id, exc)
        return "0"


def _end_in_error(ops: Operations, row: models.ShareInstance, pair: _Pair,
                  expected_task: str) -> bool:
    """A migration that failed or was cut short: the destination removed
    from its backend (``migration_cancel``, idempotent) and from the
    database, the source available again with ``migration_error``. If the
    destination cannot be removed it stays, in error, for an admin."""
    if _host_assisted(pair.dest):
        kept = _undone(migration_host.Sides(ops, row, pair.dest), True)
    else:
        try:
            pair.driver.migration_cancel(*pair.args())
            kept = False
        except OperationNotSupported:
            kept = False  # a driver that migrates nothing started nothing
        except Exception as exc:
            log_failure(f"migration cancel of share instance {row.id}", "migration_cancel",
                        exc)
            kept = True
    dest_change = _dest_in_error(pair.dest) if kept else _dest_gone(pair.dest,
                                                                    vocab.MIGRATION_ERROR)
    return bool(db_api.transition_with_request(ops.db, _fenced(
        [_source_back(row, vocab.MIGRATION_ERROR, expected_task), dest_change], row), None))


def _settle_orphan(ops: Operations, ident: str, task_state: str) -> None:
    what = f"migration of share instance {ident} cut short in {task_state}"
    try:
        row, pair = _fresh(ops, ident, task_state, what)
    except _NoDestination:
        # Nothing to undo or finish: the source is served as before.
        LOG.warning("%s: its destination is gone; the share stays on its source", what)
        row = ops.fresh(_SI, ident, (vocab.MIGRATING,), take=True)
        db_api.transition_with_request(ops.db, _fenced(
            [_source_back(row, vocab.MIGRATION_ERROR, task_state)], row), None)
        return
    except Stale:
        return
    LOG.warning("%s: its request ended without it; settling it", what)
    if task_state in (vocab.MIGRATION_STARTING, vocab.DATA_COPYING_STARTING):
        _end_in_error(ops, row, pair, task_state)
        return
    # Complete and cancel are idempotent: carried out again, under the lock
    # held (``held``), as their request would have.
    action = _REQUESTED[task_state]
    handler = complete if action == vocab.ACTION_MIGRATION_COMPLETE else cancel
    try:
        handler(ops, Op(vocab.SHARE_INSTANCE, ident, action, row.host,
                        {"destination": pair.dest.id}), True)
    except (OperationFailed, Stale) as exc:
        LOG.warning("%s: %s", what, exc)


def _fenced(changes: list[Change], row: models.ShareInstance) -> list[Change]:
    """The source's change written only while it has the token this task
    took it with."""
    return [(m, i, {**expected, "fence": row.fence} if i == row.id else expected, values)
            for m, i, expected, values in changes]
