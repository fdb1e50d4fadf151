"""Reads that engines make while others write begin as reads.

On SQLite a transaction begun ``IMMEDIATE`` holds the one write lock from
its first statement. The reconciliation pass read the open requests in
such a transaction: an engine frozen (SIGSTOP) while inside it held every
other engine's writes up, and the other engine's own pass failed with
"database is locked" (tests/functional/test_pauses.py, seen in CI). Every
read-only query below must begin ``DEFERRED``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sharemgr.db import api, capabilities, engine, models, services, stack_work
from sharemgr.db import leases as db_leases
from sharemgr.db import messages as db_messages
from sharemgr.db import reconcile as db_reconcile
from sqlalchemy import event

READS: dict[str, Callable[[engine.Database], object]] = {
    "open_requests": lambda db: db_reconcile.open_requests(db, ["h@dummy"]),
    "expired_leases": lambda db: db_leases.expired_leases(db, ["h@dummy"]),
    "last_request_args": lambda db: db_reconcile.last_request_args(db, "share", "s", "delete"),
    "passes": lambda db: db_reconcile.passes(db),
    "request_list": lambda db: api.request_list(db, resource_id="s"),
    "all_stats": capabilities.all_stats,
    "message_list": lambda db: db_messages.message_list(db, resource_id="s"),
    "message_get": lambda db: db_messages.message_get(db, "m"),
    "service_backends": lambda db: services.service_backends(db, ["e1"]),
    "stack_requests": lambda db: stack_work.stack_requests(db, "st"),
}


@pytest.fixture
def begins(sqlite_db: engine.Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        if statement.startswith("BEGIN"):
            seen.append(statement)

    event.listen(sqlite_db.engine, "before_cursor_execute", record)
    yield seen
    event.remove(sqlite_db.engine, "before_cursor_execute", record)


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_begins_deferred(sqlite_db, begins, name):
    with sqlite_db.session() as session:
        session.add(models.Request(resource_type="share", resource_id="s", action="delete",
                                   host="h@dummy", status="pending"))
    begins.clear()
    READS[name](sqlite_db)
    assert begins and all(b == "BEGIN DEFERRED" for b in begins), begins


def test_a_re_read_that_takes_and_leases_nothing_begins_deferred(sqlite_db, begins):
    """``read_and_lease`` with no take and no lease to write (a row inserted
    taken, with its request's lease: a stack's create; ``Operations.fresh``
    without a take) writes nothing: it neither queues behind the other
    writers nor holds them up. One that has a lease to write writes it."""
    share = models.Share(size=1, share_proto="NFS", name="s")
    with sqlite_db.session() as session:
        session.add(share)
        session.flush()
        session.add(models.ShareInstance(id="i", share_id=share.id, host="h@dummy",
                                         status="creating"))
    begins.clear()
    row, _, leased = db_leases.read_and_lease(sqlite_db, models.ShareInstance, "i", "e1",
                                              {"creating": None})
    assert row is not None and row.status == "creating" and leased == 0
    assert begins == ["BEGIN DEFERRED"]

    class Terms:
        until, deadline = 60.0, 600.0

    begins.clear()
    row, _, leased = db_leases.read_and_lease(sqlite_db, models.ShareInstance, "i", "e1",
                                              {"creating": Terms()})
    assert row is not None and begins == ["BEGIN DEFERRED", "BEGIN IMMEDIATE"]
