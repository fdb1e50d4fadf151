"""Honest pool capacity (db/capacity.py, the planners' claims): what is
placed counts at once, the reserve and over-subscription bound a pool, and
concurrent placements cannot overcommit it. On SQLite, PostgreSQL and
MariaDB."""

from __future__ import annotations

import threading
from concurrent import futures

import pytest
from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db import capacity as db_capacity
from sharemgr.manager import capabilities, config
from sharemgr.manager.intake import Intake, InvalidRequest

HOST = "hostA@dummy"


def _intake(db, tmp_path) -> Intake:
    path = tmp_path / "sharemgr.conf"
    path.write_text("[DEFAULT]\nhost = hostA\nenabled_share_backends = dummy\n")
    return Intake(db, config.load([], config_file=str(path), conf=cfg.ConfigOpts()))


def _report(db, **pool) -> None:
    db_capabilities.save(db, HOST, {"pools": [{"pool_name": "p", "total_capacity_gb": 100,
                                               "free_capacity_gb": 100, **pool}]}, "e")
    db_capabilities._cache.clear()  # as another process would read it


def _allocated(db) -> float:
    return db_capacity.usage(db, [f"{HOST}#p"], None)[f"{HOST}#p"].allocated_gb


def test_placements_count_at_once_and_deletes_give_room_back(db, tmp_path):
    intake = _intake(db, tmp_path)
    _report(db)
    first = intake.create_share(60, "NFS")
    with pytest.raises(InvalidRequest, match="the most free is 40 GiB, in pool 'p'"):
        intake.create_share(60, "NFS")  # the report still says 100 free
    assert _allocated(db) == 60
    # An extend claims its difference; a deleted instance frees its size.
    (inst,) = api.query(db, models.ShareInstance, {"share_id": first.id})
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    with pytest.raises(InvalidRequest, match="extend share .* 41 GiB is more than the 40"):
        intake.resize_share(first.id, 101, extend=True)
    # An extend under way counts at its new size until it ends.
    intake.resize_share(first.id, 90, extend=True)
    assert _allocated(db) == 90
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    assert _allocated(db) == 60  # it failed or the backend kept the old size
    api.conditional_update(db, models.ShareInstance, inst.id, {},
                           {"status": vocab.DELETED, "deleted_at": models.utcnow()})
    assert _allocated(db) == 0
    intake.create_share(100, "NFS")


def test_the_reserve_and_over_subscription_bound_a_pool(db, tmp_path):
    intake = _intake(db, tmp_path)
    _report(db, reserved_percentage=10)
    with pytest.raises(InvalidRequest, match="the most free is 90 GiB"):
        intake.create_share(91, "NFS")
    # Thin: (total - reserve) x ratio may be allocated, and the free space
    # reported, less the reserve, times the ratio.
    _report(db, reserved_percentage=10, thin_provisioning=True,
            max_over_subscription_ratio=2.0, free_capacity_gb=50)
    intake.create_share(80, "NFS")
    with pytest.raises(InvalidRequest, match="the most free is 0 GiB"):
        intake.create_share(1, "NFS")  # (50 - 10) x 2 = 80 since the report
    _report(db, reserved_percentage=10, thin_provisioning=True,
            max_over_subscription_ratio=2.0, free_capacity_gb=100)
    intake.create_share(100, "NFS")  # 180 = (100 - 10) x 2 allocated
    with pytest.raises(InvalidRequest, match="the most free is 0 GiB"):
        intake.create_share(1, "NFS")


def test_the_backend_groups_options_win_over_the_report():
    class Conf:
        reserved_percentage = 20
        max_over_subscription_ratio = None

    stats = capabilities.with_options(
        {"pools": [{"pool_name": "p", "reserved_percentage": 0}]}, Conf())
    assert stats["pools"] == [{"pool_name": "p", "reserved_percentage": 20}]
    pool = capabilities.Report(HOST, stats).pools[0]
    assert pool.reserved_percentage == 20 and pool.ratio == 20.0 and not pool.thin


def test_concurrent_placements_cannot_overcommit(db, tmp_path):
    """Three 60 GiB creates at once in a 100 GiB pool: each planned from the
    same report, one fits; the others are refused, nothing of theirs
    written."""
    intake = _intake(db, tmp_path)
    _report(db)
    start = threading.Barrier(3)

    def create() -> str:
        start.wait()
        try:
            return intake.create_share(60, "NFS").id
        except InvalidRequest as exc:
            return str(exc)

    with futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _i: create(), range(3)))
    made = [r for r in results if not r.startswith("cannot")]
    assert len(made) == 1, results
    assert _allocated(db) == 60
    assert len(api.query(db, models.Share)) == 1


def test_a_claim_waits_for_the_placement_before_it(db):
    """The claim's lock: a second claim in the same backend decides after
    the first transaction commits, and sees its instance."""
    _report(db)
    limits = capabilities.report(db, HOST).pools[0].limits(HOST, None)
    claim = db_capacity.Claim(HOST, limits, 60)
    inside, go_on = threading.Event(), threading.Event()

    def first() -> None:
        with db.session() as session:
            db_capacity.claim_tx(session, claim)
            share = models.Share(id=models.new_id(), size=60, share_proto="NFS")
            session.add(share)
            session.flush()
            session.add(models.ShareInstance(id=models.new_id(), share_id=share.id,
                                             host=f"{HOST}#p", status=vocab.CREATING,
                                             export_locations=[]))
            session.flush()
            inside.set()
            go_on.wait(30)

    with futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(first)
        assert inside.wait(30)
        timer = threading.Timer(0.5, go_on.set)
        timer.start()
        with pytest.raises(db_capacity.NoRoom), db.session() as session:
            db_capacity.claim_tx(session, claim)
        done.result()
        timer.join()


def test_the_refresh_stores_the_backend_groups_reserve(sqlite_db, tmp_path):
    """[backend] reserved_percentage and max_over_subscription_ratio reach
    the stored report through the engine's refresh of a real driver."""
    from sharemgr.drivers.dummy import DummyDriver
    from sharemgr.drivers.testing import build_driver

    drv = build_driver(DummyDriver, tmp_path, setup=True, dummy_pools={"p": 100},
                       reserved_percentage=25, max_over_subscription_ratio=3.0)
    assert capabilities.refresh(sqlite_db, HOST, drv, "e1")
    db_capabilities._cache.clear()
    (pool,) = capabilities.report(sqlite_db, HOST).pools
    assert (pool.reserved_percentage, pool.ratio, pool.thin) == (25, 3.0, False)
    (state,) = capabilities.pool_states(sqlite_db)
    assert (state.host, state.allocated_gb, state.room_gb) == (f"{HOST}#p", 0.0, 75.0)
