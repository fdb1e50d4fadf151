"""SyncPoints (doc/specs.rst, spec 004): the progress of a traversal, one row per graph node.

A SyncPoint is keyed by ``(entity_id, traversal_id, is_update)`` — the graph
node (a resource row id as a string, or the stack id for the stack's own
point) and the traversal — and collects the input data the node's
predecessors send it: ``{sender key: data}``. When every predecessor has
reported, the node is ready and its ``check_resource`` request is enqueued.

Writes are compare-and-swap on ``atomic_key``::

    UPDATE sync_points SET input_data=:new, atomic_key=:k+1
     WHERE entity_id=:e AND traversal_id=:t AND is_update=:u AND atomic_key=:k

A writer that loses (0 rows) re-reads and retries after a jittered back-off;
after ``lock_after`` lost races it reads the row ``FOR UPDATE`` (PostgreSQL,
MariaDB), so a wide fan-in cannot starve a writer. On SQLite the transaction
already holds the write lock (``BEGIN IMMEDIATE``), so the CAS never loses.

:func:`sync_tx` says whether the write made the point complete (``fired``);
the caller enqueues the successor in the transaction of that CAS, which it
owns (``convergence/report.py``): the enqueue commits with the write or not
at all, and exactly one writer sees the transition from incomplete to
complete. The statements are here, the transactions are the protocol's. A
missing SyncPoint means the traversal is over: superseded (a new preparation
deletes the old points in the transaction that swaps the stack's traversal,
see doc/specs.rst, spec 001), completed or failed (the transaction that
writes the stack row's end deletes them first). So a point that exists, read
under its lock, says its traversal is current and in progress.

Lock order: a SyncPoint row before the ``stacks`` row and ``stack_resources``
rows (preparation deletes the old points first); among points, none: a
deadlock ends one transaction, which runs again (db/stacks.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import time
import types
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

import sqlalchemy as sa
import tenacity
from sharemgr.common import metrics
from sharemgr.common.jsontypes import JSONValue
from sharemgr.db import first_reports, models, records
from sharemgr.db.engine import Database
from sqlalchemy.orm import Session

SP = models.SyncPoint
# A node's entity: a stack_resources row id, or the stack's id for its own point.
EntityId = int | str

# Back-off between CAS attempts: "full jitter" — a uniform draw from
# [0, min(cap, base * 2**attempt)] — so writers that collided spread out.
BACKOFF_BASE = 0.002
BACKOFF_CAP = 0.25
LOCK_AFTER = 3  # lost races before a locking read; None: never lock
MAX_ATTEMPTS = 200


class SyncPointContention(Exception):
    """The CAS lost ``max_attempts`` times in a row."""


@dataclass(frozen=True)
class SyncPoint:
    """A detached snapshot of a row."""

    entity_id: str
    traversal_id: str
    is_update: bool
    stack_id: str
    atomic_key: int
    input_data: dict[str, JSONValue] = field(default_factory=dict)

    def is_ready(self, required: Collection[str]) -> bool:
        return is_ready(self.input_data, required)


@dataclass(frozen=True)
class SyncResult:
    found: bool  # False: no such point — the traversal was superseded
    ready: bool = False  # every required sender has now reported
    fired: bool = False  # this write made it ready: the caller enqueues the successor
    input_data: dict[str, JSONValue] = field(default_factory=dict)
    attempts: int = 0


def is_ready(input_data: Mapping[str, JSONValue], required: Collection[str]) -> bool:
    """All ``required`` sender keys are present in ``input_data``."""
    return all(k in input_data for k in required)


def _by_key() -> list[sa.ColumnElement[bool]]:
    c = SP.__table__.c
    return [c.entity_id == sa.bindparam("e"), c.traversal_id == sa.bindparam("t"),
            c.is_update == sa.bindparam("u")]


# The hot statements, built once with parameters: a statement built anew at
# each call costs more in building and in its cache key than in running.
_GET = sa.select(SP.__table__).where(*_by_key())
_GET_LOCKED = _GET.with_for_update()


@functools.lru_cache(maxsize=16)
def _cas_holding(count: int) -> sa.Update:
    """The CAS of a point: its key is ``:k``; with ``count``, its JSON also
    names ``count`` given senders (``:h0`` … as LIKE patterns)."""
    c = SP.__table__.c
    text = sa.cast(c.input_data, sa.Text)
    return (sa.update(SP.__table__)
            .where(*_by_key(), c.atomic_key == sa.bindparam("k"),
                   *[text.like(sa.bindparam(f"h{i}")) for i in range(count)])
            .values(input_data=sa.bindparam("data"), atomic_key=sa.bindparam("k_new"),
                    updated_at=sa.bindparam("now")))


_CAS = _cas_holding(0)
# The stack's point counts its roots' reports (``report_roots_tx``).
_COUNT = (sa.update(SP.__table__).where(*_by_key())
          .values(atomic_key=SP.__table__.c.atomic_key + sa.bindparam("n"),
                  updated_at=sa.bindparam("now")))
_KEY_OF = sa.select(SP.__table__.c.atomic_key).where(*_by_key())
_COUNT_RETURNING = _COUNT.returning(SP.__table__.c.atomic_key)


def _key(entity_id: EntityId, traversal_id: str, is_update: bool) -> dict[str, object]:
    return {"e": str(entity_id), "t": traversal_id, "u": bool(is_update)}


def _snapshot(row: records.Row) -> SyncPoint:
    return SyncPoint(
        entity_id=row.entity_id,
        traversal_id=row.traversal_id,
        is_update=bool(row.is_update),
        stack_id=row.stack_id,
        atomic_key=row.atomic_key,
        input_data=dict(row.input_data or {}),
    )


# Create / read / delete ----------------------------------------------------------


def create_tx(
    session: Session,
    stack_id: str,
    traversal_id: str,
    nodes: Iterable[tuple[EntityId, bool]],
    include_stack: bool = True,
    reported: Mapping[tuple[str, bool], Mapping[str, object]] | None = None,
    roots: Iterable[str] = (),
    settled_roots: int = 0,
) -> int:
    """One point per ``(entity_id, is_update)`` node, plus, with
    ``include_stack``, the stack's own point ``(stack_id, True)``. One
    multi-row INSERT, so thousands of nodes cost one round trip.
    ``reported``: by ``(str(entity_id), is_update)``, the reports a point
    holds from the start (of nodes the preparation settled), its key the
    number of them, as if each had been written by a CAS. ``roots``: the
    keys of the graph's roots still to report, each given its point at the
    stack (:func:`root_entity`, :func:`report_roots_tx`); the stack's
    point's key starts at ``settled_roots``, the roots that need not (a
    settled node has no point: nothing reads one)."""
    now = models.utcnow()
    reported = reported or {}

    def row(entity: EntityId, is_update: bool) -> dict[str, object]:
        data = dict(reported.get((str(entity), bool(is_update)), {}))
        return {"entity_id": str(entity), "traversal_id": traversal_id,
                "is_update": bool(is_update), "stack_id": stack_id, "atomic_key": len(data),
                "input_data": data, "created_at": now}

    markers = [row(root_entity(stack_id, key), False) for key in roots]
    rows = [row(entity, is_update) for entity, is_update in nodes] + markers
    if include_stack:
        rows.append(row(stack_id, True))
        rows[-1]["atomic_key"] = settled_roots + sum(1 for m in markers if m["atomic_key"])
    if rows:
        session.execute(sa.insert(SP.__table__), rows)  # not the ORM's bulk path: half the CPU
    return len(rows)


def get_tx(
    session: Session, entity_id: EntityId, traversal_id: str, is_update: bool, lock: bool = False
) -> SyncPoint | None:
    # The table's columns, not the mapped class: a plain row, no ORM object
    # to build and throw away (the point is returned as a snapshot).
    row = session.execute(_GET_LOCKED if lock else _GET,
                          _key(entity_id, traversal_id, is_update)).first()
    return None if row is None else _snapshot(row)


def list_for_traversal(db: Database, stack_id: str, traversal_id: str) -> list[SyncPoint]:
    c = SP.__table__.c  # plain rows, no ORM objects
    with db.connect() as conn:
        rows = conn.execute(
            sa.select(SP.__table__)
            .where(c.stack_id == stack_id, c.traversal_id == traversal_id)
            .order_by(c.entity_id, c.is_update)
        )
        return [_snapshot(r) for r in rows]


def _reports_stmt() -> records.Query:
    c = SP.__table__.c
    return sa.select(c.entity_id, c.is_update, c.input_data).where(
        c.stack_id == sa.bindparam("s"), c.traversal_id == sa.bindparam("t"))


# Built once: the watchdog reads every point of a traversal at each run
# (150,001 at 50,000 shares), three columns of them (a point's timestamps
# were most of the time of a read of whole rows).
_REPORTS = _reports_stmt()


def reports_for_traversal(db: Database, stack_id: str, traversal_id: str
                          ) -> dict[tuple[str, bool], dict[str, JSONValue]]:
    """Each point of a traversal, (entity id, is_update) -> its input data
    (the reports it has had), in a read that takes no write lock: on
    SQLite a run of the watchdog held every writer up for its length."""
    with db.connect() as conn:
        return {(str(row[0]), bool(row[1])): cast("dict[str, JSONValue]", row[2] or {})
                for row in conn.execute(_REPORTS, {"s": stack_id, "t": traversal_id})}


def delete_all_tx(session: Session, stack_id: str, traversal_id: str | None = None) -> int:
    """Delete the points of one traversal of a stack (all of the stack's
    points when ``traversal_id`` is None)."""
    stmt = sa.delete(SP).where(SP.stack_id == stack_id)
    if traversal_id is not None:
        stmt = stmt.where(SP.traversal_id == traversal_id)
    return records.rowcount(session.execute(stmt.execution_options(synchronize_session=False)))


# Compare-and-swap -------------------------------------------------------------------


def cas_tx(
    session: Session,
    entity_id: EntityId,
    traversal_id: str,
    is_update: bool,
    expected_key: int,
    input_data: dict[str, JSONValue],
) -> bool:
    """One compare-and-swap: store ``input_data`` if the point's key is still
    ``expected_key`` (and bump it). False if another writer got there first
    or the point is gone."""
    params = {**_key(entity_id, traversal_id, is_update), "k": expected_key,
              "k_new": expected_key + 1, "data": input_data, "now": models.utcnow()}
    return records.rowcount(session.execute(_CAS, params)) == 1


def blind_write_tx(session: Session, entity_id: EntityId, traversal_id: str, is_update: bool,
                   known: Mapping[str, JSONValue], sender: str, data: JSONValue) -> bool:
    """Store ``{**known, sender: data}`` in a point that holds ``known``,
    without reading it first: what a read and a CAS would write there. The
    statement checks that it does: the key is ``len(known)`` (that many
    writes) and the point's JSON names every sender of ``known`` (each
    write adds one sender, so those are all it holds; an empty point has
    key 0). False if the point holds something else (a report split
    across transactions came late, a sender reported twice) or is gone;
    the caller then reads it. ``known``'s values are what those senders
    sent; the check reads only their names."""
    if not known:
        return cas_tx(session, entity_id, traversal_id, is_update, 0, {sender: data})
    if any(ch in key for key in known for ch in '%_\\'):
        return False  # not a node key: no LIKE pattern for it
    params = {**_key(entity_id, traversal_id, is_update), "k": len(known),
              "k_new": len(known) + 1, "data": {**known, sender: data},
              "now": models.utcnow(),
              **{f"h{i}": f"%{json.dumps(key)}%" for i, key in enumerate(known)}}
    return records.rowcount(session.execute(_cas_holding(len(known)), params)) == 1


def _known(sender: str, required: Collection[str],
           known: Mapping[str, JSONValue] | None) -> Mapping[str, JSONValue] | None:
    """What the point holds before ``sender``'s report, if known: the
    caller's word, or nothing for a point that waits for ``sender`` alone."""
    if known is None and len(required) == 1 and sender in required:
        return {}
    return known


