"""Leases of running requests and fencing takes (doc/reconciliation.rst,
"Leases" and "Fencing"): every lease is written and judged by the database's
clock (db/clock.py), so engines whose clocks disagree agree on them."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import clock, models, records
from sharemgr.db.engine import Database
from sharemgr.db.models import M
from sharemgr.db.request_queue import NewRequest
from sharemgr.db.resources import host_match
from sharemgr.db.retry import retry_on_conflict
from sqlalchemy.orm import Session

P = TypeVar("P")  # what a re-read reads with its row


def _lease_statements(deadline: bool) -> tuple[records.Query, sa.Update, sa.Update]:
    r = models.Request.__table__  # a plain UPDATE (see api.conditional_update_tx)
    mine = (r.c.engine_id == sa.bindparam("engine"), r.c.status == vocab.REQUEST_RUNNING)
    about = r.c.resource_id.in_(sa.bindparam("resources", expanding=True))
    by_id = r.c.id.in_(sa.bindparam("ids", expanding=True))
    until = clock.after(sa.bindparam("until"))
    values: dict[str, sa.ColumnElement[datetime.datetime]] = {}
    if deadline:
        values["lease_deadline"] = clock.after(sa.bindparam("deadline"))
        values["lease_expires_at"] = until
    else:
        # A renewal: never past the call's deadline, as the database counts.
        values["lease_expires_at"] = sa.case(
            (r.c.lease_deadline < until, r.c.lease_deadline), else_=until)
    lease = sa.update(r).values(values)
    return sa.select(r.c.id).where(about, *mine), lease.where(about, *mine), lease.where(
        by_id, *mine)


# Built once with parameters: a share operation sets its lease at each step
# (with the call's deadline as it starts; a renewal keeps the deadline).
_LEASE_STMTS = {False: _lease_statements(False), True: _lease_statements(True)}


def _lease_set_tx(session: Session, resource_ids: list[str], engine_id: str,
                  until: float, deadline: float | None = None) -> int:
    params = {"resources": list(resource_ids), "engine": engine_id, "until": until,
              "deadline": deadline}
    leased, lease, lease_by_id = _LEASE_STMTS[deadline is not None]
    if session.get_bind().dialect.name == "mysql":
        # InnoDB locks every index record an UPDATE scans, not only the rows
        # it changes: found first without locks, the rows are updated by
        # primary key, so this statement holds nothing another writer of
        # requests waits for while it waits (a deadlock seen in CI).
        ids = list(session.scalars(leased, params))
        if not ids:
            return 0
        return records.rowcount(session.execute(lease_by_id, {**params, "ids": ids}))
    return records.rowcount(session.execute(lease, params))


@retry_on_conflict
def lease_set(db: Database, resource_ids: list[str], engine_id: str,
              until: float, deadline: float | None = None) -> int:
    """Set the lease of this engine's running requests about these resources
    to ``until`` seconds from now, and their calls' deadline to ``deadline``
    seconds from now when given (else the lease stops at the deadline they
    have), both by the database's clock (db/clock.py), in one UPDATE; how
    many there were."""
    if not resource_ids:
        return 0
    with db.session() as session:
        return _lease_set_tx(session, resource_ids, engine_id, until, deadline)


def take_tx(session: Session, model: type[models.HasTable], ident: str,
            statuses: tuple[str, ...]) -> bool:
    """Take a fenced resource in one of ``statuses``: bump its fencing token
    (doc/reconciliation.rst, "Fencing"), so that an outcome or a driver call
    under an older token no longer counts. False when the row is in none of
    them (or gone)."""
    return db_api.conditional_update_tx(session, model, ident, {"status": statuses},
                                        {"fence": db_api.PLUS_ONE})


@retry_on_conflict
def take_rows(db: Database, model: type[models.Live], rows: dict[str, str]
              ) -> dict[str, Any]:
    """Take many fenced resources, each in the status it was seen with
    (``{id: status}``), and read them back: the rows taken, by id (a row
    whose status changed is left out)."""
    # Rows of any class: the reconciler's kinds name theirs as a bare ``type``.
    with db.session() as session:
        if db.update_returning:  # one UPDATE … RETURNING per status and MANY_AT_ONCE rows
            by_status: dict[str, list[str]] = {}
            for ident, status in rows.items():
                by_status.setdefault(status, []).append(ident)
            taken = [ident for status, idents in by_status.items()
                     for at in range(0, len(idents), db_api.MANY_AT_ONCE)
                     for ident in db_api.conditional_update_many_tx(
                         session, model, idents[at:at + db_api.MANY_AT_ONCE], {"status": status},
                         {"fence": db_api.PLUS_ONE})]
        else:
            taken = [ident for ident, status in rows.items()
                     if take_tx(session, model, ident, (status,))]
        if not taken:
            return {}
        found = session.scalars(sa.select(model).where(model.id.in_(taken)))
        return {row.id: row for row in found}


class Lease(Protocol):
    """A lease's terms (manager/leases.py), in seconds from the moment the
    database writes them: held until, never past the deadline."""

    @property
    def until(self) -> float: ...

    @property
    def deadline(self) -> float: ...


class TakenOver(Exception):
    """The request a take was for is no longer this engine's running one (a
    pass abandoned it: its lease expired, or its engine left the group): the
    row was not taken, so the call of whoever took the work over stands."""


def _mine_tx(session: Session, request_id: int, engine_id: str) -> bool:
    """Whether request ``request_id`` is still this engine's running one,
    its row locked until the transaction ends: a pass's abandon of it
    (db/reconcile.py) then waits for the take, or the take sees it."""
    r = models.Request.__table__
    found = session.execute(
        sa.select(r.c.id).where(r.c.id == request_id, r.c.engine_id == engine_id,
                                r.c.status == vocab.REQUEST_RUNNING).with_for_update())
    return found.first() is not None


@retry_on_conflict
def read_and_lease(db: Database, model: type[M], ident: str, engine_id: str,
                   lease_by_status: Mapping[str, Lease | None],
                   read: Callable[[Session, str], tuple[M | None, P]] | None = None,
                   take: tuple[str, ...] | None = None, request_id: int | None = None
                   ) -> tuple[M | None, P | None, int]:
    """Re-read a resource row (None if gone or deleted) and, in the same
    transaction, set the lease of this engine's running request about it to
    the one ``lease_by_status`` gives for the status read (none for a status
    it does not name). ``read``: how the row is read in that transaction, with
    what else the caller needs (a share instance with its share, in one
    statement: ``resources.instance_with_share_tx``), by default by primary
    key alone. ``take``: the statuses in which the row is taken first
    (``take_tx``: its fencing token bumped), so the row read carries the new
    token; ``request_id``: the request the take is for, which must still be
    this engine's and running, or nothing is taken and ``TakenOver`` is
    raised (an engine back from a pause or a cut must not fence out the
    call of the pass that took its work over). Returns the row, what
    ``read`` read with it, and how many requests were leased. A read that
    takes nothing and leases nothing (a row inserted taken with its
    request's lease, a ``fresh`` without a take) holds no write lock: on
    SQLite a write transaction queues behind every other writer of the
    engine, and this one would write nothing."""
    def reread(session: Session) -> tuple[M | None, P | None]:
        if read is None:
            return db_api.get_tx(session, model, ident), None
        return read(session, ident)

    fenced = hasattr(model, "fence")
    if take is None or not fenced:
        with db.reading() as session:
            row, parent = reread(session)
            if row is None or lease_by_status.get(getattr(row, "status", "")) is None:
                return row, parent, 0
    with db.session() as session:
        if take is not None and fenced:
            take_tx(session, model, ident, take)
            # Raised, the take is rolled back with the rest of the transaction.
            if request_id is not None and not _mine_tx(session, request_id, engine_id):
                raise TakenOver(f"request {request_id} is no longer {engine_id}'s")
        row, parent = reread(session)
        terms = None if row is None else lease_by_status.get(getattr(row, "status", ""))
        if terms is None:
            return row, parent, 0
        return row, parent, _lease_set_tx(session, [ident], engine_id, terms.until,
                                          terms.deadline)


@retry_on_conflict
def expired_leases(db: Database, hosts: list[str]) -> list[models.Request]:
    """Running requests of these hosts whose lease has expired: the one
    query of a periodic tick (ix_requests_status_lease)."""
    if not hosts:
        return []
    stmt = sa.select(models.Request).where(
        models.Request.status == vocab.REQUEST_RUNNING,
        models.Request.lease_expires_at < clock.now(),
        sa.or_(*[host_match(models.Request.host, h) for h in hosts]),
    )
    with db.reading() as session:
        return list(session.scalars(stmt.order_by(models.Request.id)))


def running_requests_tx(session: Session, engine_id: str,
                        ops: Sequence[tuple[NewRequest, Lease | None] | None]
                        ) -> list[int | None]:
    """The requests of several operations, ``(values, lease)`` each (None:
    no operation), as :func:`running_request_tx` writes each; in one
    statement when every one has a lease and each is about a resource of
    its own (a batch of a stack's begins)."""
    leased = [(op, lease) for op, lease in (o for o in ops if o is not None)
              if lease is not None]
    keys = [(op["resource_type"], op["resource_id"]) for op, _ in leased]
    if len(leased) < len(ops) or len(set(keys)) < len(keys):
        return [None if o is None else running_request_tx(session, engine_id, **o[0], lease=o[1])
                for o in ops]
    rows = [{**_running(engine_id, **op), "lease_until": lease.until,
             "lease_deadline_s": lease.deadline} for op, lease in leased]
    # Keys matched by resource, not by order: SQLite gives no order for
    # many rows' RETURNING, and SQLAlchemy asked for one sends a row each.
    got = {(t, r): ident for ident, t, r in session.execute(_LEASED_REQUESTS, rows)}
    return [got[key] for key in keys]


def running_request_tx(
    session: Session,
    engine_id: str,
    resource_type: str,
    resource_id: str,
    action: str,
    host: str | None,
    args: models.RequestArgs | None = None,
    lease: Lease | None = None,
) -> int:
    """A request ``running`` for this engine as it is written, with its
    call's lease when given (by the database's clock); its id."""
    values = _running(engine_id, resource_type, resource_id, action, host, args)
    if lease is None:
        return records.new_key(session.execute(
            db_api.insert_statement(models.Request.__table__), values))
    return records.new_key(session.execute(_LEASED_REQUEST, {
        **values, "lease_until": lease.until, "lease_deadline_s": lease.deadline}))


def _running(engine_id: str, resource_type: str, resource_id: str, action: str,
             host: str | None, args: models.RequestArgs | None = None) -> dict[str, object]:
    """A request row's values, ``running`` for this engine from now."""
    now = models.utcnow()
    return dict(
        resource_type=resource_type, resource_id=resource_id, action=action, host=host,
        args=args or {}, status=vocab.REQUEST_RUNNING, engine_id=engine_id, created_at=now,
        claimed_at=now)


# A running request written with its lease: the times computed by the database.
_LEASED_REQUEST = sa.insert(models.Request.__table__).values(
    lease_expires_at=clock.after(sa.bindparam("lease_until")),
    lease_deadline=clock.after(sa.bindparam("lease_deadline_s")))
# Many of them, each key returned with its resource (``begin_many``).
_LEASED_REQUESTS = _LEASED_REQUEST.returning(*(models.Request.__table__.c[n] for n in (
    "id", "resource_type", "resource_id")))
