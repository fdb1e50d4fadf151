"""Resource row locks (Heat's model): ``stack_resources.engine_id`` names
the engine working on the row, ``atomic_key`` counts lock changes. Acquire
is ``UPDATE ... SET engine_id=:me, atomic_key=atomic_key+1 WHERE id=:id AND
engine_id IS NULL``; a dead engine's lock is stolen with ``... WHERE
engine_id=:dead``; release clears it only if it is still ours. Release and
the holder's writes are conditional on ``engine_id`` alone, never on
``atomic_key``: Heat conditioned them on the key, so any other write that
bumped it made the release fail and left the resource looking locked forever.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sharemgr.db import api
from sharemgr.db.engine import Database
from sharemgr.db.retry import retry_on_conflict
from sharemgr.db.stacks import Resource, resource_update_tx
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class LockResult:
    acquired: bool
    holder: str | None  # the engine holding the lock now (us if acquired)
    atomic_key: int | None = None
    found: bool = True  # False: the row does not exist (purged)


def _lock_tx(
    session: Session, resource_id: int, engine_id: str, expected_holder: str | None
) -> LockResult:
    won = resource_update_tx(
        session,
        resource_id,
        {"engine_id": expected_holder},
        {"engine_id": engine_id, "atomic_key": api.PLUS_ONE},
    )
    row = session.execute(
        sa.select(Resource.engine_id, Resource.atomic_key).where(
            Resource.id == resource_id, Resource.deleted_at.is_(None)
        )
    ).first()
    if row is None:
        return LockResult(acquired=False, holder=None, found=False)
    return LockResult(acquired=won, holder=row.engine_id, atomic_key=row.atomic_key)


@retry_on_conflict
def resource_lock_acquire(db: Database, resource_id: int, engine_id: str) -> LockResult:
    """Take the row's lock if nobody holds it. On failure ``holder`` says who
    does (maybe this engine itself, from another thread: treat that as busy
    too), so the caller can check whether that engine is alive."""
    with db.session() as session:
        return _lock_tx(session, resource_id, engine_id, None)


@retry_on_conflict
def resource_lock_steal(
    db: Database, resource_id: int, engine_id: str, dead_engine_id: str | None
) -> LockResult:
    """Take the lock from ``dead_engine_id`` (the caller has checked it is not
    a member of the engine group; None: the lock was let go since the caller
    found it held); fails if anyone else holds it by now."""
    with db.session() as session:
        return _lock_tx(session, resource_id, engine_id, dead_engine_id)


@retry_on_conflict
def resource_lock_release(db: Database, resource_id: int, engine_id: str,
                          key: int | None = None) -> bool:
    """Release only if still ours (a lock stolen from us stays with the
    thief); ``key``: only if the lock still has that ``atomic_key`` (not
    taken again since, by another check of this engine)."""
    with db.session() as session:
        return resource_lock_release_tx(session, resource_id, engine_id, key)


# What releasing a row's lock writes: every lock change bumps the key.
RELEASED: api.Columns = {"engine_id": None, "atomic_key": api.PLUS_ONE}


def resource_lock_release_tx(session: Session, resource_id: int, engine_id: str,
                             key: int | None = None) -> bool:
    expected = {"engine_id": engine_id} if key is None else \
        {"engine_id": engine_id, "atomic_key": key}
    return api.conditional_update_tx(session, Resource, resource_id, expected, dict(RELEASED))