class CasLost(Exception):
    """An unlocked read's compare-and-swap lost to another writer: the
    caller's transaction is rolled back and the report tried again
    (:func:`retrying`)."""


def sync_tx(
    session: Session,
    entity_id: EntityId,
    traversal_id: str,
    is_update: bool,
    sender: str,
    data: JSONValue,
    required: Collection[str] = (),
    known: Mapping[str, JSONValue] | None = None,
    lock: bool = True,
    blind: bool = True,
) -> SyncResult:
    """Merge ``{sender: data}`` into the point, in the caller's transaction.

    ``required`` are the sender keys the point waits for (the node's
    predecessors in the graph). ``SyncResult.fired``: this write made the
    point complete — every required key present now, not all present
    before — so the caller, in this same transaction, enqueues the
    successor (or ends the traversal): it commits with this write or not
    at all, and exactly one writer sees the transition. A sender reporting
    again after completion merges its data but fires nothing.

    A point whose content before this report is expected — ``known``: the
    senders the caller expects to have reported and what they sent (the
    graph's order tells); or nothing, for a point that waits for
    ``sender`` alone (most points of a graph) — is first tried with a
    blind write (one UPDATE, the row locked as the read would, which
    checks the point holds that: ``blind_write_tx``); only a report that
    finds it otherwise (a sender reporting again, a report split across
    transactions) or gone reads it.

    With ``lock`` (the default) the read locks the point (``FOR UPDATE`` on
    PostgreSQL and MariaDB; SQLite's transaction holds the write lock), so
    the CAS cannot lose: the transaction then holds the point, and must
    have locked points before the ``stacks`` row and ``stack_resources``
    rows (the lock order above). Without it a lost CAS raises
    :class:`CasLost`; ``blind=False`` (an attempt after a lost one) reads
    the point first. Returns ``SyncResult(found=False)`` if the point does
    not exist."""
    prior = _known(sender, required, known) if blind else None
    if prior is not None and blind_write_tx(
            session, entity_id, traversal_id, is_update, prior, sender, data):
        return merged(prior, {sender: data}, required)
    return _read_and_cas(session, entity_id, traversal_id, is_update, {sender: data}, required,
                         lock)


