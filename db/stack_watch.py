"""What the stack watchdog (convergence/watchdog.py) reads and writes: the
traversals in progress, the open check requests and the failed ones, rows
a cut check left IN_PROGRESS; abandoning a dead engine's checks, asking a
host for a reconciliation pass.

Conventions as in db/stacks.py. The reads take no write lock (BEGIN
DEFERRED on SQLite): the watchdog reads at every run, and a stack's
engines write meanwhile."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api, models, records
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import defer

M = models


@retry_on_conflict
def active_stacks(db: Database) -> list[M.Stack]:
    """Stacks with a traversal IN_PROGRESS, without their graphs (one indexed
    query; what the watchdog reads when there is nothing to do)."""
    stmt = (sa.select(M.Stack).options(defer(M.Stack.current_deps))
            .where(M.Stack.status == vocab.STACK_IN_PROGRESS, M.Stack.deleted_at.is_(None)))
    with db.reading() as session:  # no write lock (BEGIN DEFERRED on SQLite)
        rows = list(session.scalars(stmt))
        for row in rows:
            session.expunge(row)
        return rows


@retry_on_conflict
def rows_left_in_progress(db: Database) -> list[M.StackResource]:
    """Rows IN_PROGRESS of stacks whose traversal has ended: a check cut
    short by an engine's death (the row still locked by it), or one cut by
    a partition whose lock a later check took over and let go when it found
    the traversal over (the row unlocked) — on a stack that failed before
    the node's retrigger ran."""
    stmt = (
        sa.select(M.StackResource)
        .join(M.Stack, M.Stack.id == M.StackResource.stack_id)
        .where(M.StackResource.status == vocab.STACK_IN_PROGRESS,
               M.Stack.status != vocab.STACK_IN_PROGRESS, M.Stack.deleted_at.is_(None))
    )
    with db.reading() as session:  # no write lock (BEGIN DEFERRED on SQLite)
        return list(session.scalars(stmt))


def _live_checks_stmt() -> records.Query:
    c = M.Request.__table__.c
    return (sa.select(c.id, c.status, c.engine_id, c.claimed_at, c.args)
            .where(c.resource_type == vocab.STACK_RESOURCE, c.action == vocab.ACTION_CHECK,
                   c.status.in_(vocab.REQUEST_OPEN))
            .order_by(c.id))


# Built once, on the table, the columns the watchdog reads: it reads every
# open check at each run (50,000 at a 50,000-share stack's create), and as
# ORM objects that was half of its run, a tenth of the engine's time.
_LIVE_CHECKS = _live_checks_stmt()


def live_checks(db: Database) -> list[records.Record]:
    """Check requests that are ``pending`` or ``running``: their id, status,
    engine, claim time and args, as read-only records."""
    with db.connect() as conn:
        return [records.Record(**row._mapping) for row in conn.execute(_LIVE_CHECKS)]


@retry_on_conflict
def abandon_checks(db: Database, requests: Iterable[records.Record], note: str
                   ) -> tuple[int, set[int]]:
    """Mark ``running`` check requests ``abandoned`` with ``note``, each only
    if it is still running for the engine the caller saw (engines doing this
    at once abandon each request once). A request whose row a transaction
    in progress holds (its engine paused or cut off inside its report) is
    skipped, not waited for (PostgreSQL, MariaDB): the waiting would hold up
    the caller's other periodic tasks for as long as that engine stays so.
    Returns how many this call abandoned and the ids it skipped."""
    wanted = list(requests)
    done, held = 0, set[int]()
    with db.session() as session:
        if db.skip_locked and wanted:
            free = set(session.scalars(
                sa.select(M.Request.id).where(M.Request.id.in_([r.id for r in wanted]))
                .with_for_update(skip_locked=True)))
            held = {r.id for r in wanted} - free
        for req in wanted:
            if req.id in held:
                continue
            done += records.rowcount(session.execute(
                sa.update(M.Request)
                .where(M.Request.id == req.id, M.Request.status == vocab.REQUEST_RUNNING,
                       M.Request.engine_id == req.engine_id)
                .values(status=vocab.REQUEST_ABANDONED, finished_at=M.utcnow(), error=note)
                .execution_options(synchronize_session=False)
            ))
    return done, held


@retry_on_conflict
def request_reconcile(db: Database, host: str, note: str) -> bool:
    """Ask the engines of ``host`` for a reconciliation pass (the request
    ``sharectl reconcile run`` writes), unless one is pending already."""
    with db.session() as session:
        pending = session.execute(
            sa.select(M.Request.id).where(
                M.Request.resource_type == vocab.RECONCILE, M.Request.action == vocab.ACTION_RUN,
                M.Request.host == host, M.Request.status == vocab.REQUEST_PENDING,
            ).limit(1)
        ).first()
        if pending:
            return False
        api.request_add_tx(session, vocab.RECONCILE, str(uuid.uuid4()), vocab.ACTION_RUN, host,
                           {"dry_run": False, "note": note})
        return True


@retry_on_conflict
def failed_checks(db: Database, limit: int = 200) -> list[M.Request]:
    """The newest ``failed`` check requests: a check records its own failures
    on the stack, so these are checks that could not (a database error, a
    bug); the watchdog counts them per node before retrying it again."""
    stmt = (
        sa.select(M.Request)
        .where(M.Request.resource_type == vocab.STACK_RESOURCE,
               M.Request.action == vocab.ACTION_CHECK,
               M.Request.status == vocab.REQUEST_FAILED)
        .order_by(M.Request.id.desc())
        .limit(limit)
    )
    with db.reading() as session:  # no write lock (BEGIN DEFERRED on SQLite)
        return list(session.scalars(stmt))
