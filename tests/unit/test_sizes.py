"""Share sizes have one maximum on every database (MAX_SHARE_SIZE_GB).

A size above it is refused by the intake before anything is written, so it
never reaches a driver; the maximum itself is stored on SQLite, PostgreSQL
and MariaDB; and a backend that reports a size no column holds ends the
reconciliation in the resize's error status instead of a failed write.
"""

from __future__ import annotations

import pytest
from oslo_config import cfg
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.manager import config
from sharemgr.manager.intake import Intake, InvalidRequest, check_size
from sharemgr.reconcile import answers

MAX = vocab.MAX_SHARE_SIZE_GB
HUGE = 99999999999999999999


def test_the_maximum_fits_a_32_bit_signed_integer():
    assert MAX == 2**31 - 1
    for model in (models.Share, models.ShareSnapshot, models.ShareBackup):
        assert type(model.__table__.c.size.type).__name__ == "Integer"


@pytest.fixture
def intake(db, tmp_path):
    path = tmp_path / "sharemgr.conf"
    path.write_text("[DEFAULT]\nhost = hostA\nenabled_share_backends = dummy\n")
    return Intake(db, config.load([], config_file=str(path), conf=cfg.ConfigOpts()))


def _written(db) -> tuple[int, int, int]:
    return (len(api.query(db, models.Share)), len(api.query(db, models.ShareInstance)),
            len(api.request_list(db)))


@pytest.mark.parametrize("size", [0, -1, True, 1.5, "3", MAX + 1, HUGE])
def test_bad_sizes_are_refused(size):
    with pytest.raises(InvalidRequest) as info:
        check_size(size)
    if isinstance(size, int) and size > MAX:
        assert f"maximum share size, {MAX} GiB" in str(info.value)


def test_the_maximum_is_stored_on_every_database(intake, db):
    """Create at the maximum, then extend an ordinary share to it."""
    big = intake.create_share(MAX, "NFS", name="big")
    assert api.get(db, models.Share, big.id).size == MAX
    share = intake.create_share(1, "NFS")
    inst = api.query(db, models.ShareInstance, {"share_id": share.id})[0]
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    intake.resize_share(share.id, MAX, extend=True)
    # What the operation writes when the driver is done.
    assert api.conditional_update(db, models.Share, share.id, {}, {"size": MAX})
    assert api.get(db, models.Share, share.id).size == MAX


@pytest.mark.parametrize("size", [MAX + 1, HUGE])
def test_create_above_the_maximum_writes_nothing(intake, db, size):
    with pytest.raises(InvalidRequest, match="larger than the maximum share size"):
        intake.create_share(size, "NFS")
    assert _written(db) == (0, 0, 0)


@pytest.mark.parametrize("extend", [True, False])
def test_resize_above_the_maximum_writes_nothing(intake, db, extend):
    share = intake.create_share(5, "NFS")
    inst = api.query(db, models.ShareInstance, {"share_id": share.id})[0]
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    before = _written(db)
    with pytest.raises(InvalidRequest, match="new size .* larger than the maximum"):
        intake.resize_share(share.id, HUGE, extend=extend)
    assert _written(db) == before
    assert api.get(db, models.ShareInstance, inst.id).status == vocab.AVAILABLE
    assert api.get(db, models.Share, share.id).size == 5


def test_an_unknown_share_with_a_huge_size_is_one_clear_error(intake):
    with pytest.raises(InvalidRequest, match="maximum share size"):
        intake.resize_share("no-such-share", HUGE, extend=True)


@pytest.mark.parametrize("reported", [MAX + 1, float(HUGE), str(HUGE)])
def test_a_backend_size_above_the_maximum_is_unusable(reported):
    """The reconciler's resize outcome: extending_error, not a failed write."""
    with pytest.raises(answers.Unusable, match="above the maximum"):
        answers.size_of({"size": reported})
    assert answers.size_of({"size": MAX}) == MAX


@pytest.mark.parametrize("given, stored", [("0", "0"), ("55", "55"), ("55.5%", "55"),
                                           (150, "100"), ("nan", "nan"), ("x" * 40, "x" * 32)])
def test_backup_progress_fits_its_column(given, stored):
    from sharemgr.manager.backup_ops import _progress

    assert _progress(given) == stored


@pytest.mark.parametrize("extend", [True, False])
def test_no_resize_while_a_snapshot_is_being_made(intake, db, extend):
    """The snapshot records the share's size at its request and the backend
    at its driver call: a resize in between would make them disagree."""
    share = intake.create_share(5, "NFS")
    inst = api.query(db, models.ShareInstance, {"share_id": share.id})[0]
    api.conditional_update(db, models.ShareInstance, inst.id, {}, {"status": vocab.AVAILABLE})
    snap = intake.create_snapshot(share.id)
    before = _written(db)
    with pytest.raises(InvalidRequest, match="has a snapshot that is creating"):
        intake.resize_share(share.id, 8 if extend else 2, extend=extend)
    assert _written(db) == before
    snap_inst = api.query(db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0]
    api.conditional_update(db, models.ShareSnapshotInstance, snap_inst.id, {},
                           {"status": vocab.AVAILABLE})
    intake.resize_share(share.id, 8 if extend else 2, extend=extend)
    assert api.get(db, models.ShareInstance, inst.id).status == (
        vocab.EXTENDING if extend else vocab.SHRINKING)