def root_entity(stack_id: str, key: str) -> str:
    """The entity of the point at which the root ``key`` reports to the
    stack: one point per root, so that the stack's own point stays one small
    row however many roots the graph has (a point holding every root's key
    made each root's report read and write a JSON that grew with the
    stack)."""
    return f"{stack_id}/{key}"


def report_roots_tx(session: Session, stack_id: str, traversal_id: str,
                    keys: Collection[str], roots: int) -> SyncResult:
    """The reports of roots ``keys`` to the stack, in the caller's
    transaction: each root's point (:func:`root_entity`) written from key 0
    to 1 with ``{key: None}``, several in one statement (``first_reports.py``;
    a root reporting again finds it written and changes nothing), then the
    stack's point's key raised by the number of roots new to it, locking it.
    ``fired``: this report brought the count to ``roots`` (exactly one
    transaction sees that). The stack's point is written last. Returns
    ``found=False`` if a point is gone (the traversal is over)."""
    new = 0
    points = [(root_entity(stack_id, key), False, dict.fromkeys([key])) for key in sorted(keys)]
    firsts = first_reports.first_reports_tx(session, traversal_id, points) \
        if points[1:] else None  # None: one by one
    for entity, _, data in points:
        if (entity, False) in firsts if firsts is not None else \
                cas_tx(session, entity, traversal_id, False, 0, data):
            new += 1
        elif get_tx(session, entity, traversal_id, False) is None:
            return SyncResult(found=False, attempts=1)
    point = _key(stack_id, traversal_id, True)
    if not new:
        found = get_tx(session, stack_id, traversal_id, True) is not None
        return SyncResult(found=found, attempts=1)
    params = {**point, "n": new, "now": models.utcnow()}
    if session.info["database"].update_returning:  # the new key in the same statement
        count = session.execute(_COUNT_RETURNING, params).scalar_one_or_none()
    elif records.rowcount(session.execute(_COUNT, params)) == 1:
        count = session.execute(_KEY_OF, point).scalar_one()
    else:
        count = None
    if count is None:
        return SyncResult(found=False, attempts=1)
    ready = count >= roots
    return SyncResult(found=True, ready=ready, fired=ready and count - new < roots,
                      attempts=1)


