"""An operation's success written in the transaction of its lock's holder.

A stack's batch holds the locks of its operations (``held_reads.py``) and
ends their nodes in one transaction (``convergence/report.py``). An
operation it asks so (``Reread.defer``) returns its success's changes
unwritten, fenced as ``run`` would write them, its lock still held: the
holder writes them in its own transaction (``write_tx``), then ``written``
does what ``run`` does after its outcome (the rules queued meanwhile) and
lets the lock go. The promises are ``run``'s: the outcome is written under
the lock, only while the row has the operation's fencing token; where the
holder's transaction cannot be written, ``write_alone`` writes it as
``run`` would have, and one lost there is re-observed. A crash
before it is written leaves the resource as a crash after the call always
did: transient, with its request running, for reconciliation to settle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.manager import access_sync, kinds, operation_table, successes
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations
    from sqlalchemy.orm import Session

__all__ = ["defers", "write_alone", "write_tx", "written"]


def defers(op: Op, changes: Sequence[Change]) -> bool:
    """Whether ``op``'s success (``changes``) is left to its lock's holder:
    asked so, and not a copy the driver goes on with (its node waits for
    the status poll, which needs the outcome written and the lock free)."""
    return op.reread is not None and op.reread.defer and not successes.copy_goes_on(changes)


def write_tx(session: Session, successes: Sequence[Sequence[Change]]) -> bool:
    """Write the successes in the holder's transaction (those of one shape
    in one statement: ``db_api.applied_tx``); False (the caller
    rolls it back) when a change lost: its row moved on, taken over."""
    return all(db_api.applied_tx(session, successes))


def written(ops: Operations, op: Op) -> None:
    """Once the holder's transaction committed: what ``run`` does after an
    outcome (the rules queued meanwhile), then the lock let go."""
    try:
        # As ``run``'s ``then`` (``Operations.by_table``): the rules queued
        # meanwhile (a deferred success is never a copy the driver goes on with).
        row = None if op.reread is None else op.reread.row
        if (isinstance(row, models.ShareInstance)
                and operation_table.SPECS[(op.kind, op.action)].flushes_access):
            access_sync.flush_access(ops, row)
    finally:
        _release(op)


def write_alone(ops: Operations, op: Op, changes: list[Change]) -> None:
    """Write the success in a transaction of its own, as ``run`` would
    have (waiting for a database that is away; ``Lost`` raised, the
    resource re-observed, when the row moved on), then ``written``."""
    spec = operation_table.SPECS[(op.kind, op.action)]
    what = f"{spec.verb} of {kinds.kind(op.kind).what} {op.ident}"
    try:
        ops.write_outcome(changes, what, op.kind, op.ident)
    except BaseException:
        _release(op)
        raise
    written(ops, op)


def _release(op: Op) -> None:
    if op.reread is not None:
        op.reread.release()
