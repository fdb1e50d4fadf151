"""The request queue: requests added (one or many), claimed by an engine,
finished or given back by the engine running them, and listed."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypedDict

import sqlalchemy as sa
from sharemgr.common import messages, vocab
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import messages as db_messages
from sharemgr.db import models, notify, records
from sharemgr.db.engine import Database
from sharemgr.db.inserts import insert_statement
from sharemgr.db.resource_keys import request_keys
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

utcnow = models.utcnow


class NewRequest(TypedDict):
    """A request row's values as an operation's plan writes them
    (``plans.Op.request``)."""

    resource_type: str
    resource_id: str
    action: str
    host: str | None
    args: dict[str, JSONValue]


def request_add_tx(
    session: Session,
    resource_type: str,
    resource_id: str,
    action: str,
    host: str | None,
    args: dict[str, JSONValue] | None = None,
) -> models.Request:
    row = models.Request(
        resource_type=resource_type,
        resource_id=resource_id,
        action=action,
        host=host,
        args=args or {},
        status=vocab.REQUEST_PENDING,
    )
    session.add(row)
    session.flush()
    notify.announce(session)
    return row


def requests_add_tx(session: Session, resource_type: str, action: str,
                    requests: Sequence[tuple[str, dict[str, JSONValue]]],
                    host: str | None = None) -> int:
    """Pending requests, ``(resource_id, args)`` each, in one INSERT of many
    rows (a preparation's leaves: a thousand independent shares were a
    thousand flushes); the engines are woken once it commits."""
    if not requests:
        return 0
    now = models.utcnow()
    session.execute(insert_statement(models.Request.__table__), [
        dict(resource_type=resource_type, resource_id=resource_id, action=action, host=host,
             args=args, status=vocab.REQUEST_PENDING, created_at=now)
        for resource_id, args in requests])
    notify.announce(session)
    return len(requests)


@functools.lru_cache(maxsize=32)
def _claim_statements(any_host: bool, hosts: int, skip_locked: bool, returning: bool,
                      action: str | None = None
                      ) -> tuple[records.Query, sa.Update, records.Query | None]:
    """The claim's statements for a lane of ``hosts`` hosts (bound as
    ``host0``...), built once (the loop runs them at every wake-up): which
    pending rows, the UPDATE that takes them, and where the UPDATE cannot
    return the rows, the read of what it took. ``action``: only requests
    of that action."""
    table = models.Request.__table__
    c = table.c
    limit = sa.bindparam("limit", type_=sa.Integer)
    matches: list[sa.ColumnElement[bool]] = [c.host == sa.bindparam(f"host{i}")
                                             for i in range(hosts)]
    if any_host:
        matches.append(c.host.is_(None))
    if action is not None:
        matches = [sa.and_(m, c.action == action) for m in matches]
    if skip_locked:
        pick = (sa.select(c.id).where(c.status == vocab.REQUEST_PENDING, sa.or_(*matches))
                .order_by(c.id).limit(limit).with_for_update(skip_locked=True))
        if any_host:
            # MariaDB walked the primary key for the lane of no host (most
            # pending rows match it), through every request done before
            # the first pending one: 60 ms a claim after 100,000 of them.
            pick = pick.with_hint(table, "FORCE INDEX (ix_requests_status_id)", "mysql")
    else:
        # SQLite: the first ``limit`` of each host, each on the index
        # (status, host), which ends in the id; then the first ``limit`` of
        # those. A walk of (status, id) testing each row's host read every
        # pending row when few were the lane's: 10 ms with 50,000 checks
        # pending, under the write lock, at every claim of a host's lane.
        firsts = [sa.select(c.id).where(c.status == vocab.REQUEST_PENDING, m)
                  .order_by(c.id).limit(limit).subquery() for m in matches]
        each = sa.union_all(*(sa.select(f.c.id) for f in firsts)).subquery()
        pick = sa.select(each.c.id).order_by(each.c.id).limit(limit)
    take = sa.update(table).values(status=vocab.REQUEST_RUNNING, engine_id=sa.bindparam("engine"),
                                   claimed_at=sa.bindparam("now"))
    if returning and skip_locked:
        # PostgreSQL: the first ``limit`` of each host (and of no host),
        # each in a materialized CTE of its own (one may not lock the rows
        # of a UNION; and PostgreSQL may run a plain IN (subquery) with
        # LIMIT and SKIP LOCKED more than once, and claim more than
        # ``limit``), each a walk of an index in id order whatever the
        # planner's statistics say: (status, host, id) for a host, the
        # partial index of pending rows of no host for those (migration
        # 0019). Right after a preparation wrote 50,000 pending checks, the
        # statistics still said the table was empty, and the planner
        # sorted every pending row at each claim: 23 ms a claim with its
        # commit, 4.7 with these walks. The rows a part locked beyond those
        # taken are let go at the commit. The status is written out in the
        # statement: the server must see the partial index's predicate.
        pending: sa.BindParameter[str] = sa.bindparam("pending", vocab.REQUEST_PENDING,
                                                      literal_execute=True)
        parts = [sa.select(c.id).where(c.status == pending, m)
                 .order_by(c.id).limit(limit).with_for_update(skip_locked=True)
                 .cte(f"part{i}").prefix_with("MATERIALIZED")
                 for i, m in enumerate(matches)]
        each = sa.union_all(*(sa.select(p.c.id) for p in parts)).subquery()
        ids = (sa.select(each.c.id).order_by(each.c.id).limit(limit)
               .cte("claimable").prefix_with("MATERIALIZED"))
        # The rows taken by key alone (``id = ANY(ARRAY(…))``): with the
        # statistics of an empty table, ``IN (SELECT …)``, or a condition on
        # the status beside the key, had the planner walk every pending row
        # to find the few ids. The parts locked them, pending (SKIP LOCKED
        # re-checks a part's conditions on the row it locks), and nobody
        # changes a row this transaction holds.
        taken = sa.literal_column("ARRAY(SELECT claimable.id FROM claimable)",
                                  type_=postgresql.ARRAY(sa.BigInteger))
        take = take.add_cte(*parts, ids).where(c.id == sa.any_(taken))
        return pick, take.returning(table), None
    if returning:  # SQLite: its transaction holds the write lock
        ids = pick.cte("claimable").prefix_with("MATERIALIZED")
        take = take.add_cte(ids).where(c.id.in_(sa.select(ids.c.id)),
                                       c.status == vocab.REQUEST_PENDING).returning(table)
        return pick, take, None
    take = take.where(c.id.in_(sa.bindparam("ids", expanding=True)),
                      c.status == vocab.REQUEST_PENDING)
    read = (sa.select(table).where(c.id.in_(sa.bindparam("ids", expanding=True)),
                                   c.engine_id == sa.bindparam("engine"),
                                   c.status == vocab.REQUEST_RUNNING).order_by(c.id))
    return pick, take, read


@retry_on_conflict
def request_claim(
    db: Database, hosts: Sequence[str], engine_id: str, limit: int, any_host: bool = True
) -> list[records.Record]:
    """Atomically move up to ``limit`` pending requests for ``hosts`` (and,
    with ``any_host``, requests without a host) to running for this engine;
    the claimed rows as records, by id.

    PostgreSQL/MariaDB: SELECT ... FOR UPDATE SKIP LOCKED, so concurrent engines
    take disjoint rows without waiting. SQLite: the transaction holds the write
    lock (BEGIN IMMEDIATE) so the select and update are one step. In both
    cases the UPDATE is conditional on status='pending'. Where UPDATE ...
    RETURNING exists (PostgreSQL, SQLite) the claim is that one statement."""
    hosts = sorted(set(hosts))
    if not hosts and not any_host:
        return []
    with db.session() as session:
        return _claim_tx(session, hosts, engine_id, limit, any_host)


def _claim_tx(session: Session, hosts: Sequence[str], engine_id: str, limit: int,
              any_host: bool, action: str | None = None) -> list[records.Record]:
    """``request_claim`` in the caller's transaction."""
    db: Database = session.info["database"]
    pick, take, read = _claim_statements(any_host, len(hosts), db.skip_locked,
                                         db.update_returning, action)
    params: dict[str, object] = {f"host{i}": h for i, h in enumerate(hosts)}
    params.update(limit=limit, engine=engine_id)
    if read is None:
        rows = session.execute(take, {**params, "now": utcnow()})
        return sorted((records.Record(**r._mapping) for r in rows), key=lambda r: r.id)
    ids = list(session.scalars(pick, params))
    if not ids:
        return []
    # ``now`` once the rows are ours (the select may have waited for a lock).
    session.execute(take, {"ids": ids, "engine": engine_id, "now": utcnow()})
    return [records.Record(**r._mapping)
            for r in session.execute(read, {"ids": ids, "engine": engine_id})]


