"""A share's migration, the periodic task (doc/migration.rst): for the
migrations whose source is on this engine's hosts, phase 1 driven on (the
driver's ``migration_continue``, or the engine's own copy), a complete
written once copied when the start asked for it (a stack's update), and a
migration whose request a crash cut short settled: a start is undone (the
source stays, as it was), a complete or a cancel is carried out again (both
idempotent).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import messages, vocab
from sharemgr.db import api as db_api
from sharemgr.db import messages as db_messages
from sharemgr.db import models, resources
from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.manager import (
    data_mover,
    kinds,
    migration_host,
    migration_ops,
    migration_plans,
    operation_table,
)
from sharemgr.manager import migration_rows as mrows
from sharemgr.manager.migration_plans import COPIED
from sharemgr.manager.op_errors import NotNow, OperationFailed, Stale, log_failure
from sharemgr.manager.operations import lock_name
from sharemgr.manager.plans import Op, Refused

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)


def continue_migrations(ops: Operations, hosts: list[str]) -> None:
    """Periodic, for the migrations whose source is on these hosts: phase 1
    driven on, and migrations a crash cut short settled. Any engine of the
    host may; the try-lock keeps each migration to one at a time."""
    migrating = [i for h in hosts
                 for i in resources.on_host(ops.db, mrows.SI, h, [vocab.MIGRATING])]
    by_id = {i.id: i for i in migrating}
    orphans = _orphans(ops, [i for i in migrating if i.task_state in mrows.REQUESTED])

    def act(ident: str) -> None:
        state = by_id[ident].task_state
        if state == vocab.MIGRATION_DRIVER_IN_PROGRESS:
            _continue_one(ops, ident)
        elif state == vocab.DATA_COPYING_IN_PROGRESS:
            _copy_one(ops, ident)
        elif state in COPIED:
            if _destination_gone(ops, by_id[ident]):
                _settle_on_source(ops, ident, str(state))
            else:
                _complete_if_asked(ops, by_id[ident])
        elif ident in orphans:
            _settle_orphan(ops, ident, str(state))

    ops.coordinator.each_unlocked(kinds.SHARE_INSTANCE.lock_name, by_id, act,
                                  "migration continue")


def _destination_gone(ops: Operations, source: models.ShareInstance) -> bool:
    try:
        mrows.destination(ops, source)
    except mrows.NoDestination:
        return True
    return False


def _settle_on_source(ops: Operations, ident: str, task_state: str) -> None:
    """A copied migration waiting for its complete whose destination is
    gone: taken, and ended on its source (``_fresh`` does it)."""
    with contextlib.suppress(Stale):
        _fresh(ops, ident, task_state, f"migration of share instance {ident}")


def _complete_if_asked(ops: Operations, source: models.ShareInstance) -> None:
    """Phase 1 done for a migration whose start asked for it to complete
    then (a stack's update, which waits for its end): its complete is
    written as ``share migration complete`` would."""
    started = db_api.query(ops.db, models.Request, {
        "resource_id": source.id, "action": vocab.ACTION_MIGRATION_START})
    if not started or not (started[-1].args or {}).get("complete"):
        return
    try:
        plan = migration_plans.complete(ops.db, source.share_id)
    except Refused as exc:  # moved on meanwhile (a user's cancel or complete)
        LOG.debug("migration of share instance %s: no complete: %s", source.id, exc)
        return
    assert plan.op is not None
    if db_api.transition_with_request(ops.db, plan.changes, plan.op.request()):
        LOG.info("migration of share instance %s copied: completing it, as its start asked",
                 source.id)


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
           ) -> tuple[models.ShareInstance, mrows.Pair]:
    """The source re-read and taken (its fencing token bumped: a call of
    an earlier holder left running cannot land after this one's), and this
    engine allowed to call its driver now (a member, the lock still held:
    else NotNow, and the next run tries again)."""
    row = ops.fresh(mrows.SI, ident, (vocab.MIGRATING,), take=True)
    mrows.task(row, task_state, what)
    try:
        dest = mrows.taken(ops, mrows.destination(ops, row))
    except mrows.NoDestination:
        _on_source(ops, row, task_state, what)
        raise
    pair = mrows.Pair(ops, row, dest)
    ops.guard(what, None, lock_name(vocab.SHARE_INSTANCE, ident))
    return row, pair


def _on_source(ops: Operations, row: models.ShareInstance, task_state: str, what: str) -> None:
    """The destination is gone or no longer ``migrating_to`` (an admin's
    reset or delete): nothing to undo or finish, the share stays on its
    source, in whatever step the migration was (it stayed ``migrating``
    for ever); a source whose clients the copy made read-only gets its
    rules back."""
    LOG.warning("%s: its destination is gone; the share stays on its source", what)
    if not db_api.transition_with_request(ops.db, mrows.fenced(
            [mrows.source_back(row, vocab.MIGRATION_ERROR, task_state)], row), None):
        return
    db_messages.record_about(
        ops.db, vocab.SHARE, row.share_id, messages.ACTION_IDS[vocab.ACTION_MIGRATION_START],
        messages.FAILED, f"{what}: its destination was removed; the share stays on its source",
        messages.LEVEL_ERROR)
    if task_state in vocab.DATA_COPYING:
        try:
            ops.guard(what, None, lock_name(vocab.SHARE_INSTANCE, row.id))
        except Stale as exc:  # the drift check gives the rules back later
            LOG.warning("%s: the source's rules not given back now: %s", what, exc)
            return
        migration_host.reopen_source(ops, row)


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
        log_failure(what, operation_table.MIGRATION_CONTINUE, exc)
        _fail(ops, row, pair, vocab.MIGRATION_DRIVER_IN_PROGRESS,
              f"{what} to {pair.dest.host} failed in migration_continue: {exc}")
        return
    task = vocab.MIGRATION_DRIVER_PHASE1_DONE if finished else vocab.MIGRATION_DRIVER_IN_PROGRESS
    db_api.transition_with_request(
        ops.db, mrows.fenced(mrows.both(row, pair.dest, task, vocab.MIGRATION_DRIVER_IN_PROGRESS,
                              progress), row), None)


def _fail(ops: Operations, row: models.ShareInstance, pair: mrows.Pair, expected_task: str,
          text: str) -> None:
    """The migration ended in error by the periodic task; no request of
    the user's fails here, so a user message says it. Only while it is
    still this task's: the undo calls drivers before its fenced write, and
    an engine that was paused meanwhile must not remove a destination
    another engine now copies to."""
    why = _not_ours(ops, row, expected_task)
    if why:
        LOG.warning("migration of share instance %s: not ended in error here: %s", row.id, why)
        return
    if _end_in_error(ops, row, pair, expected_task):
        db_messages.record_about(
            ops.db, vocab.SHARE, row.share_id,
            messages.ACTION_IDS[vocab.ACTION_MIGRATION_START], messages.FAILED, text,
            messages.LEVEL_ERROR)


def _not_ours(ops: Operations, row: models.ShareInstance, task_state: str) -> str | None:
    """Why this task may no longer act on the migration it took (``row``,
    as taken), or None: this engine may call no driver (out of the group,
    its lock expired), or the row moved on (cancelled, taken over: another
    fencing token)."""
    try:
        why = ops.why_not_call(lock_name(vocab.SHARE_INSTANCE, row.id))
        now = db_api.get(ops.db, mrows.SI, row.id)
    except Exception as exc:  # the database or coordination away: stop, try later
        return f"cannot check the migration: {exc}"
    if why:
        return why
    if now is None or now.fence != row.fence or now.task_state != task_state:
        return "the migration changed meanwhile (cancelled, or taken over)"
    return None


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
    def stop() -> str | None:
        return _not_ours(ops, row, vocab.DATA_COPYING_IN_PROGRESS)

    shown: list[int] = []

    def progress(percent: int) -> None:
        if percent >= 100 or (shown and shown[-1] == percent):
            return
        shown.append(percent)
        try:
            db_api.transition_with_request(ops.db, mrows.fenced([
                (mrows.SI, row.id, {"status": vocab.MIGRATING,
                                    "task_state": vocab.DATA_COPYING_IN_PROGRESS},
                 {"progress": str(percent)})], row), None)
        except Exception as exc:  # progress is for show: a database away stops no copy
            LOG.debug("migration of share instance %s: progress not written: %s", row.id, exc)

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
    db_api.transition_with_request(ops.db, mrows.fenced(mrows.both(
        row, pair.dest, vocab.DATA_COPYING_COMPLETED, vocab.DATA_COPYING_IN_PROGRESS, "100"),
        row), None)


def _progress(pair: mrows.Pair) -> str:
    """The driver's ``total_progress`` as a whole percentage, '0' when it
    cannot say."""
    try:
        answer = pair.driver.migration_get_progress(*pair.args()) or {}
        return str(max(0, min(99, int(float(str(answer.get("total_progress", 0)))))))
    except Exception as exc:  # optional: a driver that cannot say
        LOG.debug("migration_get_progress of %s: %s", pair.source.id, exc)
        return "0"


def _end_in_error(ops: Operations, row: models.ShareInstance, pair: mrows.Pair,
                  expected_task: str) -> bool:
    """A migration that failed or was cut short: the destination removed
    from its backend (``migration_cancel``, idempotent) and from the
    database, the source available again with ``migration_error``. If the
    destination cannot be removed it stays, in error, for an admin."""
    if mrows.host_assisted(pair.dest):
        try:
            kept = mrows.undone(migration_host.Sides(ops, row, pair.dest))
        except NotNow as exc:  # a copy still runs into it: the next run
            LOG.info("migration of share instance %s: not ended yet: %s", row.id, exc)
            return False
    else:
        try:
            pair.driver.migration_cancel(*pair.args())
            kept = False
        except OperationNotSupported:
            kept = False  # a driver that migrates nothing started nothing
        except Exception as exc:
            log_failure(f"migration cancel of share instance {row.id}", operation_table.spec(
                vocab.SHARE_INSTANCE, vocab.ACTION_MIGRATION_CANCEL).method, exc)
            kept = True
    dest_change = mrows.dest_in_error(pair.dest) if kept else mrows.dest_gone(pair.dest,
                                                                    vocab.MIGRATION_ERROR)
    return bool(db_api.transition_with_request(ops.db, mrows.fenced(
        [mrows.source_back(row, vocab.MIGRATION_ERROR, expected_task), dest_change], row), None))


def _settle_orphan(ops: Operations, ident: str, task_state: str) -> None:
    what = f"migration of share instance {ident} cut short in {task_state}"
    try:
        row, pair = _fresh(ops, ident, task_state, what)
    except Stale:  # NoDestination too: settled on its source
        return
    LOG.warning("%s: its request ended without it; settling it", what)
    if task_state in (vocab.MIGRATION_STARTING, vocab.DATA_COPYING_STARTING):
        _end_in_error(ops, row, pair, task_state)
        return
    # Complete and cancel are idempotent: carried out again, under the lock
    # held (``held``), as their request would have.
    action = mrows.REQUESTED[task_state]
    handler = migration_ops.complete if action == vocab.ACTION_MIGRATION_COMPLETE \
        else migration_ops.cancel
    try:
        handler(ops, Op(vocab.SHARE_INSTANCE, ident, action, row.host,
                        {"destination": pair.dest.id}), True)
    except (OperationFailed, Stale) as exc:
        LOG.warning("%s: %s", what, exc)
