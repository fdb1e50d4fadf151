"""What a share's migration writes, and the pieces its requests
(manager/migration_ops.py) and its periodic task
(manager/migration_continue.py) share: the two instances as the driver is
given them, the destination's lookup, and the conditional changes that
move both instances' status and task_state (doc/migration.rst)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.drivers import shapes
from sharemgr.manager import driver_args, migration_host, operation_table
from sharemgr.manager.migration_plans import destination_of
from sharemgr.manager.op_errors import NotNow, Stale, log_failure
from sharemgr.manager.plans import Change, Op
from sharemgr.manager.successes import deleted

if TYPE_CHECKING:
    from sharemgr.drivers.base import ShareDriver
    from sharemgr.manager.operations import Operations

SI = models.ShareInstance
# A migration's request, by the task_state its plan wrote: what a crash that
# cut it short leaves to ``continue_migrations``.
REQUESTED = {vocab.MIGRATION_STARTING: vocab.ACTION_MIGRATION_START,
             vocab.DATA_COPYING_STARTING: vocab.ACTION_MIGRATION_START,
             vocab.MIGRATION_COMPLETING: vocab.ACTION_MIGRATION_COMPLETE,
             vocab.MIGRATION_CANCEL_IN_PROGRESS: vocab.ACTION_MIGRATION_CANCEL}


class Pair:
    """A migration's two instances as the driver is given them."""

    def __init__(self, ops: Operations, source: models.ShareInstance,
                 dest: models.ShareInstance) -> None:
        self.source, self.dest = source, dest
        self.driver: ShareDriver = ops.driver_for(source.host)
        self.source_d, self.server = driver_args.share_parts(ops.db, source)
        self.dest_d, self.dest_server = driver_args.share_parts(ops.db, dest)

    def args(self) -> tuple[dict[str, object], dict[str, object], list[shapes.Snapshot],
                            dict[str, str], dict[str, object] | None, dict[str, object] | None]:
        # No snapshots move yet (intake refuses a share that has any).
        return self.source_d, self.dest_d, [], {}, self.server, self.dest_server


class NoDestination(Stale):
    """The destination row is gone or no longer migrating_to (an admin's
    reset): nothing for the driver to move to."""


def destination(ops: Operations, source: models.ShareInstance, op: Op | None = None
                ) -> models.ShareInstance:
    ident = op.args.get("destination") if op is not None else None
    dest = db_api.get(ops.db, SI, str(ident)) if ident else \
        destination_of(ops.db, source.share_id)
    if dest is None or dest.status != vocab.MIGRATING_TO:
        raise NoDestination(f"share instance {source.id} has no migration destination")
    return dest


def taken(ops: Operations, dest: models.ShareInstance) -> models.ShareInstance:
    """The destination re-read and taken (its fencing token bumped) by a
    holder that has just taken the source: the destination's own calls (its
    create, its data path, its delete when a copy is undone) then carry a
    newer token than an earlier holder's, and a backend that fences refuses
    that holder's late call once this one has called (doc/migration.rst,
    "How it is carried out"). NoDestination if it moved on meanwhile."""
    try:
        return ops.fresh(SI, dest.id, (vocab.MIGRATING_TO,), take=True)
    except Stale as exc:
        raise NoDestination(str(exc)) from exc


def task(row: models.ShareInstance, task_state: str, what: str) -> None:
    if row.task_state != task_state:
        raise Stale(f"{what}: task_state is {row.task_state!r}, not {task_state!r}")


def source_back(source: models.ShareInstance, task_state: str,
                expected_task: str | tuple[str, ...] | None = None) -> Change:
    """The source available again, its migration ended with ``task_state``."""
    return (SI, source.id,
            {"status": vocab.MIGRATING, "task_state": expected_task or source.task_state},
            {"status": vocab.AVAILABLE, "task_state": task_state, "progress": None})


def dest_gone(dest: models.ShareInstance, task_state: str) -> Change:
    return (SI, dest.id, {"status": vocab.MIGRATING_TO},
            {**deleted(), "task_state": task_state})


def both(source: models.ShareInstance, dest: models.ShareInstance, task_state: str,
         expected: str, progress: str | None = None) -> list[Change]:
    values: dict[str, object] = {"task_state": task_state}
    return [(SI, source.id, {"status": vocab.MIGRATING, "task_state": expected},
             {**values, **({"progress": progress} if progress is not None else {})}),
            (SI, dest.id, {"status": vocab.MIGRATING_TO}, values)]


def dest_in_error(dest: models.ShareInstance) -> Change:
    """A destination the driver could not remove: kept, in error, for an admin."""
    return (SI, dest.id, {"status": vocab.MIGRATING_TO},
            {"status": vocab.ERROR, "task_state": vocab.MIGRATION_ERROR})


def host_assisted(dest: models.ShareInstance) -> bool:
    """Whether the engine copies this migration (its destination's
    task_state is a data copy's: the plans of complete and cancel move the
    source's only)."""
    return dest.task_state in vocab.DATA_COPYING


def failed(source: models.ShareInstance, dest: models.ShareInstance,
           kept: bool = False) -> list[Change]:
    # A start may have gone host-assisted (its own write) before it failed.
    expected = (source.task_state, vocab.DATA_COPYING_STARTING) \
        if source.task_state == vocab.MIGRATION_STARTING else None
    return [source_back(source, vocab.MIGRATION_ERROR, expected),
            dest_in_error(dest) if kept else dest_gone(dest, vocab.MIGRATION_ERROR)]


def undone(sides: migration_host.Sides) -> bool:
    """After a host-assisted step failed: its destination removed and the
    source's rules given back; whether the destination is kept (it could
    not be removed: in error, for an admin)."""
    try:
        migration_host.undo(sides)
    except NotNow:
        raise  # a copy still runs into it: not a failure, the caller tries later
    except Exception as exc:
        log_failure(f"undo of the migration of share instance {sides.source.id}",
                    operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_DELETE).method, exc)
        return True
    return False


def fenced(changes: list[Change], row: models.ShareInstance) -> list[Change]:
    """The source's change written only while it has the token this task
    took it with."""
    return [(m, i, {**expected, "fence": row.fence} if i == row.id else expected, values)
            for m, i, expected, values in changes]