def _read_and_cas(session: Session, entity_id: EntityId, traversal_id: str, is_update: bool,
                  reports: Mapping[str, JSONValue], required: Collection[str], lock: bool
                  ) -> SyncResult:
    point = get_tx(session, entity_id, traversal_id, is_update, lock=lock)
    if point is None:
        return SyncResult(found=False, attempts=1)
    both = {**point.input_data, **reports}
    if not cas_tx(session, entity_id, traversal_id, is_update, point.atomic_key, both):
        if lock:
            raise SyncPointContention(f"SyncPoint {entity_id}/{traversal_id}/{is_update}: "
                                      "changed under its row lock")
        raise CasLost()
    return merged(point.input_data, reports, required)


def merged(prior: Mapping[str, JSONValue], reports: Mapping[str, JSONValue],
           required: Collection[str]) -> SyncResult:
    """The result of writing ``reports`` to a point that held ``prior``."""
    both = {**prior, **reports}
    ready = is_ready(both, required)
    return SyncResult(found=True, ready=ready, fired=ready and not is_ready(prior, required),
                      input_data=both, attempts=1)


def retrying(lock_after: int | None = LOCK_AFTER, max_attempts: int = MAX_ATTEMPTS,
             backoff_base: float = BACKOFF_BASE, backoff_cap: float = BACKOFF_CAP
             ) -> Iterator[Attempt]:
    """The attempts of a report that runs in a transaction of its own, each
    a new transaction (the caller's ``with db.session()``) that a lost CAS
    (:class:`CasLost`) rolls back; tried again after a jittered back-off
    ("full jitter": uniform in ``[0, min(cap, base * 2**attempt)]``, so
    writers that collided spread out), up to ``max_attempts``
    (:class:`SyncPointContention`). From attempt ``lock_after + 1`` on the
    read locks the point, so a wide fan-in cannot starve a writer::

        for attempt in sync_points.retrying():
            with attempt, db.session() as session:
                result = sync_points.sync_tx(session, ..., known=known,
                                             lock=attempt.lock, blind=attempt.first)
                if result.fired:
                    ...  # the successor's request, in the CAS's transaction
    """
    def before_sleep(state: tenacity.RetryCallState) -> None:
        metrics.SYNC_POINT_CAS_RETRIES.inc()

    def gave_up(state: tenacity.RetryCallState) -> None:
        raise SyncPointContention(f"a SyncPoint report lost the compare-and-swap "
                                  f"{state.attempt_number} times")

    for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(CasLost),
            wait=_full_jitter(backoff_base, backoff_cap),
            stop=tenacity.stop_after_attempt(max_attempts), before_sleep=before_sleep,
            retry_error_callback=gave_up,
            sleep=lambda seconds: time.sleep(seconds)):  # looked up at each call
        yield Attempt(attempt, lock_after)