def take_checks_tx(session: Session, engine_id: str, limit: int = 1) -> list[records.Record]:
    """The oldest pending ``check_resource`` requests any engine may run
    (no host), up to ``limit``, claimed for this engine in the caller's
    transaction, as the request loop's claim would take them. A check's
    report takes the next ones in its own transaction (convergence/report.py)
    instead of leaving its thread's slot to the request loop's next claim:
    a transaction less per node of a wide stack, and one claim for a batch."""
    return _claim_tx(session, (), engine_id, limit, True, vocab.ACTION_CHECK)


def _own_running_tx(session: Session, request_id: int, owner: str, **values: object) -> bool:
    """Change the request that engine ``owner`` is still running."""
    stmt = (
        sa.update(models.Request)
        .where(
            models.Request.id == request_id,
            models.Request.engine_id == owner,
            models.Request.status == vocab.REQUEST_RUNNING,
        )
        .values(**values)
    )
    return records.rowcount(session.execute(stmt)) == 1


@retry_on_conflict
def _own_running(db: Database, request_id: int, owner: str, **values: object) -> bool:
    with db.session() as session:
        return _own_running_tx(session, request_id, owner, **values)


@retry_on_conflict
def request_finish(
    db: Database, request_id: int, engine_id: str, status: str, error: str | None = None,
    message: str | None = None, message_ttl: float = messages.DEFAULT_TTL,
) -> bool:
    """End this engine's running request; ``message``: the detail id of the
    user message (common/messages.py) it leaves, in the same transaction."""
    with db.session() as session:
        won = _own_running_tx(session, request_id, engine_id, status=status, error=error,
                              finished_at=utcnow())
        if won and message is not None:
            db_messages.record_tx(session, request_id, message, message_ttl)
        return won


def request_release(db: Database, request_id: int, engine_id: str, why: str) -> bool:
    """Give a running request of this engine back (pending, no engine):
    its work has not reached the driver (the engine is out of the engines
    group); a member claims it again."""
    return _own_running(db, request_id, engine_id, status=vocab.REQUEST_PENDING,
                        engine_id=None, claimed_at=None, lease_expires_at=None,
                        lease_deadline=None, error=why)


@retry_on_conflict
def request_list(
    db: Database,
    status: str | None = None,
    resource_id: str | None = None,
    limit: int | None = None,
) -> list[models.Request]:
    """Requests, newest first; ``resource_id`` may name a share or a
    snapshot as users know it (its instances' requests are included)."""
    stmt = sa.select(models.Request).order_by(models.Request.id.desc())
    if status:
        stmt = stmt.where(models.Request.status == status)
    if limit:
        stmt = stmt.limit(limit)
    with db.reading() as session:
        if resource_id:
            stmt = stmt.where(models.Request.resource_id.in_(request_keys(session, resource_id)))
        return list(session.scalars(stmt))


# Intake: a resource change and its request in one transaction ---------------
