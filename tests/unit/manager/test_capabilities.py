"""Backend capabilities and pools: the backend_stats rows (every database),
the planners' refusals and pool choice, the refresh, the dummy driver's
report and the loader's DHSS check."""

from __future__ import annotations

import logging

import pytest
from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.db import capabilities as db_capabilities
from sharemgr.drivers import loader
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.testing import build_driver
from sharemgr.manager import capabilities, config, plans
from sharemgr.manager.intake import Intake, InvalidRequest

HOST = "hostA@dummy"

FULL = {
    "share_backend_name": "dummy", "vendor_name": "sharemgr",
    "driver_handles_share_servers": False, "snapshot_support": True,
    "create_share_from_snapshot_support": True, "replication_type": "readable",
    "share_group_support": True,
}


def pools(**free: int | str) -> list[dict]:
    return [{"pool_name": name, "total_capacity_gb": 100, "free_capacity_gb": gb}
            for name, gb in free.items()]


# The db module, on SQLite, PostgreSQL and MariaDB ---------------------------------


def test_save_inserts_then_replaces_and_lists(db):
    assert db_capabilities.get(db, HOST) is None
    db_capabilities.save(db, HOST, {**FULL, "pools": pools(a=5)}, "engine-1")
    first = db_capabilities.get(db, HOST)
    assert first.stats["pools"][0]["free_capacity_gb"] == 5 and first.engine_id == "engine-1"
    assert first.updated_at is not None
    db_capabilities.save(db, HOST, {"snapshot_support": False}, "engine-2")
    db_capabilities.save(db, "hostA@other", {}, "engine-2")
    again = db_capabilities.get(db, HOST)
    assert again.stats == {"snapshot_support": False} and again.engine_id == "engine-2"
    assert again.updated_at >= first.updated_at
    assert [r.host for r in db_capabilities.all_stats(db)] == ["hostA@dummy", "hostA@other"]


def test_report_is_read_by_backend_without_pool(db):
    db_capabilities.save(db, HOST, {**FULL, "pools": pools(a=5, b="infinite")}, "e")
    report = capabilities.report(db, f"{HOST}#a")
    assert report.backend == "dummy"
    assert [(p.name, p.free_gb) for p in report.pools] == [("a", 5.0), ("b", None)]
    assert capabilities.report(db, "hostA@nothing") is None


# The planners --------------------------------------------------------------------


@pytest.fixture
def intake(sqlite_db, tmp_path):
    path = tmp_path / "sharemgr.conf"
    path.write_text("[DEFAULT]\nhost = hostA\nenabled_share_backends = dummy\n")
    return Intake(sqlite_db, config.load([], config_file=str(path), conf=cfg.ConfigOpts()))


def report(db, **stats) -> None:
    db_capabilities.save(db, HOST, {**FULL, **stats}, "test-engine")


def written(db) -> tuple[int, ...]:
    return tuple(len(api.query(db, m)) for m in (
        models.Share, models.ShareInstance, models.ShareSnapshot, models.ShareGroup,
    )) + (len(api.request_list(db)),)


def available_share(intake, db, size: int = 1) -> tuple[models.Share, models.ShareInstance]:
    share = intake.create_share(size, "NFS")
    inst = api.query(db, models.ShareInstance, {"share_id": share.id})[0]
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    return share, api.get(db, models.ShareInstance, inst.id)


def refused(db, call, *words: str) -> None:
    before = written(db)
    with pytest.raises(InvalidRequest) as info:
        call()
    for word in words:
        assert word in str(info.value), str(info.value)
    assert written(db) == before


def test_no_report_or_an_empty_one_changes_nothing(intake, sqlite_db):
    share, inst = available_share(intake, sqlite_db)
    assert inst.host == HOST
    intake.create_snapshot(share.id)
    db_capabilities.save(sqlite_db, HOST, {}, "e")
    share, inst = available_share(intake, sqlite_db, size=5000)
    assert inst.host == HOST
    intake.create_replica(share.id)


