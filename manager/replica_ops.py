"""A replica's promotion and its state (Manila's ``promote_replica`` and
``update_replica_state``): the plans and the handlers.

Promotion: the replica goes ``replication_change``; the driver is given every
replica of the share and answers their new states: the promoted one
``active``, the old active ``in_sync`` or ``out_of_sync`` (a replica it does
not name keeps its state; an old active it does not name is ``out_of_sync``,
as nobody said otherwise). A failure leaves the replica ``available`` with
``replica_state`` ``error``, as Manila does. A crash in between is settled by
asking ``get_replica_status`` (reconcile/reconciler.py).

Resync (``sharectl replica resync``, and the periodic task every
``replica_state_update_interval`` seconds): ``update_replica_state`` is asked
about a secondary replica and its answer written; the status does not move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models, quiet
from sharemgr.db.engine import Database
from sharemgr.manager import access, driver_args, kinds, operation_table
from sharemgr.manager.hosts import host_of
from sharemgr.manager.op_errors import OperationFailed, Stale
from sharemgr.manager.operations import Step
from sharemgr.manager.plans import Change, Op, Plan, need, quiet_share, replica

if TYPE_CHECKING:
    from sharemgr.manager.operations import Operations

LOG = logging.getLogger(__name__)


def _siblings(db: Database, share_id: str) -> list[models.ShareInstance]:
    return db_api.query(db, models.ShareInstance, {"share_id": share_id})


def promoted_changes(db: Database, promoted: models.ShareInstance,
                     states: Mapping[str, str] | None = None) -> list[Change]:
    """The other replicas' new states once ``promoted`` is active: ``states``
    (the driver's answer) where it names them, an old active demoted to
    ``out_of_sync`` where it does not."""
    changes: list[Change] = []
    for other in _siblings(db, promoted.share_id):
        if other.id == promoted.id:
            continue
        new = (states or {}).get(other.id)
        if new is None and other.replica_state == vocab.REPLICA_ACTIVE:
            new = vocab.REPLICA_OUT_OF_SYNC
        if new == vocab.REPLICA_ACTIVE or new not in (None, *vocab.REPLICA_STATES):
            new = vocab.REPLICA_OUT_OF_SYNC  # one active replica only: the promoted one
        if new is not None and new != other.replica_state:
            changes.append((models.ShareInstance, other.id,
                            {"replica_state": other.replica_state}, {"replica_state": new}))
    return changes


# Plans ------------------------------------------------------------------------------


def plan_promote(db: Database, replica_id: str) -> Plan:
    rep = replica(db, replica_id)
    spec = operation_table.spec(vocab.REPLICA, vocab.ACTION_PROMOTE)
    need(rep.status, spec.starts_from, f"replica {replica_id}", "promote")
    plan = Plan(rep.id, [], [(models.ShareInstance, rep.id, {"status": vocab.AVAILABLE},
                              {"status": spec.transient[0]})],
                Op(vocab.REPLICA, rep.id, vocab.ACTION_PROMOTE, rep.host), row=rep)
    return quiet_share(db, plan, rep.share_id, quiet.Quiet(
        models.ShareInstance, {"share_id": rep.share_id}, vocab.TRANSIENT_STATUSES,
        f"cannot promote replica {replica_id}: its share has instances that are "
        "{statuses}; try again when they are done", but=(rep.id,)))


def plan_resync(db: Database, replica_id: str) -> Plan:
    rep = replica(db, replica_id)
    need(rep.status, (vocab.AVAILABLE,), f"replica {replica_id}", "resync")
    return Plan(rep.id, [], [], Op(vocab.REPLICA, rep.id, vocab.ACTION_RESYNC, rep.host),
                row=rep)


# Handlers -----------------------------------------------------------------------------


def _arguments(ops: Operations, rep: models.ShareInstance
               ) -> tuple[list[dict[str, object]], dict[str, object], list[dict[str, object]],
                          dict[str, object] | None]:
    replicas = [driver_args.share_parts(ops.db, i)[0] for i in _siblings(ops.db, rep.share_id)]
    rep_d, server = driver_args.share_parts(ops.db, rep)
    rules = [access.view(r) for r in db_access.rules_of(ops.db, rep.share_id)
             if r.state == vocab.ACCESS_ACTIVE]
    return replicas, rep_d, rules, server


def _states(answer: object) -> dict[str, str]:
    if answer is None:
        return {}
    if not isinstance(answer, Sequence) or isinstance(answer, str):
        raise OperationFailed(f"promote_replica answered {answer!r}, not a list of states")
    states: dict[str, str] = {}
    for item in answer:
        if not (isinstance(item, Mapping) and isinstance(item.get("id"), str)
                and item.get("replica_state") in vocab.REPLICA_STATES):
            raise OperationFailed(f"promote_replica answered {item!r}, not "
                                  "{'id', 'replica_state'}")
        states[item["id"]] = item["replica_state"]
    return states


def promote(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    spec = operation_table.spec(op.kind, op.action)
    rep0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if rep0 is None:
        raise Stale(f"replica {op.ident} is gone")
    driver = ops.driver_for(rep0.host)

    def call(rep: models.ShareInstance, _read: object) -> object:
        # Judged here: an answer that cannot be recorded is a failure.
        return _states(driver.promote_replica(*_arguments(ops, rep)))

    def done(rep: models.ShareInstance, states: object) -> list[Change]:
        assert isinstance(states, dict)
        return [(models.ShareInstance, rep.id, {"status": rep.status},
                 {"status": spec.success, "replica_state": vocab.REPLICA_ACTIVE}),
                *promoted_changes(ops.db, rep, states)]

    return ops.run(op, Step(models.ShareInstance, rep0.id, f"{spec.verb} of replica {rep0.id}",
                            call, done), held)


def resync(ops: Operations, op: Op, held: bool = False) -> list[Change] | None:
    spec = operation_table.spec(op.kind, op.action)
    rep0 = db_api.get(ops.db, models.ShareInstance, op.ident)
    if rep0 is None:
        raise Stale(f"replica {op.ident} is gone")
    if not kinds.is_secondary(rep0):
        raise Stale(f"replica {op.ident} is the active one: nothing to resync")
    driver = ops.driver_for(rep0.host)

    def call(rep: models.ShareInstance, _read: object) -> object:
        state = driver.update_replica_state(*_arguments(ops, rep))
        if state is not None and state not in (vocab.REPLICA_IN_SYNC, vocab.REPLICA_OUT_OF_SYNC,
                                                vocab.REPLICA_ERROR):
            raise OperationFailed(f"update_replica_state answered {state!r}")
        return state

    def done(rep: models.ShareInstance, state: object) -> list[Change]:
        if state is None or state == rep.replica_state:
            return []
        return [(models.ShareInstance, rep.id,
                 {"status": rep.status, "replica_state": rep.replica_state},
                 {"replica_state": state})]

    def failed(rep: models.ShareInstance, _exc: Exception) -> list[Change]:
        return [(models.ShareInstance, rep.id, {"status": rep.status},
                 {"replica_state": vocab.REPLICA_ERROR})]

    return ops.run(op, Step(models.ShareInstance, rep0.id, f"{spec.verb} of replica {rep0.id}",
                            call, done, failed, expected=(vocab.AVAILABLE,)), held)


def update_replica_states(ops: Operations, hosts: Sequence[str]) -> int:
    """The periodic task: every available secondary replica on ``hosts``
    asked for its state; returns how many were asked."""
    asked = 0
    wanted = set(hosts)
    for state in (vocab.REPLICA_IN_SYNC, vocab.REPLICA_OUT_OF_SYNC, vocab.REPLICA_ERROR):
        for rep in db_api.query(ops.db, models.ShareInstance,
                                {"status": vocab.AVAILABLE, "replica_state": state}):
            if host_of(rep.host) not in wanted:
                continue
            asked += 1
            asked_now = ops.perform(Op(vocab.REPLICA, rep.id, vocab.ACTION_RESYNC, rep.host))
            if not asked_now.ok:
                LOG.info("replica %s: state not updated: %s", rep.id, asked_now.reason)
    return asked
