"""Access rules in the database: the rules of a share, their state changes,
and the instances' ``access_rules_status`` that sums them up.

Every write that changes a rule's state recomputes the summary in the same
transaction, so ``access_rules_status`` never disagrees with the rules:
``syncing`` while any rule is on its way to the backend, else ``error`` if
any rule is in error, else ``active``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import Session

Rule = models.ShareAccessRule


def rules_of(db: Database, share_id: str) -> list[models.ShareAccessRule]:
    """The share's rules that are not denied, oldest first."""
    return db_api.query(db, Rule, {"share_id": share_id})


def rules_of_shares(db: Database, share_ids: Iterable[str]
                    ) -> dict[str, list[models.ShareAccessRule]]:
    """``rules_of`` for many shares in one read (a drift batch's), by share."""
    out: dict[str, list[models.ShareAccessRule]] = {s: [] for s in share_ids}
    if out:
        for rule in db_api.query(db, Rule, {"share_id": list(out)}):
            out[rule.share_id].append(rule)
    return out


def summary(states: Iterable[str]) -> str:
    states = set(states)
    if states & set(vocab.ACCESS_IN_FLIGHT):
        return vocab.ACCESS_RULES_SYNCING
    if vocab.ACCESS_ERROR in states:
        return vocab.ACCESS_ERROR
    return vocab.ACCESS_ACTIVE


def summarize_tx(session: Session, share_id: str) -> str:
    """Write the summary of the share's rules on its live instances."""
    states = session.scalars(sa.select(Rule.state).where(
        Rule.share_id == share_id, Rule.deleted_at.is_(None)))
    status = summary(states)
    session.execute(
        sa.update(models.ShareInstance)
        .where(models.ShareInstance.share_id == share_id,
               models.ShareInstance.deleted_at.is_(None),
               models.ShareInstance.access_rules_status != status)
        .values(access_rules_status=status)
        .execution_options(synchronize_session=False))
    return status


@retry_on_conflict
def start(db: Database, share_id: str) -> list[models.ShareAccessRule]:
    """Move the queued rules to applying / denying and return every rule
    that is not denied: what an update_access call works from. Rules a crash
    left applying or denying stay so and are sent again."""
    with db.session() as session:
        for queued, going in ((vocab.ACCESS_QUEUED_TO_APPLY, vocab.ACCESS_APPLYING),
                              (vocab.ACCESS_QUEUED_TO_DENY, vocab.ACCESS_DENYING)):
            session.execute(
                sa.update(Rule)
                .where(Rule.share_id == share_id, Rule.state == queued,
                       Rule.deleted_at.is_(None))
                .values(state=going, updated_at=models.utcnow())
                .execution_options(synchronize_session=False))
        summarize_tx(session, share_id)
        rows = session.scalars(sa.select(Rule).where(
            Rule.share_id == share_id, Rule.deleted_at.is_(None)
        ).order_by(Rule.created_at, Rule.id))
        return list(rows)


@retry_on_conflict
def finish(db: Database, share_id: str, outcome: Mapping[str, tuple[str, str]],
           keys: Mapping[str, str] | None = None) -> int:
    """Write each rule's outcome ``{rule_id: (state it was sent in, new
    state)}`` where the rule is still in the state it was sent in (a deny
    that came meanwhile wins over an apply's outcome), with the key the
    backend gave it (``keys``), and the summary, in one transaction.
    Returns how many rules took their outcome."""
    now = models.utcnow()
    won = 0
    with db.session() as session:
        for rule_id, (sent, new) in outcome.items():
            values: dict[str, object] = {"state": new}
            if new == vocab.ACCESS_DELETED:
                values["deleted_at"] = now
            elif keys and rule_id in keys:
                values["access_key"] = keys[rule_id]
            won += db_api.conditional_update_tx(session, Rule, rule_id, {"state": sent},
                                                values)
        summarize_tx(session, share_id)
    return won


@retry_on_conflict
def in_flight_on_host(db: Database, host: str) -> dict[str, list[models.ShareAccessRule]]:
    """Rules on their way to the backend of the live share instances on
    ``host`` ('host@backend', pools included), by instance id: what a crash
    may have cut short. One query."""
    inst = models.ShareInstance
    stmt = (
        sa.select(inst.id, Rule)
        .join(Rule, Rule.share_id == inst.share_id)
        .where(sa.or_(inst.host == host, inst.host.like(f"{host}#%")),
               inst.deleted_at.is_(None), inst.replica_state.is_(None)
               | (inst.replica_state == vocab.REPLICA_ACTIVE),
               Rule.deleted_at.is_(None), Rule.state.in_(vocab.ACCESS_IN_FLIGHT))
        .order_by(inst.id, Rule.created_at)
    )
    out: dict[str, list[models.ShareAccessRule]] = {}
    with db.session() as session:
        for inst_id, rule in session.execute(stmt):
            out.setdefault(inst_id, []).append(rule)
    return out


@retry_on_conflict
def instances_with_rules(db: Database, instance_ids: Sequence[str]) -> list[str]:
    """Which of these share instances' shares have rules that are applied
    or being applied (what ensure-resources sends again)."""
    if not instance_ids:
        return []
    inst = models.ShareInstance
    stmt = (
        sa.select(inst.id).distinct()
        .join(Rule, Rule.share_id == inst.share_id)
        .where(inst.id.in_(list(instance_ids)), Rule.deleted_at.is_(None),
               Rule.state.in_((vocab.ACCESS_ACTIVE, vocab.ACCESS_APPLYING,
                               vocab.ACCESS_QUEUED_TO_APPLY)))
    )
    with db.session() as session:
        return sorted(session.scalars(stmt))


@retry_on_conflict
def add_requests(db: Database, requests: Sequence[db_api.NewRequest]) -> None:
    """Several requests (``request_add_tx`` keywords) in one transaction."""
    with db.session() as session:
        for request in requests:
            db_api.request_add_tx(session, **request)
