"""What the stack watchdog reads and writes (db/stack_watch.py), on the
servers whose row locks a paused engine's transaction can hold."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import migration, stack_watch
from sharemgr.db import models as M
from sharemgr.db.engine import Database

DEAD = "host-c.3"


def _running_check(db, engine_id):
    with db.session() as session:
        req = M.Request(resource_type=vocab.STACK_RESOURCE, resource_id="1",
                        action=vocab.ACTION_CHECK, args={}, status=vocab.REQUEST_RUNNING,
                        engine_id=engine_id)
        session.add(req)
        session.flush()
        return req.id


@pytest.mark.parametrize("server", ["pg_url", "mysql_url"])
def test_abandoning_skips_a_check_a_paused_transaction_holds(request, server):
    """A dead engine's check whose row its engine's transaction still holds
    (paused inside its report) is skipped, not waited for: the stack
    watchdog shares its thread with the lease renewals and the other
    periodic tasks. The others are abandoned; the held one is, once free."""
    db = Database(request.getfixturevalue(server))
    try:
        migration.upgrade(db)
        held_id, free_id = _running_check(db, DEAD), _running_check(db, DEAD)
        lost = stack_watch.live_checks(db)
        result: list[tuple[int, set[int]]] = []
        with db.engine.connect() as paused:
            paused.begin()
            paused.execute(sa.update(M.Request).where(M.Request.id == held_id)
                           .values(error="reporting"))
            worker = threading.Thread(
                target=lambda: result.append(stack_watch.abandon_checks(db, lost, "dead")))
            worker.start()
            worker.join(60)
            done_while_held = bool(result)
            paused.rollback()
        worker.join()
        assert done_while_held, "abandoning waited for the paused transaction"
        assert result == [(1, {held_id})]
        statuses = {r.id: r.status for r in stack_watch.live_checks(db)}
        assert statuses == {held_id: vocab.REQUEST_RUNNING}
        assert stack_watch.abandon_checks(db, lost, "dead") == (1, set())
        assert free_id not in {r.id for r in stack_watch.live_checks(db)}
    finally:
        db.dispose()