class _full_jitter(tenacity.wait.wait_base):
    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, cap

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return random.uniform(0, min(self.cap, self.base * 2 ** retry_state.attempt_number))


class Attempt:
    """One attempt of :func:`retrying`: a context manager (tenacity's) that
    says whether its read locks and what it may take as known."""

    def __init__(self, attempt: tenacity.AttemptManager, lock_after: int | None) -> None:
        self._attempt = attempt
        self.number = attempt.retry_state.attempt_number
        self.lock = lock_after is not None and self.number > lock_after
        self.first = self.number == 1  # a blind write is for it: a lost one read the point

    def __enter__(self) -> Attempt:
        self._attempt.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> bool | None:
        return self._attempt.__exit__(exc_type, exc, tb)


def sync(
    db: Database,
    entity_id: EntityId,
    traversal_id: str,
    is_update: bool,
    sender: str,
    data: JSONValue,
    required: Collection[str] = (),
    *,
    lock_after: int | None = LOCK_AFTER,
    max_attempts: int = MAX_ATTEMPTS,
    backoff_base: float = BACKOFF_BASE,
    backoff_cap: float = BACKOFF_CAP,
    known: Mapping[str, JSONValue] | None = None,
) -> SyncResult:
    """:func:`sync_tx` in a transaction of its own, retried as
    :func:`retrying` says: for a report that writes nothing else with it."""
    for attempt in retrying(lock_after, max_attempts, backoff_base, backoff_cap):
        with attempt, db.session() as session:
            result = sync_tx(session, entity_id, traversal_id, is_update, sender, data,
                             required, known, attempt.lock, attempt.first)
            return dataclasses.replace(result, attempts=attempt.number)
    raise AssertionError("unreachable: retrying raises when it gives up")