def test_a_report_without_pools_places_on_the_backend(intake, sqlite_db):
    report(sqlite_db, pools=[])
    _, inst = available_share(intake, sqlite_db, size=5000)
    assert inst.host == HOST


def test_snapshot_refused_without_snapshot_support(intake, sqlite_db):
    share, _ = available_share(intake, sqlite_db)
    report(sqlite_db, snapshot_support=False)
    refused(sqlite_db, lambda: intake.create_snapshot(share.id),
            f"cannot snapshot share {share.id}", "backend 'dummy'", "snapshot_support")
    report(sqlite_db)
    assert intake.create_snapshot(share.id).share_id == share.id


def test_share_from_snapshot_refused_without_support(intake, sqlite_db):
    share, inst = available_share(intake, sqlite_db)
    snap = intake.create_snapshot(share.id)
    snap_inst = api.query(sqlite_db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0]
    api.conditional_update(sqlite_db, models.ShareSnapshotInstance, snap_inst.id, {},
                           {"status": vocab.AVAILABLE})
    report(sqlite_db, create_share_from_snapshot_support=False)
    refused(sqlite_db, lambda: intake.create_share(1, "NFS", snapshot_id=snap.id),
            f"create a share from snapshot {snap.id}", "create_share_from_snapshot_support")


def test_replica_refused_without_replication(intake, sqlite_db):
    share, _ = available_share(intake, sqlite_db)
    report(sqlite_db, replication_type=None)
    refused(sqlite_db, lambda: intake.create_replica(share.id),
            f"cannot replicate share {share.id}", "replication_type is None")


def test_a_protocol_the_backend_does_not_serve_is_refused(intake, sqlite_db):
    """A CEPHFS-only backend took an NFS request, and its driver then failed
    it: the share ended in error. Refused at intake, nothing written."""
    report(sqlite_db, storage_protocol="CEPHFS")
    refused(sqlite_db, lambda: intake.create_share(1, "NFS"),
            "cannot create a NFS share", "backend 'dummy' serves CEPHFS")
    assert intake.create_share(1, "cephfs").share_proto == "CEPHFS"
    report(sqlite_db, storage_protocol="NFS_CIFS")
    assert intake.create_share(1, "CIFS").share_proto == "CIFS"
    report(sqlite_db, storage_protocol="")  # names none: anything goes
    assert intake.create_share(1, "HDFS").share_proto == "HDFS"


def test_share_group_refused_without_group_support(intake, sqlite_db):
    report(sqlite_db, share_group_support=False)
    refused(sqlite_db, lambda: intake.create_share_group("g"),
            "cannot create a share group", "share_group_support")


def test_share_goes_to_the_pool_with_most_free_space_that_fits(intake, sqlite_db):
    report(sqlite_db, pools=pools(small=3, big=10, unknown="unknown"))
    # 'unknown' capacity counts as no limit, so it wins over any number.
    _, inst = available_share(intake, sqlite_db, size=4)
    assert inst.host == f"{HOST}#unknown"
    report(sqlite_db, pools=pools(small=3, big=10, other=10))
    _, inst = available_share(intake, sqlite_db, size=3)
    assert inst.host == f"{HOST}#big"  # equal free space: the first name
    # The request goes to the backend, the pool stays on the instance.
    assert api.request_list(sqlite_db)[0].host == HOST


def test_share_over_free_capacity_is_refused(intake, sqlite_db):
    report(sqlite_db, pools=pools(small=3, big=10))
    refused(sqlite_db, lambda: intake.create_share(11, "NFS"),
            "cannot create a share of 11 GiB", "free capacity of every pool",
            "the most free is 10 GiB, in pool 'big'")
    _, inst = available_share(intake, sqlite_db, size=10)
    assert inst.host == f"{HOST}#big"


