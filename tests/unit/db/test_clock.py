"""The database's clock (db/clock.py): ``now`` and ``after(seconds)``
computed by the server, comparable with the times SQLAlchemy writes, on
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sharemgr.db import clock, models


def test_now_and_after_are_the_servers_time_in_the_columns_format(db):
    before = models.utcnow()
    now = clock.read(db)
    # The servers here run on this machine: their clock is this one.
    assert abs((now - before).total_seconds()) < 5
    with db.reading() as session:
        later = session.scalar(sa.select(clock.after(sa.bindparam("s"))), {"s": 2.5})
        earlier = session.scalar(sa.select(clock.after(sa.literal(-1.25))))
        ordered = session.scalar(sa.select(clock.now() < clock.after(sa.literal(0.5))))
        written = clock.read_tx(session)
    assert 2.4 < (later - now).total_seconds() < 60
    assert -1.2 > (earlier - written).total_seconds() > -60
    assert ordered


def test_a_time_written_by_the_server_compares_with_one_written_by_python(db):
    """On SQLite both are text: the server's milliseconds are written with
    six digits, so text order is time order."""
    from sharemgr.common import vocab

    row = models.Request(resource_type=vocab.SHARE, resource_id="r", action="create",
                         host=None, status=vocab.REQUEST_RUNNING, engine_id="e", args={},
                         lease_expires_at=models.utcnow() - datetime.timedelta(seconds=1))
    with db.session() as session:
        session.add(row)
    table = models.Request.__table__
    with db.reading() as session:
        assert session.scalar(sa.select(sa.func.count()).where(
            table.c.lease_expires_at < clock.now())) == 1
        assert session.scalar(sa.select(sa.func.count()).where(
            table.c.lease_expires_at < clock.after(sa.literal(-30)))) == 0
