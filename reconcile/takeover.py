"""Whose a resource's open request is when a pass meets it
(doc/reconciliation.rst, "What it does", steps 2 and 3, and "Leases").

A pending request, or one running on a live engine within its lease, is in
progress: the pass leaves its resource alone. One whose lease has expired is
stuck and taken over at once: its call's thread may hold the resource's lock
for ever, so the abandoned request (one winner of the conditional update)
stands in for the lock. One of an engine that left the group is taken over
only under the resource's lock: that engine may be paused, not dead, and
still hold the lock of the call it was in; then the request stays running
and its lease, once expired, makes it stuck.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec
from sharemgr.manager import hosts, kinds
from sharemgr.manager.operations import lock_name
from sharemgr.reconcile.summary import Summary

if TYPE_CHECKING:
    from sharemgr.reconcile.reconciler import Reconciler

LOG = logging.getLogger(__name__)

# Seconds a pass tries again for the lock of a resource whose engine left
# the group: on Redis a lock times out with the membership (tooz's
# lock_timeout follows membership_timeout), and the two expiries race.
DEAD_LOCK_WAIT = 5.0

# Seconds of the lease given to a departed engine's request that has none
# (when the engines renew none either).
LEASE_OF_LOCKED = 60.0

LOCKED = "locked by another engine"
# Its request stays running: the lease settles it.
LOCKED_BY_DEPARTED = "locked by an engine that left the group"


def open_requests(rec: Reconciler, summary: Summary, dry_run: bool, idents: set[str]
                  ) -> dict[str, models.Request]:
    """The requests in progress on resources ``idents`` (those this step
    of the pass settles), by resource id. Stuck ones are abandoned now (the
    step settles their resource); those of departed engines go into
    ``summary.dead``, for the resource's lock to decide (``locked``). A
    request on any other resource is left for the step that settles it, or
    for ``abandon_rest``: abandoned here, its resource would be left in its
    transient status with nobody to settle it.

    The requests are read before the membership: an engine that joins and
    claims a request in between is then seen with a pending request, never
    as a claimant missing from an older member list (which would take over
    the request of an alive engine)."""
    summary.seen.update(idents)
    by_resource: dict[str, models.Request] = {}
    for req, departed, now in _read(rec):
        if req.resource_id not in idents or _waits_for_deadline(rec, req, now):
            # Another step's to decide; or in progress until its deadline.
            by_resource[req.resource_id] = req
        elif _stuck(rec, req, now, summary, dry_run):
            continue
        elif departed:
            if req.host is not None and not dry_run:
                summary.departed(req)
            # host-less requests (stacks) are resumed by the engine
        else:
            by_resource[req.resource_id] = req
    return by_resource


def _read(rec: Reconciler) -> Iterator[tuple[models.Request, bool, datetime.datetime]]:
    """Each open request of the engine's hosts, whether its engine has
    left the group, and the database's time of the read."""
    # The plain host too: 'sharectl reconcile run' asks any engine of it.
    requests, now = db_rec.open_requests(rec.db, [*rec.hosts, rec.host])
    # This engine is alive whatever the group says: a heartbeat it missed
    # under load must not make it abandon its own running requests.
    alive = rec.coordinator.engines() | {rec.engine_id}
    for req in requests:
        yield req, req.status == vocab.REQUEST_RUNNING and req.engine_id not in alive, now


@contextlib.contextmanager
def locked(rec: Reconciler, rtype: str, ident: str, summary: Summary) -> Iterator[str | None]:
    """The pass's hold on a resource while it settles it: yields None when
    it may (its try-lock taken, a departed engine's request on it then
    abandoned), or why it skips the resource.

    A stuck call's thread holds the lock and may never let go: its
    abandoned request (one winner) stands in for the lock, and the outcome
    is still a conditional update. The lock of a departed engine may
    expire a little after its membership (both time out on the
    coordination backend): for its resources the pass tries again for up
    to DEAD_LOCK_WAIT seconds; held after that, the engine is paused, not
    dead, and its request stays running until its lease expires."""
    if ident in summary.stuck:
        yield None
        return
    deadline = time.monotonic() + (DEAD_LOCK_WAIT if ident in summary.dead else 0)
    while True:
        with rec.coordinator.try_lock(lock_name(rtype, ident)) as got:
            if got or time.monotonic() >= deadline:
                yield _after_lock(rec, ident, got, summary)
                return
        time.sleep(0.25)


def _after_lock(rec: Reconciler, ident: str, got: bool, summary: Summary) -> str | None:
    req = summary.take_departed(ident)
    if not got:
        if req is None:
            return LOCKED
        if req.lease_expires_at is None:
            # No lease to run out (leases off, or cut between its claim and
            # its call's lease): given one, so that a pass comes back to it.
            db_leases.lease_set(rec.db, [ident], str(req.engine_id),
                                rec.operations.leases.heartbeat or LEASE_OF_LOCKED)
        LOG.info("%s %s: engine %s left the group but still holds its lock (paused?); its "
                 "request %s is left to its lease (until %s UTC)", req.resource_type, ident,
                 req.engine_id, req.id, req.lease_expires_at)
        return LOCKED_BY_DEPARTED
    if req is None or _abandon_departed(rec, req, summary):
        return None
    return "changed meanwhile"