def test_extend_over_the_pools_free_capacity_is_refused(intake, sqlite_db):
    report(sqlite_db, pools=pools(a=10, b=2))
    share, inst = available_share(intake, sqlite_db, size=4)
    assert inst.host == f"{HOST}#a"
    report(sqlite_db, pools=pools(a=6, b=50))  # what the backend says after the create
    refused(sqlite_db, lambda: intake.resize_share(share.id, 11, extend=True),
            f"cannot extend share {share.id} by 7 GiB to 11 GiB",
            f"6 GiB free in pool '{HOST}#a'")
    intake.resize_share(share.id, 10, extend=True)  # 6 more: fits exactly
    assert api.get(sqlite_db, models.ShareInstance, inst.id).status == vocab.EXTENDING


def test_replica_goes_to_its_shares_pool_and_needs_room_there(intake, sqlite_db):
    report(sqlite_db, pools=pools(a=10))
    share, inst = available_share(intake, sqlite_db, size=4)
    report(sqlite_db, pools=pools(a=3))
    refused(sqlite_db, lambda: intake.create_replica(share.id),
            f"replicate share {share.id} (4 GiB)", "3 GiB free")
    report(sqlite_db, pools=pools(a=6))
    assert intake.create_replica(share.id).host == f"{HOST}#a"


def test_share_from_snapshot_goes_to_the_snapshots_pool(intake, sqlite_db):
    report(sqlite_db, pools=pools(a=10, b=5))
    share, _ = available_share(intake, sqlite_db, size=2)
    snap = intake.create_snapshot(share.id)
    snap_inst = api.query(sqlite_db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0]
    api.conditional_update(sqlite_db, models.ShareSnapshotInstance, snap_inst.id, {},
                           {"status": vocab.AVAILABLE})
    report(sqlite_db, pools=pools(a=3, b=50))  # b has more room, the data is in a
    clone = intake.create_share(3, "NFS", snapshot_id=snap.id)
    (inst,) = api.query(sqlite_db, models.ShareInstance, {"share_id": clone.id})
    assert inst.host == f"{HOST}#a"
    # The 3 GiB the report left free in 'a' went to the clone placed since.
    refused(sqlite_db, lambda: intake.create_share(4, "NFS", snapshot_id=snap.id),
            "4 GiB is more than the 0 GiB free in pool")


def test_a_pool_no_longer_reported_is_not_checked(intake, sqlite_db):
    report(sqlite_db, pools=pools(old=10))
    share, inst = available_share(intake, sqlite_db, size=2)
    report(sqlite_db, pools=pools(new=1))
    intake.resize_share(share.id, 9, extend=True)
    assert api.get(sqlite_db, models.ShareInstance, inst.id).status == vocab.EXTENDING


def test_a_stack_gets_the_same_refusal(sqlite_db):
    """convergence/physical.py plans with the same planners: a refusal is a
    failed resource (CheckError is plans.Refused), not a crash."""
    from sharemgr.convergence import physical

    assert physical.CheckError is plans.Refused
    report(sqlite_db, pools=pools(a=2))
    with pytest.raises(physical.CheckError, match="free capacity"):
        plans.create_share(sqlite_db, HOST, False, 3, "NFS", "stack-share")


# The refresh ------------------------------------------------------------------------


class Reporting:
    def __init__(self, answer):
        self.answer = answer

    def get_share_stats(self, refresh: bool = False):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_failed_refresh_is_logged_and_keeps_the_previous_report(sqlite_db, caplog):
    assert capabilities.refresh(sqlite_db, HOST, Reporting(dict(FULL)), "e1")
    caplog.set_level(logging.ERROR)
    for answer in (RuntimeError("array unreachable"), ["not", "a", "dict"],
                   {"not json": object()}):
        caplog.clear()
        assert not capabilities.refresh(sqlite_db, HOST, Reporting(answer), "e2")
        record = next(r for r in caplog.records if "get_share_stats failed" in r.getMessage())
        assert record.exc_info is not None  # with its traceback
        row = db_capabilities.get(sqlite_db, HOST)
        assert row.stats == FULL and row.engine_id == "e1"


# The dummy driver's report ------------------------------------------------------------


