"""Pool capacity as placed: what the shares and replicas put in a pool
take, read from the instances themselves, and the claim that makes a new
placement fit, race-free, in the transaction that writes it.

Nothing is counted twice or left behind: the allocation of a pool is the
sum of the sizes of its live instances (Manila's ``allocated_capacity_gb``,
kept by summing, not by a counter that a crash between a delete and its
decrement would leave wrong). A claim locks the backend's report row first
(``SELECT … FOR UPDATE`` on PostgreSQL and MariaDB; SQLite's write
transaction is exclusive already), so two placements in one backend's
pools are decided one after the other, each seeing the other's instance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import models, records
from sharemgr.db.engine import Database
from sqlalchemy.orm import Session


class NoRoom(Exception):
    """A claim that does not fit; nothing of its transaction is written."""

    def __init__(self, pool_host: str, size: float, room: float) -> None:
        super().__init__(f"{size:g} GiB does not fit in pool {pool_host!r}: "
                         f"{max(room, 0.0):g} GiB left")
        self.pool_host = pool_host
        self.size = size
        self.room = room


@dataclass(frozen=True)
class Limits:
    """What a pool may take, from its backend's last report: ``cap_gb``
    bounds what is allocated in it (its total less the reserve, times the
    over-subscription ratio when thin); ``free_gb`` is what the report left
    free after the reserve (times the ratio when thin), which placements
    made since the report use up. None: no bound known."""

    pool_host: str  # 'host@backend#pool'
    cap_gb: float | None
    free_gb: float | None
    reported_at: datetime | None


@dataclass(frozen=True)
class Usage:
    allocated_gb: float = 0.0  # live instances in the pool
    since_gb: float = 0.0  # of which made after the report


def room(limits: Limits, usage: Usage) -> float | None:
    """GiB the pool can still take (None: unbounded)."""
    rooms = []
    if limits.cap_gb is not None:
        rooms.append(limits.cap_gb - usage.allocated_gb)
    if limits.free_gb is not None:
        rooms.append(limits.free_gb - usage.since_gb)
    return min(rooms) if rooms else None


def _usage_stmt(hosts: list[str], since: datetime | None) -> records.Query:
    inst, share = models.ShareInstance.__table__, models.Share.__table__
    # An extend under way counts at the size it asks for.
    size = sa.case((sa.and_(inst.c.status == vocab.EXTENDING,
                            inst.c.pending_size > share.c.size), inst.c.pending_size),
                   else_=share.c.size)
    made_since = (sa.case((inst.c.created_at >= since, size), else_=0)
                  if since is not None else sa.literal(0))
    return (sa.select(inst.c.host, sa.func.coalesce(sa.func.sum(size), 0),
                      sa.func.coalesce(sa.func.sum(made_since), 0))
            .join(share, share.c.id == inst.c.share_id)
            .where(inst.c.host.in_(hosts), inst.c.status != vocab.DELETED)
            .group_by(inst.c.host))


def usage_tx(session: Session, hosts: Iterable[str], since: datetime | None
             ) -> dict[str, Usage]:
    """Each pool's usage (every pool of ``hosts`` present, 0 when empty)."""
    hosts = list(hosts)
    rows = cast("Iterable[tuple[str, float, float]]",
                session.execute(_usage_stmt(hosts, since)))
    found = {host: Usage(float(total), float(made)) for host, total, made in rows}
    return {host: found.get(host, Usage()) for host in hosts}


def usage(db: Database, hosts: Iterable[str], since: datetime | None) -> dict[str, Usage]:
    with db.reading() as session:
        return usage_tx(session, hosts, since)


@dataclass(frozen=True)
class Claim:
    """``size`` GiB more in a pool of ``backend_host`` ('host@backend')."""

    backend_host: str
    limits: Limits
    size: float


def claim_tx(session: Session, claim: Claim) -> None:
    """Make sure the claim fits, in the transaction that places it (before
    that transaction writes the instance).

    :raises NoRoom: it does not fit.
    """
    backend_host, limits, size = claim.backend_host, claim.limits, claim.size
    stats = models.BackendStats.__table__
    lock = sa.select(stats.c.host).where(stats.c.host == backend_host)
    if session.get_bind().dialect.name != "sqlite":
        lock = lock.with_for_update()
    session.execute(lock)
    left = room(limits, usage_tx(session, [limits.pool_host], limits.reported_at)
                [limits.pool_host])
    if left is not None and size > left:
        raise NoRoom(limits.pool_host, size, left)
