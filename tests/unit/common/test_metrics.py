"""Metrics and the overview queries: the open-requests collector and the
stuck-work count on SQLite, PostgreSQL and MariaDB; the hot-path metrics
moved by the code that owns them."""

from __future__ import annotations

import contextlib
import datetime

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from sharemgr.common import metrics, vocab
from sharemgr.db import api, models, sync_points
from sharemgr.db import status as db_status
from sharemgr.reconcile import summary as summary_mod

from tests.unit.reconcile_harness import (
    make_group,
    make_server,
    make_share,
    make_snapshot,
)


def _requests(db, rows: list[tuple[str | None, str]]) -> None:
    with db.session() as session:
        for i, (host, status) in enumerate(rows):
            req = api.request_add_tx(session, vocab.SHARE_INSTANCE, f"r{i}", "create", host)
            req.status = status


def _samples(registry) -> dict[tuple, float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_queue_collector_counts_open_requests_per_host(db):
    _requests(db, [("a@x", "pending"), ("a@x", "pending"), ("a@x", "running"),
                   ("b@y", "running"), (None, "pending"),
                   ("a@x", "done"), ("b@y", "failed"), ("c@z", "abandoned")])
    registry = metrics.daemon_registry(
        metrics.QueueCollector(lambda: db_status.request_counts(db), vocab.REQUEST_OPEN))
    got = {k: v for k, v in _samples(registry).items() if k[0] == "sharemgr_requests"}
    assert got == {
        ("sharemgr_requests", (("host", "a@x"), ("status", "pending"))): 2,
        ("sharemgr_requests", (("host", "a@x"), ("status", "running"))): 1,
        ("sharemgr_requests", (("host", "any"), ("status", "pending"))): 1,
        ("sharemgr_requests", (("host", "any"), ("status", "running"))): 0,
        ("sharemgr_requests", (("host", "b@y"), ("status", "pending"))): 0,
        ("sharemgr_requests", (("host", "b@y"), ("status", "running"))): 1,
    }
    # The shared metrics come along in the same exposition.
    text = generate_latest(registry).decode()
    assert "sharemgr_requests_running" in text and "sharemgr_sync_point_cas_retries_total" in text


def test_queue_collector_leaves_the_metric_out_when_the_count_fails(caplog):
    def broken():
        raise RuntimeError("database is down\nwith SQL after")

    registry = metrics.daemon_registry(metrics.QueueCollector(broken, vocab.REQUEST_OPEN))
    text = generate_latest(registry).decode()
    assert "sharemgr_requests{" not in text
    assert "sharemgr_requests_running" in text  # the rest still answers
    assert "could not count open requests: RuntimeError: database is down" in caplog.text


def _age(db, model, ident, minutes: int) -> None:
    old = models.utcnow() - datetime.timedelta(minutes=minutes)
    with db.session() as session:
        session.execute(sa.update(model).where(model.id == ident)
                        .values(created_at=old, updated_at=None))


def test_stuck_counts_by_type(db):
    old_share = make_share(db, vocab.CREATING)
    _age(db, models.ShareInstance, old_share.id, 60)
    old_ext = make_share(db, vocab.EXTENDING)
    _age(db, models.ShareInstance, old_ext.id, 45)
    make_share(db, vocab.CREATING)  # recent: not stuck
    done = make_share(db, vocab.AVAILABLE)  # old but not transient
    _age(db, models.ShareInstance, done.id, 60)
    gone = make_share(db, vocab.DELETING)  # deleted rows do not count
    _age(db, models.ShareInstance, gone.id, 60)
    with db.session() as session:
        session.execute(sa.update(models.ShareInstance)
                        .where(models.ShareInstance.id == gone.id)
                        .values(deleted_at=models.utcnow()))
    snap = make_snapshot(db, vocab.DELETING)
    _age(db, models.ShareSnapshotInstance, snap.id, 31)
    server = make_server(db, vocab.CREATING)
    _age(db, models.ShareServer, server.id, 10)  # under the threshold
    group = make_group(db, vocab.CREATING)
    _age(db, models.ShareGroup, group.id, 90)

    stuck = db_status.stuck_counts(db, datetime.timedelta(minutes=30))
    assert stuck == {vocab.SHARE_INSTANCE: 2, vocab.SNAPSHOT_INSTANCE: 1,
                     vocab.SHARE_GROUP: 1}
    assert db_status.stuck_counts(db, datetime.timedelta(minutes=5))[vocab.SHARE_SERVER] == 1
    # A later change (updated_at) restarts the clock.
    with db.session() as session:
        session.execute(sa.update(models.ShareGroup).where(models.ShareGroup.id == group.id)
                        .values(updated_at=models.utcnow()))
    assert vocab.SHARE_GROUP not in db_status.stuck_counts(db, datetime.timedelta(minutes=30))


def _value(metric, **labels) -> float:
    name = metric._name
    for family in metric.collect():
        for s in family.samples:
            if s.name in (name, f"{name}_total", f"{name}_count") and s.labels == labels:
                return s.value
    return 0.0


def test_a_lost_compare_and_swap_is_counted(sqlite_db, monkeypatch):
    before = _value(metrics.SYNC_POINT_CAS_RETRIES)
    real = sync_points.cas_tx
    calls = {"n": 0}

    def cas_losing_twice(*args, **kw):
        calls["n"] += 1
        return False if calls["n"] <= 2 else real(*args, **kw)

    monkeypatch.setattr(sync_points, "cas_tx", cas_losing_twice)
    monkeypatch.setattr(sync_points.time, "sleep", lambda _s: None)
    with sqlite_db.session() as session:
        stack_id = _stack(session)
        sync_points.create_tx(session, stack_id, "t1", [])
    result = sync_points.sync(sqlite_db, stack_id, "t1", True, "a", 1)
    assert result.found and result.attempts == 3
    assert _value(metrics.SYNC_POINT_CAS_RETRIES) == before + 2


def _stack(session) -> str:
    row = models.Stack(id=models.new_id(), name=f"s-{models.new_id()[:8]}",
                       action=vocab.STACK_CREATE, status=vocab.STACK_IN_PROGRESS)
    session.add(row)
    session.flush()
    return row.id


def test_a_pass_counts_its_outcomes_and_duration():
    summary = summary_mod.Summary()
    summary.outcome(vocab.SHARE_INSTANCE, vocab.ERROR)
    summary.outcome(vocab.SHARE_INSTANCE, vocab.ERROR)
    summary.outcome(vocab.SHARE_SERVER, vocab.ACTIVE)
    err = _value(metrics.RECONCILE_OUTCOMES, resource_type=vocab.SHARE_INSTANCE,
                 outcome=vocab.ERROR)
    passes = _value(metrics.RECONCILE_PASS_SECONDS, trigger="manual", result="finished")
    summary_mod.observe_pass("manual:42", "finished", summary, 0.5)
    assert _value(metrics.RECONCILE_OUTCOMES, resource_type=vocab.SHARE_INSTANCE,
                  outcome=vocab.ERROR) == err + 2
    assert _value(metrics.RECONCILE_PASS_SECONDS, trigger="manual",
                  result="finished") == passes + 1


@pytest.mark.parametrize("fails", [False, True])
def test_driver_calls_are_timed_by_backend_method_and_outcome(fails):
    from sharemgr.drivers import timing
    from sharemgr.drivers.base import ShareDriver

    class Backend(ShareDriver):
        def create_share(self, share, share_server=None):
            if fails:
                raise RuntimeError("backend said no")
            return []

    driver = timing.time_calls(Backend.__new__(Backend), "timed-backend")
    outcome = "error" if fails else "ok"
    before = _value(metrics.DRIVER_CALL_SECONDS, backend="timed-backend",
                    method="create_share", outcome=outcome)
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        driver.create_share({"id": "s1"})
    assert _value(metrics.DRIVER_CALL_SECONDS, backend="timed-backend",
                  method="create_share", outcome=outcome) == before + 1
    # What the class implements is still read from the class: it keeps the
    # base's delete_share and has its own create_share.
    from sharemgr.drivers import base
    from sharemgr.drivers.exceptions import OperationNotSupported
    base._delete_unsupported(driver, "delete_share", "delete_share")
    with pytest.raises(OperationNotSupported):
        base._delete_unsupported(driver, "create_share", "delete_share")


def test_traversals_are_counted_when_they_end(tmp_path):
    from tests.unit.stack_rig import V1, Rig

    def ended(action: str, status: str) -> float:
        return _value(metrics.TRAVERSAL_SECONDS, action=action, status=status)

    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_snapshot"}})
    try:
        e = rig.engine()
        complete, failed = ended("CREATE", "COMPLETE"), ended("CREATE", "FAILED")
        rig.create("plain", V1.replace("  snap: {type: snapshot, properties: "
                                       "{share: {get_resource: data}}}\n", ""))
        e.pump()
        assert (rig.stack("plain").action, rig.stack("plain").status) == ("CREATE", "COMPLETE")
        assert ended("CREATE", "COMPLETE") == complete + 1
        rig.create("web", V1, disable_rollback=True)
        e.pump()
        assert rig.stack("web").status == "FAILED"
        assert ended("CREATE", "FAILED") == failed + 1
        assert ended("CREATE", "COMPLETE") == complete + 1
    finally:
        rig.close()


def test_a_stale_request_is_kept_apart_from_a_done_one():
    from sharemgr.manager import runner

    kind = vocab.SHARE_INSTANCE
    labels = {"resource_type": kind, "action": "delete"}
    before = {o: _value(metrics.REQUEST_SECONDS, **labels, outcome=o)
              for o in ("done", "stale", "failed")}
    runner.observe(kind, "delete", vocab.REQUEST_DONE, None, 0.0)
    runner.observe(kind, "delete", vocab.REQUEST_DONE, "stale: share instance x is gone", 0.0)
    runner.observe(kind, "delete", vocab.REQUEST_FAILED, "delete failed: no", 0.0)
    assert {o: _value(metrics.REQUEST_SECONDS, **labels, outcome=o) - before[o]
            for o in before} == {"done": 1, "stale": 1, "failed": 1}