def test_dummy_reports_everything_and_no_pools_by_default(tmp_path):
    stats = build_driver(DummyDriver, tmp_path, setup=True).get_share_stats()
    assert stats["snapshot_support"] is True
    assert stats["create_share_from_snapshot_support"] is True
    assert stats["replication_type"] == "readable"
    assert stats["share_group_support"] is True
    assert stats["driver_handles_share_servers"] is False
    assert stats["pools"] == [] and stats["free_capacity_gb"] == "infinite"


def test_dummy_pools_free_capacity_is_what_its_shares_leave(tmp_path):
    drv = build_driver(DummyDriver, tmp_path, setup=True, dummy_pools={"a": 10, "b": 5},
                       dummy_snapshot_support=False, dummy_replication_type="none")

    def share(ident: str, size: int, host: str) -> dict:
        return {"id": ident, "share_id": ident, "name": ident, "size": size,
                "share_proto": "NFS", "host": host}

    drv.create_share(share("s1", 3, "kithost@kit#a"))
    drv.create_share(share("s2", 1, "kithost@kit#b"))
    drv.create_share(share("s3", 2, "kithost@kit"))  # in no pool: counted in none
    drv.create_replica(share("r1", 3, "kithost@kit#b"), {"id": "s1"})
    drv.extend_share({"id": "s1"}, 4)
    stats = drv.get_share_stats()
    assert stats["snapshot_support"] is False and stats["replication_type"] is None
    assert [(p["pool_name"], p["total_capacity_gb"], p["free_capacity_gb"])
            for p in stats["pools"]] == [("a", 10, 6), ("b", 5, 1)]
    drv.delete_share({"id": "s1"})
    assert drv.get_share_stats()["pools"][0]["free_capacity_gb"] == 10


def test_dummy_stats_fail_on_request(tmp_path):
    drv = build_driver(DummyDriver, tmp_path, dummy_fail_methods=["get_share_stats"])
    with pytest.raises(Exception, match="get_share_stats of kit failed"):
        drv.get_share_stats()


# The DHSS declaration -------------------------------------------------------------------


class NoServersDriver(DummyDriver):
    supported_dhss_modes = (False,)


def test_loader_refuses_a_dhss_mode_the_driver_does_not_support(tmp_path):
    with pytest.raises(loader.DriverLoadError) as info:
        build_driver(NoServersDriver, tmp_path, driver_handles_share_servers=True)
    message = str(info.value)
    assert "\n" not in message
    assert "backend [kit]" in message and "NoServersDriver" in message
    assert "driver_handles_share_servers = True is not supported" in message
    assert "supports driver_handles_share_servers = False" in message
    drv = build_driver(NoServersDriver, tmp_path / "ok", driver_handles_share_servers=False)
    assert drv.driver_handles_share_servers is False


def test_drivers_support_both_modes_unless_they_say_otherwise():
    from sharemgr.drivers.base import ShareDriver

    assert ShareDriver.supported_dhss_modes == (False, True)
    assert DummyDriver.supported_dhss_modes == (False, True)


def test_a_replica_elsewhere_only_within_one_replication_domain(intake, sqlite_db):
    """Manila's rule: another backend holds a share's replica only when both
    report the same replication_domain (it was accepted and the driver,
    without the active replica, failed it)."""
    report(sqlite_db)
    share, _ = available_share(intake, sqlite_db)
    for mine, theirs in ((None, None), ("d1", None), ("d1", "d2"), (None, "d1")):
        report(sqlite_db, replication_domain=mine)
        db_capabilities.save(sqlite_db, "hostB@dummy", {**FULL, "replication_domain": theirs},
                             "test-engine")
        refused(sqlite_db, lambda: intake.create_replica(share.id, host="hostB"),
                f"cannot replicate share {share.id} to hostB@dummy", "same replication_domain")
    report(sqlite_db, replication_domain="d1")
    db_capabilities.save(sqlite_db, "hostB@dummy", {**FULL, "replication_domain": "d1"},
                         "test-engine")
    assert intake.create_replica(share.id, host="hostB").host == "hostB@dummy"
    assert intake.create_replica(share.id).host == HOST  # its own backend: no domain needed
