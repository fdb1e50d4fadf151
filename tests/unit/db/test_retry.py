"""Transactions the database ends for a deadlock are run again
(db/retry.py): two transactions that update two rows in opposite orders
deadlock for real on PostgreSQL and MariaDB; the one the server ends runs
again and both changes land. SQLite's write transactions never interleave."""

from __future__ import annotations

import threading
from concurrent import futures

import pytest
import sqlalchemy as sa
from sharemgr.db import models
from sharemgr.db.retry import Policy, is_conflict, retry_on_conflict


@retry_on_conflict
def _update_both(db, first: str, second: str, value: str, both_in: threading.Barrier,
                 tries: list) -> None:
    tries.append(value)
    table = models.Share.__table__
    with db.session() as session:
        session.execute(sa.update(table).where(table.c.id == first).values(name=value))
        if len(tries) <= 2:  # the first tries of both meet here, each holding one row
            both_in.wait(30)
        session.execute(sa.update(table).where(table.c.id == second).values(name=value))


def test_a_deadlocked_transaction_runs_again(db):
    if db.dialect == "sqlite":
        pytest.skip("SQLite's write transactions never interleave: no deadlock to lose")
    db.retry = Policy(max_retries=5, interval=0.05, max_interval=0.2)
    with db.session() as session:
        session.add_all([models.Share(id="a", size=1, share_proto="NFS"),
                         models.Share(id="b", size=1, share_proto="NFS")])
    both_in, tries = threading.Barrier(2), []
    with futures.ThreadPoolExecutor(2) as pool:
        done = [pool.submit(_update_both, db, "a", "b", "ab", both_in, tries),
                pool.submit(_update_both, db, "b", "a", "ba", both_in, tries)]
        for f in done:
            f.result(60)
    # One of the two lost the deadlock and ran again: three tries in all.
    assert len(tries) == 3, tries
    with db.reading() as session:
        names = {s.id: s.name for s in session.scalars(sa.select(models.Share))}
    assert names["a"] == names["b"] == tries[-1]


def test_only_conflicts_are_retried(db):
    calls = []

    @retry_on_conflict
    def broken(database) -> None:
        calls.append(1)
        with database.session() as session:
            session.execute(sa.text("SELECT * FROM no_such_table"))

    db.retry = Policy(max_retries=5, interval=0.01)
    with pytest.raises(sa.exc.DBAPIError) as info:
        broken(db)
    assert not is_conflict(info.value) and calls == [1]


class _Deadlock(Exception):
    pgcode = "40P01"


def test_tries_and_waits_are_counted_from_the_first_try():
    """The first try runs outside tenacity (it costs less so): a conflict
    there still counts as the first of ``max_retries + 1`` tries."""
    class Db:
        retry = Policy(max_retries=2, interval=0.001, max_interval=0.002)

    tries: list[int] = []

    @retry_on_conflict
    def losing(database, lose: int) -> int:
        tries.append(1)
        if len(tries) <= lose:
            raise sa.exc.DBAPIError("UPDATE shares", {}, _Deadlock("deadlock detected"))
        return len(tries)

    assert losing(Db(), 2) == 3  # two lost, the third (the last allowed) lands
    tries.clear()
    with pytest.raises(sa.exc.DBAPIError) as info:
        losing(Db(), 3)
    assert is_conflict(info.value) and len(tries) == 3
    tries.clear()
    assert losing(Db(), 0) == 1
