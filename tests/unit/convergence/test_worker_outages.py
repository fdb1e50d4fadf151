"""Stack checks that meet an outage of the database or the coordination
backend (tests/unit/stack_rig.py): the check is given back, never the
node's or the stack's failure (the other recoveries: test_worker_recovery.py)."""

from __future__ import annotations

import pytest
from sharemgr.reconcile.reconciler import Reconciler
from sqlalchemy import exc as sa_exc

from tests.unit.stack_rig import HOST, V1, _one_each, _status


@pytest.mark.parametrize("where", ["delete's driver call", "replacement's act"])
def test_an_outage_inside_a_check_gives_it_back_and_never_fails_the_stack(
        rig, monkeypatch, where):
    """The long many-host run's violation (doc/chaos.rst): a database
    failover closed a connection inside a node's check, and the stack's
    DELETE ended FAILED with "OperationalError: server closed the
    connection unexpectedly". An outage is not the node's failure: the check
    is given back (pending, not failed: the watchdog counts failed checks),
    nothing is marked FAILED, and once the database answers again the node
    runs again and the stack ends COMPLETE."""
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    away = sa_exc.OperationalError("SELECT 1", {}, Exception(
        "server closed the connection unexpectedly"))
    if where == "delete's driver call":  # the fast path, after its begin
        target, name, want = e.operations, "perform", ("DELETE", "COMPLETE")
        rig.start("web", "DELETE")
    else:  # the general path, before anything is written
        target, name, want = e.worker.actor, "act", ("UPDATE", "COMPLETE")
        rig.update("web", V1.replace("proto: NFS", "proto: CIFS"))
    real, cut = getattr(target, name), []

    def once(*args, **kwargs):
        if not cut:
            cut.append(name)
            raise away
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, once)
    e.pump()
    assert cut
    assert [r for r in rig.checks() if r.status == "failed"] == []
    assert all(r.status != "FAILED" for rows in rig.rows("web").values() for r in rows)
    assert _status(rig, "web") in ((want[0], "IN_PROGRESS"), want)
    # A delete cut after its begin left its snapshot 'deleting': the pass the
    # watchdog asks for settles it, then the watchdog retriggers the node.
    Reconciler(rig.db, e.drivers, e.coordinator, e.operations, HOST, e.engine_id, 2).run()
    for _ in range(3):
        e.watchdog.run_once()
        e.pump()
    assert _status(rig, "web") == want
    assert [r for r in rig.checks() if r.status == "failed"] == []
    if want[0] == "DELETE":
        assert rig.objects() == []
    else:
        assert _one_each(rig) == ["web-data", "web-snap"]


def test_a_report_that_meets_an_outage_says_so_in_one_line(caplog):
    """A batch's report transaction cut by a failover is written again step
    by step (doc/convergence.rst, "Batches"): one WARNING, as for a lost
    conflict, not an ERROR with a traceback (the long fault run, seed 5291,
    logged one per cut); anything else keeps its traceback."""
    import logging

    from sharemgr.convergence import ends_apart

    away = sa_exc.OperationalError("UPDATE sync_points", {}, Exception(
        "server closed the connection unexpectedly"))
    with caplog.at_level(logging.WARNING):
        ends_apart.split(away, "a report")
        ends_apart.split(ValueError("a bug"), "a report")
    (cut, bug) = caplog.records
    assert (cut.levelno, cut.exc_info) == (logging.WARNING, None)
    assert "met an outage" in cut.getMessage()
    assert bug.levelno == logging.ERROR and bug.exc_info is not None
