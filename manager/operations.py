"""Carrying out claimed requests: lock, call the driver, write the outcome.

Every operation holds the resource's tooz lock (the lock the reconciler
try-locks) while it calls the driver, re-reads the row under the lock, and
writes the terminal status with a conditional update on the transient status
it expects, in one transaction with any other row the outcome touches.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import tenacity
from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models, resources
from sharemgr.db import reconcile as db_rec
from sharemgr.db.engine import Database
from sharemgr.drivers.exceptions import (
    FencedCall,
    ShareBackendException,
    ShareResourceNotFound,
)
from sharemgr.manager import access, kinds, leases, views
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.outage import is_outage
from sharemgr.manager.plans import Change, Op

LOG = logging.getLogger(__name__)

# ``Op.lease`` of the operation this thread performs, for ``_fresh_leased``:
# the handlers pass their own arguments to ``_perform``, not the op.
_WRITTEN_LEASE: contextvars.ContextVar[leases.Terms | None] = contextvars.ContextVar(
    "sharemgr_written_lease", default=None)


# Seconds an outcome waits for a database that is away before it gives up
# (the resource then stays transient until a reconciliation pass).
OUTCOME_WAIT = 300.0


class OperationFailed(Exception):
    """The driver call failed; the resource is in its error status."""


class Stale(Exception):
    """The resource is no longer in the status the request expects (an admin
    reset it, or it was settled by someone else): nothing to do."""


class Lost(Stale):
    """The operation lost its resource while the driver worked: another
    engine or a reconciliation took it (its fencing token moved on), or the
    backend refused the call as fenced. The outcome was not written; the
    resource is re-observed (``Operations.on_lost``)."""


class NotNow(Stale):
    """This engine may not call the driver now: it is out of the engines
    group (paused, cut off), or the call's lease is about to run out.
    Nothing reached the driver; the request goes back to pending."""


def lock_name(rtype: str, ident: str) -> bytes:
    return kinds.kind(rtype).lock_name(ident)


def _deleted() -> dict[str, Any]:
    return {"status": vocab.DELETED, "deleted_at": models.utcnow()}


class Operations:
    def __init__(
        self,
        db: Database,
        drivers: dict[str, Any],
        coordinator: Coordinator,
        engine_id: str,
    ) -> None:
        self.db = db
        self.drivers = drivers
        self.coordinator = coordinator
        self.engine_id = engine_id
        # The daemon sets them from its options (manager/leases.py).
        self.leases: leases.Leases = leases.NONE
        self.keeper = leases.Keeper(db, engine_id)
        # The daemon's membership (manager/membership.py): why this engine
        # may not call a driver now, or None. And what to do about a
        # resource whose outcome could not be written (re-observe it).
        self.not_member: Callable[[], str | None] = lambda: None
        self.outcome_wait = OUTCOME_WAIT
        self.on_lost: Callable[[str, str], None] = lambda rtype, ident: None

    # Plumbing --------------------------------------------------------------

    def perform(self, op: Op, held: bool = False) -> list[Change] | None:
        """Carry out ``op`` in this thread: the one entry for the request
        runner, the reconciler and stacks. ``held``: the caller (the
        reconciler) already holds the resource's lock. Returns the changes
        its success wrote under that lock (None from ``update_access``,
        which writes rules, each its own outcome). Raises
        ``OperationFailed`` (the resource is in its error status) or
        ``Stale``."""
        name = HANDLERS.get((op.kind, op.action))
        if name is None:
            raise OperationFailed(f"unknown request {op.kind} {op.action}")
        token = _WRITTEN_LEASE.set(op.lease)
        try:
            return getattr(self, name)(op, held)
        finally:
            _WRITTEN_LEASE.reset(token)

    def default_lease(self) -> leases.Terms | None:
        """The lease of a call of a method with no lease of its own,
        starting now (None: no lease). A caller that writes the request row
        just before the call (a stack's begin) writes it with the row and
        passes it in ``Op.lease``: the call then writes it no more."""
        return self.keeper.terms(self.leases.seconds(None), self.leases.heartbeat)

    def handle(self, req: models.Request) -> None:
        """The request runner's handler for a claimed request."""
        self.perform(Op.of_request(req))

    def driver_for(self, host: str) -> Any:
        backend = views.backend_of(host)
        try:
            return self.drivers[backend]
        except KeyError:
            raise OperationFailed(f"this engine does not serve backend {backend!r}")

    @contextlib.contextmanager
    def locked(self, rtype: str, ident: str) -> Iterator[None]:
        with self.coordinator.hold(lock_name(rtype, ident)):
            yield

    def _fresh(self, model: type, ident: str, expected: tuple[str, ...]) -> Any:
        return _expect(model, ident, db_api.get(self.db, model, ident), expected)

    def _fresh_leased(self, model: type, ident: str, expected: tuple[str, ...],
                      method: str | Callable[[Any], str] | None,
                      read: Callable[[Any], Any] | None = None,
                      ) -> tuple[Any, str | None, leases.Terms | None, bool]:
        """``_fresh`` and the lease of the call about to start, in one
        transaction. ``method`` may depend on the row (its status); ``read``
        re-reads the row in that transaction (see ``db_rec.read_and_lease``).
        Returns the row, the method, the lease's terms and whether this
        engine's request took them."""
        chosen: dict[str, Any] = {"method": None, "terms": None, "written": False}
        written = _WRITTEN_LEASE.get()

        def until_of(row: Any) -> Any:
            if row.status not in expected:
                return None  # Stale below: no call, no lease
            name = method(row) if callable(method) else method
            seconds = self.leases.seconds(name)
            if written is not None and seconds == self.leases.seconds(None):
                # The request row was written with this lease a moment ago.
                chosen.update(method=name, terms=written, written=True)
                return None
            terms = self.keeper.terms(seconds, self.leases.heartbeat)
            chosen.update(method=name, terms=terms)
            return terms

        # The row is taken (its fencing token bumped) in the same transaction:
        # the call and its outcome carry the new token.
        row, leased = db_rec.read_and_lease(self.db, model, ident, self.engine_id, until_of,
                                            read, take=expected)
        _expect(model, ident, row, expected)
        return row, chosen["method"], chosen["terms"], bool(leased) or chosen["written"]

    def _commit(self, changes: list[Change], what: str, rtype: str, ident: str) -> None:
        """Write the outcome; while the database is away it waits for it
        (up to ``outcome_wait`` seconds): a call that changed the backend
        must not leave its resource transient with its request failed."""

        def waiting(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1:
                LOG.warning("%s: the database is away; its outcome waits for it", what)

        for attempt in tenacity.Retrying(
                retry=tenacity.retry_if_exception(is_outage), reraise=True,
                wait=tenacity.wait_exponential(multiplier=0.2, max=5),
                stop=tenacity.stop_after_delay(self.outcome_wait), before_sleep=waiting):
            with attempt:
                won = db_api.transition_with_request(self.db, changes, None)
        if not won:
            self._lost(rtype, ident)
            raise Lost(f"{what} changed while the driver worked (taken over); outcome not "
                       "written, the resource is re-observed")

    def _lost(self, rtype: str, ident: str) -> None:
        """A late outcome is looked at, not dropped: the resource is
        re-observed (doc/reconciliation.rst, "Fencing")."""
        try:
            self.on_lost(rtype, ident)
        except Exception:
            LOG.exception("re-observing %s %s failed", rtype, ident)

    def _guard(self, what: str, terms: leases.Terms | None, lock: bytes) -> None:
        """Right before a driver call: this engine must be a member of the
        engines group, still hold the resource's lock (a pause longer than
        ``lock_timeout`` lets it expire), and the call's lease must have a
        margin left (a pause between the take and the call eats it)."""
        why = self.not_member()
        if why:
            raise NotNow(f"{what}: not calling the driver: {why}")
        if not self.coordinator.still_holds(lock):
            raise NotNow(f"{what}: not calling the driver: its lock expired or cannot be "
                         "checked on the coordination backend")
        if terms is not None:
            margin = max(1.0, terms.heartbeat / 3) if terms.heartbeat else 1.0
            left = (terms.until - models.utcnow()).total_seconds()
            if left < margin:
                raise NotNow(f"{what}: not calling the driver: its lease has "
                                f"{left:.1f}s left, under the {margin:.1f}s margin")

    def _perform(
        self,
        rtype: str,
        model: type,
        ident: str,
        expected: tuple[str, ...],
        call: Callable[[Any], Any],
        on_success: Callable[[Any, Any], list[Change]],
        error_values: dict[str, Any] | Callable[[Any], list[Change]],
        what: str,
        held: bool = False,
        method: str | Callable[[Any], str] | None = None,
        force: bool = False,
        then: Callable[[Any], None] | None = None,
        read: Callable[[Any], Any] | None = None,
    ) -> list[Change]:
        """Lock, re-read, call the driver, write success or error atomically;
        the success's changes, as written, are returned.
        ``held``: the caller (the reconciler) already holds the lock.
        ``method``: the driver method ``call`` runs (or a function of the
        re-read row that names it), for its lease and the logs. ``force``
        (a forced delete): a driver failure is logged and the success outcome
        (the record deleted) is written anyway. ``then``: run with the
        re-read row after the success is written, still under the lock.
        ``read``: how the row is re-read under the lock, given the
        transaction (by default by primary key)."""
        if force and isinstance(error_values, dict):
            # A plain delete queued before this one may have failed meanwhile:
            # the forced one finishes it from that error status.
            expected = (*expected, error_values["status"])
        with contextlib.nullcontext() if held else self.locked(rtype, ident):
            row, method, terms, leased = self._fresh_leased(model, ident, expected, method,
                                                            read)
            fence = getattr(row, "fence", None)
            with self.keeper.holding(ident, terms, leased):
                try:
                    self._guard(what, terms if leased else None, lock_name(rtype, ident))
                    try:
                        result = call(row)
                    except ShareResourceNotFound as exc:
                        if vocab.DELETING not in expected:
                            raise
                        # Deletes are idempotent: gone is success, whatever the driver says.
                        LOG.info("%s: already gone on the backend (%s)", what, exc)
                        result = None
                except Stale:
                    raise
                except FencedCall as exc:
                    # The backend refused the call: another engine holds a
                    # newer token. Nothing changed; the outcome is theirs.
                    LOG.warning("%s: the backend refused the call as fenced: %s", what, exc)
                    self._lost(rtype, ident)
                    raise Lost(f"{what}: fenced by the backend: {exc}")
                except Exception as exc:
                    _log_failure(what, method, exc)
                    if not force:
                        if callable(error_values):
                            changes = error_values(row)
                        else:
                            changes = [(model, ident, {"status": row.status}, error_values)]
                        self._commit(_fenced(changes, model, ident, fence), what, rtype, ident)
                        raise OperationFailed(f"{what} failed: {exc}")
                    kind = kinds.kind(rtype)
                    LOG.warning("forced %s: the record is deleted although %s failed; %s %s "
                                "may remain on backend %s: clean it up there", what,
                                method or "the driver", kind.what, ident,
                                kind.host_of(self.db, row))
                    result = None
                changes = on_success(row, result)
                self._commit(_fenced(changes, model, ident, fence), what, rtype, ident)
                if then is not None:
                    then(row)
                return changes

    # Row loading -------------------------------------------------------------

    def share_parts(self, inst: models.ShareInstance) -> tuple[dict, dict | None]:
        share = db_api.get(self.db, models.Share, inst.share_id, include_deleted=True)
        return views.share(inst, share), self.server_dict(inst.share_server_id)

    def server_dict(self, server_id: str | None) -> dict | None:
        if not server_id:
            return None
        row = db_api.get(self.db, models.ShareServer, server_id, include_deleted=True)
        return views.server(row) if row else None

    def snapshot_parts(self, snap_inst: models.ShareSnapshotInstance) -> tuple[dict, dict | None]:
        snap = db_api.get(self.db, models.ShareSnapshot, snap_inst.snapshot_id,
                          include_deleted=True)
        inst = db_api.get(self.db, models.ShareInstance, snap_inst.share_instance_id,
                          include_deleted=True)
        share = db_api.get(self.db, models.Share, inst.share_id, include_deleted=True)
        return views.snapshot(snap_inst, snap, inst, share), self.server_dict(inst.share_server_id)

    def _share_gone_changes(self, inst: models.ShareInstance) -> list[Change]:
        """The instance is deleted; the logical share goes with its last instance."""
        changes: list[Change] = [(models.ShareInstance, inst.id, {"status": inst.status},
                                  _deleted())]
        others = [
            i
            for i in db_api.query(self.db, models.ShareInstance, {"share_id": inst.share_id})
            if i.id != inst.id
        ]
        if not others:
            changes.append((models.Share, inst.share_id, {"deleted_at": None},
                            {"deleted_at": models.utcnow()}))
        return changes

    # Shares ------------------------------------------------------------------

    def create_share(self, op: Op, held: bool = False) -> list[Change] | None:
        # The request names the instance's backend: no read before the lock.
        host = op.host
        if host is None:
            inst0 = db_api.get(self.db, models.ShareInstance, op.ident)
            if inst0 is None:
                raise Stale(f"share instance {op.ident} is gone")
            host = inst0.host
        driver = self.driver_for(host)
        # The share is read with the instance, in the re-read under the lock.
        shares: dict[str, models.Share | None] = {}

        def read(session: Any) -> models.ShareInstance | None:
            inst, shares["share"] = resources.instance_with_share_tx(session, op.ident)
            return inst

        def call(inst: models.ShareInstance) -> Any:
            share = shares["share"]
            if share is None:
                raise Stale(f"the share of instance {inst.id} is gone")
            share_d, server = views.share(inst, share), self.server_dict(inst.share_server_id)
            if share.snapshot_id:
                snap_inst = resources.snapshot_instance_of(self.db, share.snapshot_id)
                if snap_inst is None:
                    raise OperationFailed(f"snapshot {share.snapshot_id} is gone")
                snap_d, _ = self.snapshot_parts(snap_inst)
                return driver.create_share_from_snapshot(share_d, snap_d, server)
            return driver.create_share(share_d, server)

        return self._perform(
            vocab.SHARE_INSTANCE, models.ShareInstance, op.ident,
            (vocab.CREATING, vocab.CREATING_FROM_SNAPSHOT), call,
            lambda inst, locs: [(models.ShareInstance, inst.id, {"status": inst.status},
                                 {"status": vocab.AVAILABLE,
                                  "export_locations": views.export_locations(locs)})],
            {"status": vocab.ERROR}, f"create of share instance {op.ident}",
            held=held, then=self._flush_access, read=read,
            method=lambda inst: "create_share_from_snapshot"
            if inst.status == vocab.CREATING_FROM_SNAPSHOT else "create_share",
        )

    def delete_share(self, op: Op, held: bool = False) -> list[Change] | None:
        inst0 = db_api.get(self.db, models.ShareInstance, op.ident)
        if inst0 is None:
            raise Stale(f"share instance {op.ident} is gone")
        driver = self.driver_for(inst0.host)
        return self._perform(
            vocab.SHARE_INSTANCE,
            models.ShareInstance,
            inst0.id,
            (vocab.DELETING, vocab.DEFERRED_DELETING),
            lambda inst: driver.delete_share(*self.share_parts(inst)),
            lambda inst, _r: self._share_gone_changes(inst),
            {"status": vocab.ERROR_DELETING},
            f"delete of share instance {inst0.id}",
            held=held,
            method="delete_share", force=bool(op.args.get("force")),
        )

    def resize_share(self, op: Op, held: bool = False) -> list[Change] | None:
        inst0 = db_api.get(self.db, models.ShareInstance, op.ident)
        if inst0 is None:
            raise Stale(f"share instance {op.ident} is gone")
        driver = self.driver_for(inst0.host)
        new_size = int(op.args["new_size"])
        extend = op.action == vocab.ACTION_EXTEND
        method = driver.extend_share if extend else driver.shrink_share

        def call(inst: models.ShareInstance) -> Any:
            share_d, server = self.share_parts(inst)
            return method(share_d, new_size, server)

        return self._perform(
            vocab.SHARE_INSTANCE,
            models.ShareInstance,
            inst0.id,
            (vocab.EXTENDING if extend else vocab.SHRINKING,),
            call,
            lambda inst, _r: [
                (
                    models.ShareInstance,
                    inst.id,
                    {"status": inst.status},
                    {"status": vocab.AVAILABLE},
                ),
                (models.Share, inst.share_id, {}, {"size": new_size}),
            ],
            {"status": vocab.EXTENDING_ERROR if extend else vocab.SHRINKING_ERROR},
            f"{op.action} of share instance {inst0.id} to {new_size}",
            held=held, then=self._flush_access,
            method="extend_share" if extend else "shrink_share",
        )

    # Access rules ----------------------------------------------------------------
    # Not through _perform: the instance's status does not change, and each
    # rule's outcome is its own conditional update (a deny that came while the
    # driver worked wins over the apply's outcome), not all or nothing.

    def update_access(self, op: Op, held: bool = False) -> list[Change] | None:
        """Send the share's rules to the driver: the queued ones as changes,
        with the full set; ``resync`` (ensure-resources) sends the full set
        even when nothing is queued."""
        inst0 = db_api.get(self.db, models.ShareInstance, op.ident)
        if inst0 is None:
            raise Stale(f"share instance {op.ident} is gone")
        with contextlib.nullcontext() if held else self.locked(vocab.SHARE_INSTANCE, inst0.id):
            inst = self._fresh(models.ShareInstance, inst0.id, (vocab.AVAILABLE,))
            self._sync_access(inst, resync=bool(op.args.get("resync")))
        return None

    def _flush_access(self, inst: models.ShareInstance) -> None:
        """After an operation that leaves the share available: rules queued
        meanwhile (a stack's, or any that found the share busy) are applied
        now, under the same lock. Costs nothing when none are queued."""
        if inst.access_rules_status == vocab.ACCESS_RULES_SYNCING:
            self._sync_access(self._fresh(models.ShareInstance, inst.id, (vocab.AVAILABLE,)))

    def _sync_access(self, inst: models.ShareInstance, resync: bool = False) -> None:
        rules = db_access.start(self.db, inst.share_id)
        add = [r for r in rules if r.state == vocab.ACCESS_APPLYING]
        remove = [r for r in rules if r.state == vocab.ACCESS_DENYING]
        if not (add or remove or resync):
            return
        full = [r for r in rules if r.state in (vocab.ACCESS_ACTIVE, vocab.ACCESS_APPLYING)]
        what = f"update_access of share instance {inst.id}"
        driver = self.driver_for(inst.host)
        share_d, server = self.share_parts(inst)
        try:
            updates = driver.update_access(share_d, [access.view(r) for r in full],
                                           [access.view(r) for r in add],
                                           [access.view(r) for r in remove], server) or {}
        except Exception as exc:
            _log_failure(what, "update_access", exc)
            # What the backend now allows is unknown: every rule sent is in error.
            db_access.finish(self.db, inst.share_id, {
                r.id: (r.state, vocab.ACCESS_ERROR) for r in full + remove})
            raise OperationFailed(f"{what} failed: {exc}")
        refused = sorted(r.id for r in add
                         if (updates.get(r.id) or {}).get("state") == vocab.ACCESS_ERROR)
        outcome = {r.id: (r.state, vocab.ACCESS_ERROR if r.id in refused else vocab.ACCESS_ACTIVE)
                   for r in add}
        outcome.update({r.id: (r.state, vocab.ACCESS_DELETED) for r in remove})
        db_access.finish(self.db, inst.share_id, outcome)
        if refused:
            raise OperationFailed(f"{what}: the backend refused rule(s) {', '.join(refused)}")

    # Snapshots -----------------------------------------------------------------

    def _snap_host(self, ident: str) -> tuple[models.ShareSnapshotInstance, str]:
        snap_inst = db_api.get(self.db, models.ShareSnapshotInstance, ident)
        if snap_inst is None:
            raise Stale(f"snapshot instance {ident} is gone")
        inst = db_api.get(self.db, models.ShareInstance, snap_inst.share_instance_id,
                          include_deleted=True)
        return snap_inst, inst.host

    def create_snapshot(self, op: Op, held: bool = False) -> list[Change] | None:
        snap0, host = self._snap_host(op.ident)
        driver = self.driver_for(host)

        def ok(row: models.ShareSnapshotInstance, update: Any) -> list[Change]:
            values: dict[str, Any] = {"status": vocab.AVAILABLE, "progress": "100%"}
            if isinstance(update, dict) and update.get("provider_location"):
                values["provider_location"] = str(update["provider_location"])
            return [(models.ShareSnapshotInstance, row.id, {"status": row.status}, values)]

        return self._perform(
            vocab.SNAPSHOT_INSTANCE, models.ShareSnapshotInstance, snap0.id, (vocab.CREATING,),
            lambda row: driver.create_snapshot(*self.snapshot_parts(row)),
            ok, {"status": vocab.ERROR}, f"create of snapshot instance {snap0.id}",
            held=held,
            method="create_snapshot",
        )

    def delete_snapshot(self, op: Op, held: bool = False) -> list[Change] | None:
        snap0, host = self._snap_host(op.ident)
        driver = self.driver_for(host)

        def gone(row: models.ShareSnapshotInstance, _r: Any) -> list[Change]:
            return [
                (models.ShareSnapshotInstance, row.id, {"status": row.status}, _deleted()),
                (models.ShareSnapshot, row.snapshot_id, {"deleted_at": None},
                 {"deleted_at": models.utcnow()}),
            ]

        return self._perform(
            vocab.SNAPSHOT_INSTANCE, models.ShareSnapshotInstance, snap0.id, (vocab.DELETING,),
            lambda row: driver.delete_snapshot(*self.snapshot_parts(row)),
            gone, {"status": vocab.ERROR_DELETING}, f"delete of snapshot instance {snap0.id}",
            held=held,
            method="delete_snapshot", force=bool(op.args.get("force")),
        )

    # Replicas ------------------------------------------------------------------

    def create_replica(self, op: Op, held: bool = False) -> list[Change] | None:
        rep0 = db_api.get(self.db, models.ShareInstance, op.ident)
        if rep0 is None:
            raise Stale(f"replica {op.ident} is gone")
        driver = self.driver_for(rep0.host)

        def call(rep: models.ShareInstance) -> Any:
            rep_d, server = self.share_parts(rep)
            active = resources.primary_instance(self.db, rep.share_id)
            if active is None:
                raise OperationFailed(f"share {rep.share_id} has no active instance")
            active_d, _ = self.share_parts(active)
            return driver.create_replica(rep_d, active_d, server)

        def ok(rep: models.ShareInstance, result: Any) -> list[Change]:
            result = result or {}
            return [(models.ShareInstance, rep.id, {"status": rep.status}, {
                "status": vocab.AVAILABLE,
                "replica_state": result.get("replica_state") or vocab.REPLICA_IN_SYNC,
                "export_locations": views.export_locations(result.get("export_locations")),
            })]

        return self._perform(
            vocab.REPLICA, models.ShareInstance, rep0.id, (vocab.CREATING,), call, ok,
            {"status": vocab.ERROR, "replica_state": vocab.REPLICA_ERROR},
            f"create of replica {rep0.id}",
            held=held,
            method="create_replica",
        )

    def delete_replica(self, op: Op, held: bool = False) -> list[Change] | None:
        rep0 = db_api.get(self.db, models.ShareInstance, op.ident)
        if rep0 is None:
            raise Stale(f"replica {op.ident} is gone")
        driver = self.driver_for(rep0.host)
        return self._perform(
            vocab.REPLICA, models.ShareInstance, rep0.id, (vocab.DELETING,),
            lambda rep: driver.delete_replica(*self.share_parts(rep)),
            lambda rep, _r: self._share_gone_changes(rep),
            {"status": vocab.ERROR_DELETING}, f"delete of replica {rep0.id}",
            held=held,
            method="delete_replica", force=bool(op.args.get("force")),
        )

    # Share servers -------------------------------------------------------------

    def create_share_server(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = db_api.get(self.db, models.ShareServer, op.ident)
        if row0 is None:
            raise Stale(f"share server {op.ident} is gone")
        driver = self.driver_for(row0.host)
        return self._perform(
            vocab.SHARE_SERVER, models.ShareServer, row0.id, (vocab.CREATING,),
            lambda row: driver.setup_server(views.server(row)),
            lambda row, details: [(models.ShareServer, row.id, {"status": row.status},
                                   {"status": vocab.ACTIVE, "backend_details": details or {}})],
            {"status": vocab.ERROR}, f"setup of share server {row0.id}",
            held=held,
            method="setup_server",
        )

    def delete_share_server(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = db_api.get(self.db, models.ShareServer, op.ident)
        if row0 is None:
            raise Stale(f"share server {op.ident} is gone")
        driver = self.driver_for(row0.host)
        return self._perform(
            vocab.SHARE_SERVER, models.ShareServer, row0.id, (vocab.DELETING,),
            lambda row: driver.teardown_server(views.server(row), dict(row.backend_details or {})),
            lambda row, _r: [(models.ShareServer, row.id, {"status": row.status}, _deleted())],
            {"status": vocab.ERROR}, f"teardown of share server {row0.id}",
            held=held,
            method="teardown_server", force=bool(op.args.get("force")),
        )

    # Share groups and group snapshots -----------------------------------------

    def create_share_group(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = db_api.get(self.db, models.ShareGroup, op.ident)
        if row0 is None:
            raise Stale(f"share group {op.ident} is gone")
        driver = self.driver_for(row0.host)
        return self._perform(
            vocab.SHARE_GROUP, models.ShareGroup, row0.id, (vocab.CREATING,),
            lambda row: driver.create_share_group(views.group(row),
                                                  self.server_dict(row.share_server_id)),
            lambda row, _r: [(models.ShareGroup, row.id, {"status": row.status},
                              {"status": vocab.AVAILABLE})],
            {"status": vocab.ERROR}, f"create of share group {row0.id}",
            held=held,
            method="create_share_group",
        )

    def delete_share_group(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = db_api.get(self.db, models.ShareGroup, op.ident)
        if row0 is None:
            raise Stale(f"share group {op.ident} is gone")
        driver = self.driver_for(row0.host)
        force = bool(op.args.get("force"))

        def gone(row: models.ShareGroup, _r: Any) -> list[Change]:
            changes: list[Change] = [(models.ShareGroup, row.id, {"status": row.status},
                                      _deleted())]
            if force:
                # A forced group delete takes its group snapshots' records along
                # (Manila's force-delete does); their backend objects are not asked.
                gsnaps = db_api.query(self.db, models.ShareGroupSnapshot,
                                      {"share_group_id": row.id})
                if gsnaps:
                    LOG.warning("forced delete of share group %s removes the records of its "
                                "group snapshots %s; they may remain on backend %s",
                                row.id, ", ".join(g.id for g in gsnaps), row.host)
                changes += [(models.ShareGroupSnapshot, g.id, {"status": g.status},
                             _deleted()) for g in gsnaps]
            return changes

        return self._perform(
            vocab.SHARE_GROUP, models.ShareGroup, row0.id, (vocab.DELETING,),
            lambda row: driver.delete_share_group(views.group(row),
                                                  self.server_dict(row.share_server_id)),
            gone,
            {"status": vocab.ERROR}, f"delete of share group {row0.id}",
            held=held,
            method="delete_share_group", force=force,
        )

    def _gsnap(self, ident: str) -> tuple[models.ShareGroupSnapshot, models.ShareGroup]:
        row = db_api.get(self.db, models.ShareGroupSnapshot, ident)
        if row is None:
            raise Stale(f"group snapshot {ident} is gone")
        return row, db_api.get(self.db, models.ShareGroup, row.share_group_id, include_deleted=True)

    def create_group_snapshot(self, op: Op, held: bool = False) -> list[Change] | None:
        row0, group = self._gsnap(op.ident)
        driver = self.driver_for(group.host)
        return self._perform(
            vocab.GROUP_SNAPSHOT, models.ShareGroupSnapshot, row0.id, (vocab.CREATING,),
            lambda row: driver.create_share_group_snapshot(
                views.group_snapshot(row, group), self.server_dict(group.share_server_id)),
            lambda row, _r: [(models.ShareGroupSnapshot, row.id, {"status": row.status},
                              {"status": vocab.AVAILABLE})],
            {"status": vocab.ERROR}, f"create of group snapshot {row0.id}",
            held=held,
            method="create_share_group_snapshot",
        )

    def delete_group_snapshot(self, op: Op, held: bool = False) -> list[Change] | None:
        row0, group = self._gsnap(op.ident)
        driver = self.driver_for(group.host)
        return self._perform(
            vocab.GROUP_SNAPSHOT, models.ShareGroupSnapshot, row0.id, (vocab.DELETING,),
            lambda row: driver.delete_share_group_snapshot(
                views.group_snapshot(row, group), self.server_dict(group.share_server_id)),
            lambda row, _r: [(models.ShareGroupSnapshot, row.id, {"status": row.status},
                              _deleted())],
            {"status": vocab.ERROR}, f"delete of group snapshot {row0.id}",
            held=held,
            method="delete_share_group_snapshot", force=bool(op.args.get("force")),
        )

    # Backups (two-phase, as Manila: the periodic *_continue tasks finish them) ---

    def _backup(self, ident: str) -> models.ShareBackup:
        row = db_api.get(self.db, models.ShareBackup, ident)
        if row is None:
            raise Stale(f"backup {ident} is gone")
        return row

    def _backup_share(self, backup: models.ShareBackup) -> tuple[dict, models.ShareInstance]:
        inst = resources.primary_instance(self.db, backup.share_id)
        if inst is None:
            raise OperationFailed(f"share {backup.share_id} of backup {backup.id} is gone")
        share_d, _ = self.share_parts(inst)
        return share_d, inst

    def create_backup(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = self._backup(op.ident)
        driver = self.driver_for(row0.host)
        share_d, inst = self._backup_share(row0)

        def failed(row: models.ShareBackup) -> list[Change]:
            return [(models.ShareBackup, row.id, {"status": row.status}, {"status": vocab.ERROR}),
                    (models.ShareInstance, inst.id, {"status": vocab.BACKUP_CREATING},
                     {"status": vocab.AVAILABLE})]

        return self._perform(
            vocab.BACKUP, models.ShareBackup, row0.id, (vocab.CREATING,),
            lambda row: driver.create_backup(share_d, views.backup(row)),
            lambda row, _r: [(models.ShareBackup, row.id, {"status": row.status},
                              {"progress": "0"})],
            failed, f"create of backup {row0.id}",
            held=held,
            method="create_backup",
        )

    def restore_backup(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = self._backup(op.ident)
        driver = self.driver_for(row0.host)
        share_d, inst = self._backup_share(row0)

        def failed(row: models.ShareBackup) -> list[Change]:
            return [
                (models.ShareBackup, row.id, {"status": row.status}, {"status": vocab.AVAILABLE}),
                (
                    models.ShareInstance,
                    inst.id,
                    {"status": vocab.BACKUP_RESTORING},
                    {"status": vocab.BACKUP_RESTORING_ERROR},
                ),
            ]

        return self._perform(
            vocab.BACKUP, models.ShareBackup, row0.id, (vocab.RESTORING,),
            lambda row: driver.restore_backup(views.backup(row), share_d),
            lambda row, _r: [(models.ShareBackup, row.id, {"status": row.status},
                              {"restore_progress": "0"})],
            failed, f"restore of backup {row0.id}",
            held=held,
            method="restore_backup",
        )

    def delete_backup(self, op: Op, held: bool = False) -> list[Change] | None:
        row0 = self._backup(op.ident)
        driver = self.driver_for(row0.host)
        return self._perform(
            vocab.BACKUP, models.ShareBackup, row0.id, (vocab.DELETING,),
            lambda row: driver.delete_backup(views.backup(row)),
            lambda row, _r: [(models.ShareBackup, row.id, {"status": row.status}, _deleted())],
            {"status": vocab.ERROR}, f"delete of backup {row0.id}",
            held=held,
            method="delete_backup", force=bool(op.args.get("force")),
        )

    def continue_backups(self, hosts: list[str]) -> None:
        """Periodic: drive create_backup_continue / restore_backup_continue
        for started backups of these hosts (any engine of the host may; the
        try-lock keeps it to one at a time)."""
        for backup in resources.backups_to_continue(self.db, hosts):
            status = backup.status
            column = "progress" if status == vocab.CREATING else "restore_progress"
            with self.coordinator.try_lock(lock_name(vocab.BACKUP, backup.id)) as got:
                if not got:
                    continue
                try:
                    self._continue_one(backup.id, status, column)
                except Exception:
                    LOG.exception("backup %s: continue task failed", backup.id)

    def _continue_one(self, ident: str, status: str, column: str) -> None:
        backup = db_api.get(self.db, models.ShareBackup, ident)
        if backup is None or backup.status != status or getattr(backup, column) is None:
            return
        driver = self.driver_for(backup.host)
        share_d, inst = self._backup_share(backup)
        creating = status == vocab.CREATING
        share_busy = vocab.BACKUP_CREATING if creating else vocab.BACKUP_RESTORING
        try:
            if creating:
                result = driver.create_backup_continue(share_d, views.backup(backup))
            else:
                result = driver.restore_backup_continue(views.backup(backup), share_d)
        except Exception as exc:
            _log_failure(f"backup {ident}",
                         "create_backup_continue" if creating else "restore_backup_continue", exc)
            self._settle_backup(ident, status, inst.id, share_busy,
                                {"status": vocab.ERROR if creating else vocab.AVAILABLE},
                                vocab.AVAILABLE if creating else vocab.BACKUP_RESTORING_ERROR)
            return
        progress = _progress((result or {}).get("total_progress", "0"))
        if progress != "100":
            db_api.conditional_update(self.db, models.ShareBackup, ident, {"status": status},
                                      {column: progress})
            return
        self._settle_backup(ident, status, inst.id, share_busy,
                            {"status": vocab.AVAILABLE, column: "100"}, vocab.AVAILABLE)

    def _settle_backup(self, ident: str, status: str, inst_id: str, share_busy: str,
                       backup_values: dict[str, Any], share_status: str) -> None:
        """The backup's outcome; the share follows, in the same transaction,
        only if it is still held by the backup (an admin may have reset it),
        so a moved share never keeps the backup from settling. One
        transaction: a reconciliation pass in between saw a share held by a
        backup no longer in progress, and marked it error."""
        db_api.conditional_update_then(
            self.db, (models.ShareBackup, ident, {"status": status}, backup_values),
            (models.ShareInstance, inst_id, {"status": share_busy}, {"status": share_status}))


def _fenced(changes: list[Change], model: models.ModelClass, ident: str, fence: int | None
            ) -> list[Change]:
    """The outcome's change of the operation's own row is written only
    while the row still has the fencing token the operation took it with
    (doc/reconciliation.rst, "Fencing")."""
    if fence is None:
        return changes
    return [(m, i, {**expected, "fence": fence}, values)
            if m is model and i == ident and "status" in expected else (m, i, expected, values)
            for m, i, expected, values in changes]


def _expect(model: models.ModelClass, ident: str, row: Any, expected: tuple[str, ...]
            ) -> Any:
    """The re-read row, or Stale if it is gone or not in an expected status."""
    if row is None or row.status not in expected:
        raise Stale(f"{model.__table__.name} {ident} is "
                    f"{getattr(row, 'status', 'gone')}, not {'/'.join(expected)}")
    return row


def _progress(value: object) -> str:
    """A driver's ``total_progress`` as the backup's progress column holds
    it: a whole percentage when it is a number, else its text cut to fit."""
    try:
        return str(max(0, min(100, int(float(str(value).rstrip("%"))))))
    except (ValueError, OverflowError):  # 'abc', 'nan', 'inf'
        return str(value)[:32]


def _log_failure(what: str, method: str | None, exc: Exception) -> None:
    """A failure the driver reports (or the manager's own OperationFailed)
    is one WARNING line; anything else is a driver bug: ERROR with the
    traceback, naming the driver method."""
    if isinstance(exc, (ShareBackendException, OperationFailed)):
        LOG.warning("%s failed: %s%s: %s", what, f"{method}: " if method else "",
                    type(exc).__name__, exc)
    else:
        LOG.error("%s failed: unexpected %s from driver method %s: %s", what,
                  type(exc).__name__, method or "(unknown)", exc, exc_info=exc)


# (kind, action) -> the Operations method that carries it out.
HANDLERS: dict[tuple[str, str], str] = {
    (vocab.SHARE_INSTANCE, vocab.ACTION_CREATE): "create_share",
    (vocab.SHARE_INSTANCE, vocab.ACTION_DELETE): "delete_share",
    (vocab.SHARE_INSTANCE, vocab.ACTION_EXTEND): "resize_share",
    (vocab.SHARE_INSTANCE, vocab.ACTION_SHRINK): "resize_share",
    (vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS): "update_access",
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_CREATE): "create_snapshot",
    (vocab.SNAPSHOT_INSTANCE, vocab.ACTION_DELETE): "delete_snapshot",
    (vocab.REPLICA, vocab.ACTION_CREATE): "create_replica",
    (vocab.REPLICA, vocab.ACTION_DELETE): "delete_replica",
    (vocab.SHARE_SERVER, vocab.ACTION_CREATE): "create_share_server",
    (vocab.SHARE_SERVER, vocab.ACTION_DELETE): "delete_share_server",
    (vocab.SHARE_GROUP, vocab.ACTION_CREATE): "create_share_group",
    (vocab.SHARE_GROUP, vocab.ACTION_DELETE): "delete_share_group",
    (vocab.GROUP_SNAPSHOT, vocab.ACTION_CREATE): "create_group_snapshot",
    (vocab.GROUP_SNAPSHOT, vocab.ACTION_DELETE): "delete_group_snapshot",
    (vocab.BACKUP, vocab.ACTION_CREATE): "create_backup",
    (vocab.BACKUP, vocab.ACTION_DELETE): "delete_backup",
    (vocab.BACKUP, vocab.ACTION_RESTORE): "restore_backup",
}
