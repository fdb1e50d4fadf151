"""Conditions that no related row is busy, checked in the transaction that
starts an operation (doc/operations.rst, "One operation at a time per share").

A share's extend or shrink calls the driver on every replica, so it must
not start while a replica or a snapshot of the share is being made or
deleted, nor they while it runs. Reading the others' statuses before the
write leaves a window in which both start (a chaos run saw a replica's
delete and the share's shrink call the driver on the same replica at
once). So every plan of the family writes the share's row (the *anchor*,
:func:`anchor`: a bump of ``updated_at``, which takes its row lock on
PostgreSQL and MariaDB; SQLite's writers are serialised by ``BEGIN
IMMEDIATE``), and checks its :class:`Quiet` conditions after that write,
in the same transaction: two plans of one share then run one after the
other, and the second sees what the first committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa
from sharemgr.db import models
from sharemgr.db.engine import Database
from sqlalchemy.orm import Session


class Busy(Exception):
    """A :class:`Quiet` condition failed; the message says which."""


@dataclass(frozen=True)
class Quiet:
    """No row of ``model`` matching ``where`` (but the ids in ``but``) may
    be in one of ``statuses``; ``refusal`` is the message when one is, its
    ``{statuses}`` filled with the statuses found."""

    model: type[models.HasTable]
    where: Mapping[str, object]
    statuses: frozenset[str]
    refusal: str
    but: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Unheld:
    """No live group snapshot may hold share ``share_id`` (have it among
    its members); ``refusal`` as :class:`Quiet`'s, with the statuses of the
    group snapshots that do."""

    share_id: str
    refusal: str


Condition = Quiet | Unheld


def anchor(share_id: str, expect: dict[str, object] | None = None
           ) -> tuple[type[models.Share], str, dict[str, object], dict[str, object]]:
    """The change every plan of a share's family ends with (a
    ``db.api`` change: only ``updated_at`` set, on the condition
    ``expect``, none by default): the last write of the plan's transaction,
    so that its checks follow it, and in the order every other writer takes
    (instances, then the share)."""
    return (models.Share, share_id, dict(expect or {}), {})


_gs, _gm = models.ShareGroupSnapshot.__table__, models.ShareGroupSnapshotMember.__table__
_HOLDING = (sa.select(_gs.c.status).distinct()
            .select_from(_gs.join(_gm, _gm.c.share_group_snapshot_id == _gs.c.id))
            .where(_gm.c.share_id == sa.bindparam("share"), _gs.c.deleted_at.is_(None)))


def busy_tx(session: Session, quiet: Condition) -> list[str]:
    if isinstance(quiet, Unheld):
        return sorted(session.scalars(_HOLDING, {"share": quiet.share_id}))
    c = quiet.model.__table__.c
    stmt = (sa.select(c.status).distinct()
            .where(*[c[k] == v for k, v in quiet.where.items()],
                   c.status.in_(sorted(quiet.statuses))))
    if quiet.but:
        stmt = stmt.where(c.id.not_in(quiet.but))
    return sorted(session.scalars(stmt))


def check_tx(session: Session, conditions: Iterable[Condition]) -> None:
    """Raise :class:`Busy` with the first failed condition's message."""
    for quiet in conditions:
        found = busy_tx(session, quiet)
        if found:
            raise Busy(quiet.refusal.format(statuses=", ".join(found)))


def check(db: Database, conditions: Iterable[Condition]) -> None:
    """:func:`check_tx` in a reading transaction of its own (a plan's early
    answer; the writing transaction checks again)."""
    with db.reading() as session:
        check_tx(session, conditions)
