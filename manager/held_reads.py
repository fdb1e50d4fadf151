"""Several operations' rows re-read under their locks in one transaction.

A stack's batch of begun creates (convergence/chained.py) carries its
operations out one after the other, each under its resource's lock, each
re-reading its row under that lock before the call (a pass, or an admin's
reset-state, may have changed it since the begin). Here the batch takes all
their locks first and re-reads all their rows in one statement; ``run`` then
takes neither again for an op that carries its row (``Op.reread``). The
promise is the same: each row is read under its lock, the lock is held to
the op's outcome, and the guard asks right before each call whether it is
still held. One read-only transaction instead of one per operation.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Sequence
from dataclasses import replace

from oslo_log import log as logging
from sharemgr.db import resources
from sharemgr.manager import driver_args, kinds, operations
from sharemgr.manager.op_errors import NotNow
from sharemgr.manager.plans import Op, Reread

LOG = logging.getLogger(__name__)

__all__ = ["reread_held"]


def reread_held(ops: operations.Operations, batch: Sequence[Op | None], defer: bool = False
                ) -> list[tuple[Op | None, contextlib.ExitStack]]:
    """Each op of ``batch`` with its row re-read under its lock, and the
    stack that releases that lock: its ``run`` closes it once the outcome is
    written (``Reread.release``), as it would release a lock of its own;
    the caller closes it too, in case the op never got there. An op this
    cannot serve comes back as it was, with an empty stack, and takes its
    lock and reads its row itself: one with a handler of its own, one whose
    row was not inserted taken by its begin (``Op.taken``: it must be taken
    under the lock), one whose lock the coordination backend would not give
    now, one whose row the read did not find (gone, deleted), two about one
    resource. If the read fails (the database away), every op comes back as
    it was, no lock held: each meets the failure in its own run, as alone.
    ``defer``: each served op's success is left to the caller to write
    (``Reread.defer``), and its lock to let go once it is."""
    stacks = [contextlib.ExitStack() for _ in batch]
    served = [(i, op) for i, op in enumerate(batch)
              if op is not None and op.taken is not None and op.reread is None
              and (op.kind, op.action) in driver_args.READS
              and ops.handlers.get((op.kind, op.action)) is operations.by_table]
    names = collections.Counter(_lock(op) for _i, op in served)
    # A lock named twice would be taken twice by this thread: each takes its own.
    served = [(i, op) for i, op in served if names[_lock(op)] == 1]
    if len(served) < 2:  # one op reads as fast alone
        return [(op, stack) for op, stack in zip(batch, stacks, strict=True)]
    found: dict[str, tuple[object, object]] = {}
    try:
        locked = []
        # In the locks' order: two batches never wait for each other's.
        for i, op in sorted(served, key=lambda s: _lock(s[1])):
            try:
                stacks[i].enter_context(ops.locked(op.kind, op.ident, _lock(op)))
            except NotNow as exc:  # its own run meets it again, or not
                LOG.debug("%s %s: its lock is taken by its own run: %s", op.kind, op.ident, exc)
                continue
            locked.append(op.ident)
        found.update(resources.instances_with_shares(ops.db, locked))
    except Exception as exc:
        LOG.info("a batch's re-read under its locks failed (each op reads alone): %s", exc)
        found.clear()
    except BaseException:
        for stack in stacks:
            stack.close()
        raise
    out: list[tuple[Op | None, contextlib.ExitStack]] = []
    for given, stack in zip(batch, stacks, strict=True):
        read = None if given is None else found.get(given.ident)
        if given is None or read is None:
            stack.close()  # nothing read for it: its run takes the lock itself
            out.append((given, stack))
        else:
            out.append((replace(given, reread=Reread(*read, release=stack.close, defer=defer)),
                        stack))
    return out


def _lock(op: Op) -> bytes:
    return kinds.kind(op.kind).lock_name(op.ident)
