"""The share operations with more to them than one driver call and one
outcome (``handlers.OWN``): a share's create, delete, extend and shrink, access
rules.
Their statuses, methods and messages come from the operation table; the rest
(other deletes, replicas) are carried out by ``carry_out``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import messages, vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import leases as db_leases
from sharemgr.db import models, resources
from sharemgr.drivers.exceptions import ShareBackendException, ShareShrinkingPossibleDataLoss
from sharemgr.manager import access, hosts, kinds, operation_table, views
from sharemgr.manager.op_errors import OperationFailed, Stale, log_failure
from sharemgr.manager.operations import Step, lock_name
from sharemgr.manager.plans import Change, Op

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)

ACCESS_METHOD = operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS).method


def _request_host(ops: Operations, op: Op) -> str:
    """The backend the request names (nothing read before the lock), else
    the instance's as read now; Stale if the instance is gone or on no
    backend."""
    host = op.host
    if host is None:
        inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
        if inst0 is None:
            raise Stale(f"share instance {op.ident} is gone")
        host = inst0.host
    if not host:
        raise Stale(f"share instance {op.ident} is on no backend")
    return host


def create_share(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    driver = ops.driver_for(_request_host(ops, op))

    def call(inst: models.ShareInstance, share: object) -> object:
        if not isinstance(share, models.Share):
            raise Stale(f"the share of instance {inst.id} is gone")
        share_d, server = views.share(inst, share), ops.server_dict(inst.share_server_id)
        if share.snapshot_id:
            snap_inst = resources.snapshot_instance_of(ops.db, share.snapshot_id)
            if snap_inst is None:
                raise OperationFailed(f"snapshot {share.snapshot_id} is gone")
            snap_d, _ = ops.snapshot_parts(snap_inst)
            return _checked(driver.create_share_from_snapshot(share_d, snap_d, server),
                            vocab.CREATING_FROM_SNAPSHOT)
        return _checked(driver.create_share(share_d, server))

    spec = operation_table.spec(op.kind, op.action)

    def created(inst: models.ShareInstance, answer: object) -> list[Change]:
        values = creation_values(inst, answer, spec.success or vocab.AVAILABLE)
        return [(models.ShareInstance, inst.id, {"status": inst.status}, values)]

    def then(inst: models.ShareInstance, changes: list[Change]) -> None:
        if not copy_goes_on(changes):  # rules queued meanwhile wait for the end of a clone
            flush_access(ops, inst)

    return ops.run(op, Step(
        models.ShareInstance, op.ident, f"{spec.verb} of share instance {op.ident}", call,
        created, then=then, read=resources.instance_with_share_tx), held)


def creation_values(inst: models.ShareInstance, answer: object, success: str
                    ) -> dict[str, object]:
    """A create's outcome: the success status with the export locations; or,
    when the driver goes on in the background (Manila's asynchronous create
    from a snapshot: ``{"status": "creating_from_snapshot", ...}``), the
    status kept and ``progress`` set, which hands the instance to the status
    poll (``clone_poll``)."""
    if not isinstance(answer, Mapping):
        return {"status": success, "export_locations": views.export_locations(answer)}
    locations = views.export_locations(answer.get("export_locations"))
    if answer.get("status") == vocab.CREATING_FROM_SNAPSHOT:
        return {"export_locations": locations,
                "progress": str(answer.get("progress") or "0%")[:32]}
    return {"status": success, "export_locations": locations}


def copy_goes_on(changes: Iterable[Change]) -> bool:
    """Whether a create's outcome (``creation_values``) left the copy to the
    status poll."""
    return any(m is models.ShareInstance and "progress" in v and "status" not in v
               for m, _i, _e, v in changes)


def _checked(answer: object, *later: str) -> object:
    """A create's answer whose status the manager can record: none,
    available, or one of ``later`` (a failure of the call otherwise: the
    create ends in error)."""
    if isinstance(answer, Mapping) and answer.get("status") not in (
            None, vocab.AVAILABLE, *later):
        raise OperationFailed(f"the driver answered status {answer.get('status')!r}")
    return answer


def delete_share(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """``carry_out``'s delete of a share instance with ``create_share``'s
    reads (a stack's delete makes one per resource): the request names the
    backend, so nothing is read before the lock, and the share is read with
    the instance under it. An instance found on another backend there is
    ``Stale``, nothing written, as a pre-lock read finding it would be."""
    host = _request_host(ops, op)
    driver = ops.driver_for(host)
    spec = operation_table.spec(op.kind, op.action)

    def call(inst: models.ShareInstance, share: object) -> object:
        if inst.host is None or hosts.host_of(inst.host) != hosts.host_of(host):
            raise Stale(f"share instance {inst.id} is on {inst.host}, not {host}")
        if not isinstance(share, models.Share):
            raise Stale(f"the share of instance {inst.id} is gone")
        driver.delete_share(views.share(inst, share), ops.server_dict(inst.share_server_id))
        return None

    return ops.run(op, Step(
        models.ShareInstance, op.ident, f"{spec.verb} of share instance {op.ident}", call,
        lambda inst, _r: ops.share_gone_changes(inst), read=resources.instance_with_share_tx,
        force=spec.forcible and bool(op.args.get("force"))), held)


def resize_share(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if inst0 is None:
        raise Stale(f"share instance {op.ident} is gone")
    driver = ops.driver_for(inst0.host)
    new_size = int(op.args["new_size"])
    spec = operation_table.spec(op.kind, op.action)
    assert spec.method is not None
    name = spec.method
    method = getattr(driver, name)

    def call(inst: models.ShareInstance, _read: object) -> object:
        share_d, server = ops.share_parts(inst)
        # Replica-aware, as Manila's: every secondary replica takes the size
        # too (its backend's driver; the share's size is theirs). Each is
        # taken first, so its call carries a newer fencing token than any
        # earlier resize's: one left running by a taken-over resize cannot
        # land after this one (doc/reconciliation.rst, "Fencing"). Read and
        # taken before the first driver call: a database away there changes
        # nothing (``Operations.run`` gives the request back), where after
        # it the share ended in error with its backend resized.
        seen = {rep.id: rep.status
                for rep in db_api.query(ops.db, models.ShareInstance, {"share_id": inst.share_id})
                if rep.id != inst.id and kinds.is_secondary(rep)}
        taken = db_leases.take_rows(ops.db, models.ShareInstance, seen) if seen else {}
        replicas = []
        for rep_id in sorted(seen):
            rep = taken.get(rep_id)
            if rep is None:
                LOG.warning("resize of share %s: replica %s changed meanwhile (no longer %s); "
                            "left to whoever changed it", inst.share_id, rep_id, seen[rep_id])
                continue
            replicas.append((rep, *ops.share_parts(rep)))
        method(share_d, new_size, server)
        for rep, rep_d, rep_server in replicas:
            try:
                getattr(ops.driver_for(rep.host), name)(rep_d, new_size, rep_server)
            except ShareShrinkingPossibleDataLoss as exc:
                # The active replica has shrunk already: not a refusal that
                # changed nothing (error_changes), a failure.
                raise ShareBackendException(f"replica {rep.id}: {exc}") from exc
        return None

    def error_changes(inst: models.ShareInstance, exc: Exception) -> list[Change]:
        # A shrink the backend refused to protect the data changed nothing:
        # the share is available again, as in Manila (the message says why).
        values = {"status": vocab.AVAILABLE} if isinstance(
            exc, ShareShrinkingPossibleDataLoss) else spec.error_values()
        return [(models.ShareInstance, inst.id, {"status": inst.status}, dict(values))]

    try:
        return ops.run(op, Step(
            models.ShareInstance, inst0.id,
            f"{spec.verb} of share instance {inst0.id} to {new_size}", call,
            lambda inst, _r: [
                (models.ShareInstance, inst.id, {"status": inst.status},
                 {"status": spec.success}),
                (models.Share, inst.share_id, {}, {"size": new_size}),
            ],
            error_changes, then=lambda inst, _changes: flush_access(ops, inst)), held)
    except OperationFailed as exc:
        if isinstance(exc.__cause__, ShareShrinkingPossibleDataLoss):
            raise OperationFailed(str(exc), messages.SHRINK_REFUSED) from None
        raise


# Not through ``Operations.run``: the instance's status does not change, and each
# rule's outcome is its own conditional update (a deny that came while the
# driver worked wins over the apply's outcome), not all or nothing.
def update_access(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    """Send the share's rules to the driver: the queued ones as changes,
    with the full set; ``resync`` (ensure-resources) sends the full set
    even when nothing is queued."""
    inst0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if inst0 is None:
        raise Stale(f"share instance {op.ident} is gone")
    with contextlib.nullcontext() if held else ops.locked(vocab.SHARE_INSTANCE, inst0.id):
        inst = ops.fresh(models.ShareInstance, inst0.id, (vocab.AVAILABLE,), take=not held)
        _sync_access(ops, inst, resync=bool(op.args.get("resync")))
    return None


def _refused(answer: object) -> bool:
    """A rule ``update_access`` answered ``{"state": "error"}`` for."""
    return isinstance(answer, dict) and answer.get("state") == vocab.ACCESS_ERROR


def _keys(updates: Mapping[str, object], rule_ids: Iterable[str]) -> dict[str, str]:
    """The keys ``update_access`` gave rules (Manila's ``access_key``: a
    cephx rule's), by rule id."""
    keys = {}
    for rule_id in rule_ids:
        answer = updates.get(rule_id)
        key = answer.get("access_key") if isinstance(answer, dict) else None
        if isinstance(key, str) and key:
            keys[rule_id] = key
    return keys


def _refusal(rule: models.ShareAccessRule, answer: object) -> str:
    reason = answer.get("reason") if isinstance(answer, dict) else None
    said = f": {reason}" if isinstance(reason, str) and reason else ""
    return f"rule {rule.id} ({rule.access_type} {rule.access_to} {rule.access_level}){said}"


def flush_access(ops: Operations, inst: models.ShareInstance) -> None:
    """After an operation that leaves the share available: rules queued
    meanwhile (a stack's, or any that found the share busy) are applied
    now, under the same lock. Costs nothing when none are queued."""
    if inst.access_rules_status == vocab.ACCESS_RULES_SYNCING:
        why = ops.why_not_call(lock_name(vocab.SHARE_INSTANCE, inst.id))
        if why is not None:
            # The operation's success is written: its rules go to a request
            # that a member (this engine, once back) carries out.
            LOG.warning("rules queued for share instance %s left to an update_access "
                        "request: %s", inst.id, why)
            db_access.add_requests(ops.db, [Op(vocab.SHARE_INSTANCE, inst.id,
                                               vocab.ACTION_UPDATE_ACCESS, inst.host).request()])
            return
        # Under the lock of the operation whose success just bumped the token.
        _sync_access(ops, ops.fresh(models.ShareInstance, inst.id, (vocab.AVAILABLE,)))


def _sync_access(ops: Operations, inst: models.ShareInstance, resync: bool = False) -> None:
    rules = db_access.start(ops.db, inst.share_id)
    add = [r for r in rules if r.state == vocab.ACCESS_APPLYING]
    remove = [r for r in rules if r.state == vocab.ACCESS_DENYING]
    if not (add or remove or resync):
        return
    full = [r for r in rules if r.state in (vocab.ACCESS_ACTIVE, vocab.ACCESS_APPLYING)]
    what = f"update_access of share instance {inst.id}"
    driver = ops.driver_for(inst.host)
    share_d, server = ops.share_parts(inst)
    # NotNow, nothing sent: the rules stay applying/denying and are sent
    # again (the request goes back to pending; a pass runs again).
    ops.guard(what, None, lock_name(vocab.SHARE_INSTANCE, inst.id))
    try:
        updates: Mapping[str, object] = driver.update_access(
            share_d, [access.view(r) for r in full], [access.view(r) for r in add],
            [access.view(r) for r in remove], server) or {}
    except Exception as exc:
        log_failure(what, ACCESS_METHOD, exc)
        # What the backend now allows is unknown: every rule sent is in error.
        db_access.finish(ops.db, inst.share_id, {
            r.id: (r.state, vocab.ACCESS_ERROR) for r in full + remove})
        raise OperationFailed(f"{what} failed: {exc}")
    refused = sorted(r.id for r in add if _refused(updates.get(r.id)))
    outcome = {r.id: (r.state, vocab.ACCESS_ERROR if r.id in refused else vocab.ACCESS_ACTIVE)
               for r in add}
    outcome.update({r.id: (r.state, vocab.ACCESS_DELETED) for r in remove})
    db_access.finish(ops.db, inst.share_id, outcome, _keys(updates, outcome))
    if refused:
        # The reasons go into the user message (message show): the user
        # learns why without the daemon's log.
        by_id = {r.id: r for r in add}
        raise OperationFailed(f"{what}: the backend refused " + "; ".join(
            _refusal(by_id[i], updates.get(i)) for i in refused))
