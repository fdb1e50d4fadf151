"""A stack resource row's lock (``engine_id`` + ``atomic_key``), as a check
takes, breaks and lets go of it (doc/specs.rst, spec 001, step 2)."""

from __future__ import annotations

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import physical as phys
from sharemgr.convergence.tracking import Tracker
from sharemgr.db import models, resource_locks, stack_work, stacks
from sharemgr.db.engine import Database
from sharemgr.manager.coordination import Coordinator

LOG = logging.getLogger(__name__)


class RowLocks:
    def __init__(self, db: Database, coordinator: Coordinator, engine_id: str,
                 tracker: Tracker) -> None:
        self.db = db
        self.coordinator = coordinator
        self.engine_id = engine_id
        self.tracker = tracker

    def take(self, rid: int, row: models.StackResource) -> str | None:
        """Lock ``rid``: None when held now, else why not (the caller bails)."""
        self.tracker.claim(rid)
        why: str | None = "error"
        try:
            why = self._try_take(rid, row)
        finally:
            if why is not None:
                self.tracker.unclaim(rid)
        return why

    def release(self, rid: int) -> None:
        try:
            resource_locks.resource_lock_release(self.db, rid, self.engine_id)
        except Exception:  # leaked: the next check of this engine takes it over
            LOG.exception("resource %s: could not release its lock", rid)
        finally:
            self.tracker.unclaim(rid)

    def let_go(self, rids: list[int], moved: int | None = None) -> None:
        """Release ``rids`` (each only if still this engine's), but for
        ``moved``, whose lock moved on since this check took it (its key
        did): maybe to another check of this engine, whose it is now."""
        for rid in rids:
            if rid == moved:
                self.tracker.unclaim(rid)
            else:
                self.release(rid)

    def _try_take(self, rid: int, row: models.StackResource) -> str | None:
        got = resource_locks.resource_lock_acquire(self.db, rid, self.engine_id)
        if got.acquired:
            return None
        if not got.found:
            return f"resource {rid} is gone"
        holder = got.holder
        if holder == self.engine_id:
            ours = self.tracker.held_by_another(rid)
            if not ours and phys.observe(self.db, row.type, row.physical_id).state == phys.BUSY:
                # Left held by a check of ours that was cut (``Actor.cut``): as a
                # dead engine's, it waits for the resource to settle.
                return (f"resource {rid} is held by a cut check of this engine and its "
                        "physical resource is transient: the watchdog retriggers this node "
                        "once it has settled")
            if not ours:
                # Our own lock, but no check of ours holds it: its release was
                # lost (a database error). Left alone, every later check would
                # bail on a "live" holder forever.
                stolen = resource_locks.resource_lock_steal(self.db, rid, self.engine_id, holder)
                if stolen.acquired:
                    LOG.warning("resource %s: took over a lock this engine leaked", rid)
                    return None
        if holder == self.engine_id or \
                (holder is not None and self.coordinator.is_alive(holder)):
            return (f"resource {rid} is locked by live engine {holder}, which retriggers "
                    "this node when it is done")
        observed = phys.observe(self.db, row.type, row.physical_id)
        if observed.state == phys.BUSY:
            return (f"resource {rid} is locked by dead engine {holder} and its physical "
                    f"resource is {observed.status}: reconciliation settles it, then "
                    "the watchdog retriggers this node")
        stolen = resource_locks.resource_lock_steal(self.db, rid, self.engine_id, holder)
        if not stolen.acquired:
            return f"resource {rid} is locked by engine {stolen.holder}"
        LOG.warning("resource %s: broke the lock of dead engine %s", rid, holder)
        return None

    def tidy(self, row: models.StackResource | None) -> bool:
        """The traversal ended (FAILED) while a check of this row was cut
        short — by its engine's death (the dead engine's lock is dropped), or
        by a partition, the lock since let go by a check that found the
        traversal over (nobody holds it): end the row's action, so the row
        does not look busy until the next user action. A row whose physical
        resource is still transient waits for reconciliation. True if this
        call tidied it."""
        holder = None if row is None else row.engine_id
        if row is None or row.status != vocab.STACK_IN_PROGRESS:
            return False
        # This engine's own lock that no check of it holds was left by a cut
        # check (``Actor.cut``): nobody else would end it.
        leaked = holder == self.engine_id and not self.tracker.holds(row.id)
        if holder is not None and not leaked and (
                holder == self.engine_id or self.coordinator.is_alive(holder)):
            return False
        if phys.observe(self.db, row.type, row.physical_id).state == phys.BUSY:
            return False
        # Claimed while it holds the row: a check of this engine finding its
        # own lock then waits, rather than take it over as leaked.
        self.tracker.claim(row.id)
        try:
            return self._tidy_taken(row, holder, leaked)
        finally:
            self.tracker.unclaim(row.id)

    def _tidy_taken(self, row: models.StackResource, holder: str | None, leaked: bool
                    ) -> bool:
        taken = (resource_locks.resource_lock_acquire(self.db, row.id, self.engine_id)
                 if holder is None else
                 resource_locks.resource_lock_steal(self.db, row.id, self.engine_id, holder))
        if not taken.acquired:
            return False
        why = f"the death of engine {holder}" if holder and not leaked \
            else "a pause or partition"
        try:
            again = stacks.resource_get(self.db, row.id)
            stack = stack_work.stack_head(self.db, row.stack_id)
            if again is None or again.status != vocab.STACK_IN_PROGRESS or stack is None \
                    or stack.status == vocab.STACK_IN_PROGRESS:
                return False  # ended by its own check, or a new traversal takes it
            stacks.resource_set_state(self.db, row.id, self.engine_id, row.action,
                                      vocab.STACK_FAILED,
                                      f"{row.action} cut short by {why}; the stack's "
                                      "traversal had ended")
        finally:
            resource_locks.resource_lock_release(self.db, row.id, self.engine_id)
        LOG.info("resource %s: %s cut short by %s on an ended traversal; marked FAILED",
                 row.id, row.action, why)
        return True
