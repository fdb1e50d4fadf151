"""Adding an operation is one entry in the operation table (doc/design.rst,
"The operation table"): a toy one — a share server's network change, which
the real table only knows as a status set from outside — given a driver
method and its arguments, is dispatched, carried out, failed and settled
after a crash by the engine's real parts, with nothing else written for it.
The derived tables (the handlers, the reconciliation rules) are built from
the table as the modules build them at import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import driver_args, handlers, operation_table, views
from sharemgr.manager.operation_table import Spec, mark
from sharemgr.manager.operations import Operations
from sharemgr.manager.plans import Op
from sharemgr.reconcile import rules
from sharemgr.reconcile.reconciler import Reconciler

from tests.unit.reconcile_harness import (
    BACKEND,
    HOST,
    HOSTBE,
    Engine,
    FakeDriver,
    coord_url,
    make_server,
)

ACTION = "network_change"  # the action of the status it moves through
TOY = Spec(vocab.SHARE_SERVER, ACTION, "network change", (vocab.SERVER_NETWORK_CHANGE,),
           mark(vocab.ERROR), (vocab.ACTIVE,), vocab.ACTIVE, vocab.ERROR,
           method="update_network_allocations")


class ToyDriver(FakeDriver):
    def __init__(self) -> None:
        super().__init__(dhss=True)
        self.fails = False

    def update_network_allocations(self, server: dict) -> None:
        self._record("update_network_allocations", server["id"])
        if self.fails:
            raise RuntimeError("the network is unreachable")


@pytest.fixture
def toy(sqlite_db, tmp_path, monkeypatch) -> Iterator[tuple[Operations, Reconciler, ToyDriver]]:
    # The entry, replacing the status-only spec of the same key ...
    table = tuple(TOY if s.key == TOY.key else s for s in operation_table.TABLE)
    monkeypatch.setattr(operation_table, "TABLE", table)
    monkeypatch.setitem(operation_table.SPECS, TOY.key, TOY)
    # ... and what its driver method is passed.
    monkeypatch.setitem(driver_args.ARGS, TOY.key, lambda db, op, row, read: (views.server(row),))
    monkeypatch.setattr(rules, "RULES", rules.rules_of(table))
    driver = ToyDriver()
    eng = Engine(sqlite_db, coord_url(tmp_path), drivers={BACKEND: driver})
    drivers = cast(dict[str, ShareDriver], {BACKEND: driver})  # a fake, as the harness's
    ops = Operations(sqlite_db, drivers, eng.coordinator, eng.engine_id,
                     handlers.handlers_of(table))
    rec = Reconciler(sqlite_db, drivers, eng.coordinator, ops, HOST, eng.engine_id, 1)
    try:
        yield ops, rec, driver
    finally:
        eng.close()


def _started(db, server: models.ShareServer) -> Op:
    """What the operation's plan writes: the server in its transient status."""
    assert api.conditional_update(db, models.ShareServer, server.id, {"status": vocab.ACTIVE},
                                  {"status": vocab.SERVER_NETWORK_CHANGE})
    return Op(vocab.SHARE_SERVER, server.id, ACTION, HOSTBE)


def test_a_new_table_entry_is_carried_out(sqlite_db, toy):
    ops, _rec, driver = toy
    assert (vocab.SHARE_SERVER, ACTION) not in handlers.HANDLERS  # not carried without it
    server = make_server(sqlite_db, vocab.ACTIVE)
    done = ops.perform(_started(sqlite_db, server))
    assert done.result is Result.DONE
    assert api.get(sqlite_db, models.ShareServer, server.id).status == vocab.ACTIVE
    assert driver.calls == [("update_network_allocations", server.id)]


def test_its_failure_writes_the_spec_s_error_status(sqlite_db, toy):
    ops, _rec, driver = toy
    driver.fails = True
    server = make_server(sqlite_db, vocab.ACTIVE)
    failed = ops.perform(_started(sqlite_db, server))
    assert failed.result is Result.FAILED and "the network is unreachable" in (failed.reason or "")
    assert api.get(sqlite_db, models.ShareServer, server.id).status == vocab.ERROR


def test_a_crash_inside_it_is_settled_by_the_spec_s_rule(sqlite_db, toy):
    _ops, rec, driver = toy
    assert rules.RULES[vocab.SHARE_SERVER][vocab.SERVER_NETWORK_CHANGE] is TOY.settle
    server = make_server(sqlite_db, vocab.SERVER_NETWORK_CHANGE)
    plan = rec.run("manual:1", dry_run=True)["plan"]
    assert [(p["id"], p["action"], p["outcome"]) for p in plan] == [
        (server.id, "mark", vocab.ERROR)]
    rec.run()
    assert api.get(sqlite_db, models.ShareServer, server.id).status == vocab.ERROR
    assert driver.calls == []
