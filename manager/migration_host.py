"""A host-assisted migration's driver calls and copy (doc/migration.rst):
what the engine does when the source backend's driver cannot move a share
itself, or ``--force-host-assisted`` asks it to. The destination is made by
its own backend's ``create_share``; the source's clients are made read-only
(its rules sent again at level ``ro``); the engine copies from the source's
``migration_data_path`` to the destination's (``data_mover``) and checks
the two trees equal; ``complete`` deletes the source; an undo deletes the
destination and gives the source its rules back.

manager/migration_ops.py writes every state change; these functions only
call drivers and copy, each idempotent, so a migration cut short anywhere is
carried out again or undone by calling them again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import models
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.manager import access, data_mover, driver_args
from sharemgr.manager.migration_plans import host_assisted_refusal, same_host
from sharemgr.manager.op_errors import NotNow, OperationFailed

if TYPE_CHECKING:
    from sharemgr.drivers.base import ShareDriver
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)
# How long an undo or a complete waits for a copy still running into the
# destination (a paused engine's rsync) before it tries again later.
COPY_GONE_WAIT = 30.0


class Sides:
    """Both instances of a host-assisted migration, their drivers and the
    dicts the drivers are given."""

    def __init__(self, ops: Operations, source: models.ShareInstance,
                 dest: models.ShareInstance) -> None:
        self.ops, self.source, self.dest = ops, source, dest
        self.source_driver: ShareDriver = ops.driver_for(source.host)
        self.dest_driver: ShareDriver = ops.driver_for(dest.host)
        self.source_d, self.source_server = driver_args.share_parts(ops.db, source)
        self.dest_d, self.dest_server = driver_args.share_parts(ops.db, dest)

    def paths(self) -> tuple[Path, Path]:
        return (Path(self.source_driver.migration_data_path(self.source_d, self.source_server)),
                Path(self.dest_driver.migration_data_path(self.dest_d, self.dest_server)))

    def send_rules(self, level: str | None) -> None:
        """The source's active rules sent to its driver again, each at
        ``level`` (None: its own)."""
        send_rules(self.ops, self.source, level)


def send_rules(ops: Operations, source: models.ShareInstance, level: str | None) -> None:
    """``source``'s active rules sent to its driver again, each at
    ``level`` (None: its own)."""
    share, server = driver_args.share_parts(ops.db, source)
    rules = [{**access.view(r), **({"access_level": level} if level else {})}
             for r in db_access.rules_of(ops.db, source.share_id)
             if r.state == vocab.ACCESS_ACTIVE]
    ops.driver_for(source.host).update_access(share, rules, [], [], server)


def refusal(ops: Operations, source: models.ShareInstance, dest: models.ShareInstance,
            flags: dict[str, bool]) -> str | None:
    """Why the engine cannot copy this share (checked again at the start:
    intake judged the last report, and a driver may answer incompatible)."""
    why = host_assisted_refusal(flags)
    if why:
        return why
    if not same_host(source.host, dest.host):
        return (f"host-assisted migration copies on one host: {dest.host} is not a backend "
                f"of {source.host.partition('@')[0]!r}")
    try:
        ops.driver_for(dest.host)
    except OperationFailed as exc:
        return f"host-assisted migration needs both backends on this engine: {exc}"
    return None


def begin(sides: Sides) -> list[object]:
    """The destination made and both shares' data reachable, the source's
    clients read-only; the destination's export locations. A failure is
    raised as it is: the caller undoes (``undo``), once."""
    locations = sides.dest_driver.create_share(sides.dest_d, sides.dest_server)
    sides.paths()  # both lend their data (OperationNotSupported: a driver cannot)
    sides.send_rules("ro")
    return list(locations or [])


def copy(sides: Sides, stop: Callable[[], str | None], progress: Callable[[int], None],
         bwlimit_kib: int = 0) -> list[str]:
    """The source's data copied onto the destination, then compared: the
    differences ([] when equal). CopyBusy, CopyStopped, CopyFailed from
    the mover."""
    source, dest = sides.paths()
    LOG.info("host-assisted migration of share instance %s: copying %s to %s",
             sides.source.id, source, dest)
    data_mover.copy(source, dest, stop=stop, progress=progress, bwlimit_kib=bwlimit_kib)
    with data_mover.holding(dest):  # no other copy changes it while it is compared
        return data_mover.differences(source, dest)


def _no_copy_running(sides: Sides) -> None:
    """Before the destination is deleted or made the share: no copy still
    writes to it (a paused engine's rsync holds its flock)."""
    try:
        _source, dest = sides.paths()
    except ShareResourceNotFound:
        return
    if not data_mover.wait_free(dest, COPY_GONE_WAIT):
        # Not a failure: the request goes back to pending and runs again
        # (a paused engine's rsync ends by itself).
        raise NotNow(f"a copy into {dest} is still running; tried again later")


def undo(sides: Sides) -> None:
    """The destination deleted from its backend, the source's clients given
    their rules back (what ``begin`` did, undone; idempotent). Raises when
    the destination could not be deleted (NotNow while a copy still runs
    into it); the rules are given back whatever happens to it."""
    try:
        try:
            _no_copy_running(sides)
        except NotImplementedError:
            pass  # a destination that lends nothing had no copy
        try:
            sides.dest_driver.delete_share(sides.dest_d, sides.dest_server)
        except ShareResourceNotFound:
            pass
    finally:
        reopen(sides)


def reopen(sides: Sides) -> None:
    """The source's clients given their rules back (best effort: a drift
    check finds a source whose rules did not take)."""
    reopen_source(sides.ops, sides.source)


def reopen_source(ops: Operations, source: models.ShareInstance) -> None:
    """``reopen`` for a source whose destination is gone."""
    try:
        send_rules(ops, source, None)
    except Exception as exc:
        LOG.warning("migration of share instance %s: the source's rules could not be given "
                    "back: %s", source.id, exc)


def switch(sides: Sides) -> list[object]:
    """Phase 2: the source deleted from its backend (its data is on the
    destination, checked equal); the destination's export locations."""
    _no_copy_running(sides)
    try:
        sides.source_driver.delete_share(sides.source_d, sides.source_server)
    except ShareResourceNotFound:
        pass
    return list(sides.dest.export_locations or [])
