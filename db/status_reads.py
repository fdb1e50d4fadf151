"""The status of a share or a snapshot as a user sees it: the resource with
its (primary) instance, read in ONE statement on plain tables (SQLAlchemy
Core, no ORM session): ``sharectl``'s listings and shows, and the stacks'
observations of what they made.

One statement, because a delete removes the last instance and the share (or
the snapshot) in one transaction: two reads (the share, then its instance)
could fall on either side of it and see a live share without an instance,
which sharectl shows as ``error`` (a ``delete --wait`` then failed with
"ended in status error").

Plain tables, because these are the reads of ``sharectl share list`` and
``share show``: importing the ORM and mapping the models is a third of such
a call (doc/performance.rst). The records are read-only attribute bags with
one attribute per column, like the mapped classes' rows (db/records.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import tables as t
from sharemgr.db.engine import Database
from sharemgr.db.records import Query, Record, pair
from sqlalchemy.orm import Session


def _live_primary_of_share() -> sa.ColumnElement[bool]:
    """Join condition: the share's live instances that are not secondary replicas."""
    si = t.share_instances
    return sa.and_(si.c.share_id == t.shares.c.id, si.c.deleted_at.is_(None),
                   sa.or_(si.c.replica_state.is_(None), si.c.replica_state == vocab.REPLICA_ACTIVE))


def _live_instance_of_snapshot() -> sa.ColumnElement[bool]:
    ssi = t.share_snapshot_instances
    return sa.and_(ssi.c.snapshot_id == t.share_snapshots.c.id, ssi.c.deleted_at.is_(None))


def _one(db: Database, stmt: Query, params: dict[str, object], parent: sa.Table, child: sa.Table
         ) -> tuple[Record, Record | None] | None:
    with db.connect() as conn:
        row = conn.execute(stmt, params).first()
    return None if row is None else pair(row, parent, child)


def _all(db: Database, stmt: Query, parent: sa.Table, child: sa.Table
         ) -> list[tuple[Record, Record | None]]:
    """Rows ordered by parent then child: the first child of each parent,
    in the parents' order."""
    with db.connect() as conn:
        rows = conn.execute(stmt).all()
    seen: dict[str, tuple[Record, Record | None]] = {}
    for row in rows:
        parent_id = row._mapping[parent.c.id]
        if parent_id not in seen:
            seen[parent_id] = pair(row, parent, child)
    return list(seen.values())


def _shares() -> Query:
    s, si = t.shares, t.share_instances
    return (sa.select(s, si).select_from(s.outerjoin(si, _live_primary_of_share()))
            .where(s.c.deleted_at.is_(None)))


def _snapshots() -> Query:
    sn, ssi = t.share_snapshots, t.share_snapshot_instances
    return (sa.select(sn, ssi).select_from(sn.outerjoin(ssi, _live_instance_of_snapshot()))
            .where(sn.c.deleted_at.is_(None)))


# One resource by id, built once with a parameter: a stack observes each
# share it makes with this read.
_SHARE = (_shares().where(t.shares.c.id == sa.bindparam("id"))
          .order_by(t.share_instances.c.created_at, t.share_instances.c.id).limit(1))
_SNAPSHOT = (_snapshots().where(t.share_snapshots.c.id == sa.bindparam("id"))
             .order_by(t.share_snapshot_instances.c.created_at,
                       t.share_snapshot_instances.c.id).limit(1))


def share_with_status(db: Database, share_id: str) -> tuple[Record, Record | None] | None:
    """A live share with its primary instance, or None."""
    return _one(db, _SHARE, {"id": share_id}, t.shares, t.share_instances)


def shares_with_status(db: Database) -> list[tuple[Record, Record | None]]:
    """Every live share with its primary instance."""
    s, si = t.shares, t.share_instances
    return _all(db, _shares().order_by(s.c.created_at, s.c.id, si.c.created_at, si.c.id),
                s, si)


def snapshot_with_status(db: Database, snapshot_id: str
                         ) -> tuple[Record, Record | None] | None:
    """A live snapshot with its instance, or None."""
    return _one(db, _SNAPSHOT, {"id": snapshot_id}, t.share_snapshots,
                t.share_snapshot_instances)


def snapshots_with_status(db: Database) -> list[tuple[Record, Record | None]]:
    """Every live snapshot with its instance."""
    sn, ssi = t.share_snapshots, t.share_snapshot_instances
    return _all(db, _snapshots().order_by(sn.c.created_at, sn.c.id, ssi.c.created_at,
                                          ssi.c.id), sn, ssi)


def shares_with_status_by_id(db: Database, share_ids: Iterable[str]
                             ) -> dict[str, tuple[Record, Record | None]]:
    """``shares_with_status_tx`` in a read transaction of its own (a
    stack's update preview observes its shares in bulk)."""
    with db.connect() as conn:
        return shares_with_status_tx(conn, share_ids)  # type: ignore[arg-type]


# What an observation of a share reads (``kinds.observe_rows``): the bulk
# reads below take these columns only, as reading every column of 10,000
# shares and instances spent most of its time parsing their timestamps.
_SEEN = {"shares": ("id", "name", "size", "share_proto"),
         "share_instances": ("id", "share_id", "status", "host", "export_locations",
                             "replica_state")}


def shares_with_status_tx(session: Session, share_ids: Iterable[str], chunk: int = 500
                          ) -> dict[str, tuple[Record, Record | None]]:
    """Live shares by id with their primary instance, in the caller's
    transaction: a statement per ``chunk`` ids (a traversal's preparation
    observes a stack's shares in bulk). The records hold the columns an
    observation reads (``_SEEN``), not every column."""
    ids = list(dict.fromkeys(share_ids))
    s, si = t.shares, t.share_instances
    parent = [s.c[n] for n in _SEEN["shares"]]
    child = [si.c[n] for n in _SEEN["share_instances"]]
    base = (sa.select(*parent, *child).select_from(s.outerjoin(si, _live_primary_of_share()))
            .where(s.c.deleted_at.is_(None)))
    out: dict[str, tuple[Record, Record | None]] = {}
    for i in range(0, len(ids), chunk):
        stmt = base.where(s.c.id.in_(ids[i:i + chunk])).order_by(
            s.c.id, si.c.created_at, si.c.id)
        for row in session.execute(stmt):
            share_id = row[0]
            if share_id not in out:
                out[share_id] = (Record(**{c.name: row[k] for k, c in enumerate(parent)}),
                                 None if row[len(parent)] is None else
                                 Record(**{c.name: row[len(parent) + k]
                                           for k, c in enumerate(child)}))
    return out