def abandon_rest(rec: Reconciler, summary: Summary, dry_run: bool) -> None:
    """At the end of a pass, the stuck and departed requests on resources
    no step of it read. One whose resource is settled (in no transient
    status, no access rule on its way: a 'sharectl reconcile run' request,
    a resource gone) is abandoned, so that it stops counting as running.
    One whose resource went transient after its step's scan stays running:
    abandoned, its resource would have nobody to settle it (its engine may
    be paused, holding the lock); its lease brings the next pass to it. A
    departed engine's request on a resource a step read but did not lock
    (its check failed, the pass was interrupted) stays running too."""
    summary.dead.clear()
    if dry_run:
        return
    for req, departed, now in _read(rec):
        if req.resource_id in summary.seen or req.host is None or \
                _waits_for_deadline(rec, req, now):
            continue
        expired = req.lease_expires_at is not None and req.lease_expires_at < now
        if not ((expired or departed) and req.status == vocab.REQUEST_RUNNING) \
                or _unsettled(rec, req):
            continue
        if not _stuck(rec, req, now, summary, dry_run) and departed:
            _abandon_departed(rec, req, summary)


def _unsettled(rec: Reconciler, req: models.Request) -> bool:
    """Whether the resource of ``req`` is in a transient status, or has
    access rules on their way to the backend."""
    kind = kinds.KINDS.get(req.resource_type)
    row = None if kind is None else db_api.get(rec.db, kind.model, req.resource_id)
    if kind is None or row is None:
        return False
    if row.status in kind.transient:
        return True
    share_id = getattr(row, "share_id", None)
    return req.resource_type in (vocab.SHARE_INSTANCE, vocab.REPLICA) and share_id is not None \
        and any(r.state in vocab.ACCESS_IN_FLIGHT for r in db_access.rules_of(rec.db, share_id))


def abandon_departed(rec: Reconciler, ident: str, summary: Summary) -> None:
    """Abandon a departed engine's request on resource ``ident`` without
    its lock: for a resource the pass leaves to a workflow of its own,
    which takes the lock itself once the request is no longer open."""
    req = summary.take_departed(ident)
    if req is not None:
        _abandon_departed(rec, req, summary)


def _abandon_departed(rec: Reconciler, req: models.Request, summary: Summary) -> bool:
    if not db_rec.abandon_request(rec.db, req.id, req.engine_id,
                                  f"engine {req.engine_id} died; reconciled by {rec.engine_id}",
                                  message_ttl=rec.message_ttl):
        return False
    summary.count_abandoned()
    return True


def _waits_for_deadline(rec: Reconciler, req: models.Request, now: datetime.datetime) -> bool:
    """A running call on a backend that cannot fence is taken over only
    after its hard deadline, whatever its lease or its engine's
    membership says: its engine may be paused, not dead, and would
    finish the call on the backend after the take-over
    (doc/reconciliation.rst, "Fencing")."""
    if req.status != vocab.REQUEST_RUNNING or req.host is None or \
            req.lease_deadline is None or req.lease_deadline <= now:
        return False
    driver = rec.drivers.get(hosts.backend_of(req.host))
    return driver is not None and not getattr(driver, "honours_fencing", False)


def _stuck(rec: Reconciler, req: models.Request, now: datetime.datetime, summary: Summary,
           dry_run: bool) -> bool:
    """The lease rule: a running request whose lease has expired is stuck
    (its engine alive or not); it becomes abandoned and its resource is
    reconciled. Of several engines' passes the one whose conditional
    update wins settles it; the others leave it ("in progress")."""
    if req.status != vocab.REQUEST_RUNNING or req.host is None or \
            req.lease_expires_at is None or req.lease_expires_at >= now:
        return False
    if req.engine_id == rec.engine_id and rec.operations.keeper.running(req.resource_id):
        # Its call runs here within its deadline: a renewal missed (an
        # outage, a slow periodic), not a lost thread. Renewed now.
        if not dry_run:
            rec.operations.keeper.renew()
        return False
    if dry_run or db_rec.abandon_request(
            rec.db, req.id, req.engine_id,
            f"lease expired at {req.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC "
            f"(stuck); reconciled by {rec.engine_id}", expired=True,
            message_ttl=rec.message_ttl):
        if req.resource_id not in summary.stuck:
            LOG.warning("request %s (%s %s %s) of engine %s is stuck: its lease expired "
                        "at %s UTC; settling %s by the reconciliation rules", req.id,
                        req.action, req.resource_type, req.resource_id, req.engine_id,
                        req.lease_expires_at, req.resource_id)
        summary.stuck.add(req.resource_id)
        return True
    return False
