"""A host-assisted migration (manager/migration_host.py, the host-assisted
paths of migration_ops.py and migration_continue.py) on SQLite, PostgreSQL and MariaDB, with two
drivers that lend folders of real files: the engine's copy and check,
complete, cancel, a copy that differs, a start cut short, and the
refusals."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import access as db_access
from sharemgr.db import api, models
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db import messages as db_messages
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.manager import data_mover, migration_host, migration_ops, migration_plans
from sharemgr.manager.intake import InvalidRequest

from tests.conftest import need_program
from tests.unit.manager.test_migration import DEST, _continue, _inst, _run, _start
from tests.unit.reconcile_harness import BACKEND, HOSTBE, FakeDriver, add, expect, make_share


@pytest.fixture(autouse=True)
def _rsync() -> None:
    need_program("rsync", "rsync")


class LendingDriver(FakeDriver):
    """Shares as folders under ``root``; answers incompatible to every
    driver-assisted migration (the base class's)."""

    def __init__(self, root: Path) -> None:
        super().__init__(dhss=False)
        self.root = root
        root.mkdir()
        self.levels: list[list[str]] = []  # the levels of each update_access
        self.compatible = False

    def migration_check_compatibility(self, source, dest, server=None, dest_server=None):
        self._record("migration_check_compatibility", source["id"])
        return {"compatible": self.compatible}

    def create_share(self, share, share_server=None):
        self._record("create_share", share["id"])
        (self.root / share["id"]).mkdir(exist_ok=True)
        return [{"path": f"{self.root.name}:/{share['id']}", "is_admin_only": False,
                 "preferred": True}]

    def delete_share(self, share, share_server=None):
        self._record("delete_share", share["id"])
        if share["id"] in self.delete_fails:
            raise ShareBackendException(f"delete of {share['id']} refused")
        shutil.rmtree(self.root / share["id"], ignore_errors=True)

    def update_access(self, share, access_rules, add_rules, delete_rules, share_server=None):
        self._record("update_access", share["id"])
        self.levels.append([r["access_level"] for r in access_rules])

    def migration_data_path(self, share, share_server=None):
        path = self.root / share["id"]
        if not path.is_dir():
            raise ShareResourceNotFound(f"no share {share['id']}")
        return str(path)


@pytest.fixture
def eng(any_engine, tmp_path):
    any_engine.drivers[BACKEND] = LendingDriver(tmp_path / "be")
    any_engine.drivers["beta"] = LendingDriver(tmp_path / "beta")
    for host in (HOSTBE, DEST):
        db_capabilities.save(any_engine.db, host, {"storage_protocol": "NFS_CIFS"}, "e1")
    yield any_engine
    # The engine's check after a test forbids the calls no reconciliation
    # may make: these tests make them as the requests do.
    for backend in (BACKEND, "beta"):
        any_engine.drivers[backend].calls.clear()


def _share(eng) -> tuple[models.ShareInstance, Path]:
    """A share with files and an rw rule, on the source backend."""
    inst = make_share(eng.db)
    add(eng.db, models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id,
                                       access_type="ip", access_to="10.0.0.1",
                                       access_level="rw", state=vocab.ACCESS_ACTIVE))
    data = eng.drivers[BACKEND].root / inst.id
    (data / "d").mkdir(parents=True)
    for i in range(50):
        (data / "d" / f"f{i}").write_bytes(os.urandom(64 + i))
    os.link(data / "d" / "f0", data / "linked")
    return inst, data


def _undone(eng, inst, dest_id: str) -> None:
    """The migration ended in error and was undone: the source available
    with its rules back, the destination gone from the database and the
    backend."""
    source = _inst(eng.db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)
    assert _inst(eng.db, dest_id).status == vocab.DELETED
    assert not (eng.drivers["beta"].root / dest_id).exists()
    assert eng.drivers[BACKEND].levels[-1] == ["rw"]


def _copying(eng, inst) -> str:
    """Started host-assisted: the destination made, the source read-only."""
    _start(eng, inst, force_host_assisted=True, preserve_metadata=True)
    dest_id = str(migration_plans.shown(eng.db, inst.share_id)["destination_instance_id"])
    _run(eng, inst.id)
    return dest_id


def test_the_engine_copies_checks_and_completes(eng):
    db, source_driver = eng.db, eng.drivers[BACKEND]
    source_driver.compatible = True  # forced: the driver is not even asked
    inst, data = _share(eng)
    dest_id = _copying(eng, inst)
    assert _inst(db, inst.id).task_state == vocab.DATA_COPYING_IN_PROGRESS
    assert source_driver.levels == [["ro"]]  # its clients read-only while it is copied
    assert "migration_check_compatibility" not in source_driver.methods()
    _continue(eng)
    shown = migration_plans.shown(db, inst.share_id)
    assert (shown["task_state"], shown["total_progress"]) == (
        vocab.DATA_COPYING_COMPLETED, "100%")
    copy = eng.drivers["beta"].root / dest_id
    assert data_mover.differences(data, copy) == []

    api_intake = migration_plans  # complete is allowed once the copy is checked
    assert vocab.DATA_COPYING_COMPLETED in api_intake.COPIED
    from sharemgr.manager.intake import Intake
    Intake(db, None).migration_complete(inst.share_id)
    _run(eng, inst.id)
    source, dest = _inst(db, inst.id), _inst(db, dest_id)
    assert (source.status, dest.status) == (vocab.DELETED, vocab.AVAILABLE)
    assert dest.export_locations[0]["path"] == f"beta:/{dest_id}"
    assert not data.exists() and copy.exists()
    assert [r.state for r in db_access.rules_of(db, inst.share_id)] == [
        vocab.ACCESS_QUEUED_TO_APPLY]


def test_an_incompatible_driver_falls_back_to_the_engine(eng):
    inst, _data = _share(eng)
    _start(eng, inst)
    _run(eng, inst.id)
    assert eng.drivers[BACKEND].methods()[0] == "migration_check_compatibility"
    assert _inst(eng.db, inst.id).task_state == vocab.DATA_COPYING_IN_PROGRESS


@pytest.mark.parametrize("when", ["copying", "copied"])
def test_cancel_removes_the_copy_and_gives_the_rules_back(eng, when):
    from sharemgr.manager.intake import Intake

    db = eng.db
    inst, data = _share(eng)
    dest_id = _copying(eng, inst)
    if when == "copied":
        _continue(eng)
    Intake(db, None).migration_cancel(inst.share_id)
    _run(eng, inst.id)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_CANCELLED)
    assert _inst(db, dest_id).status == vocab.DELETED
    assert not (eng.drivers["beta"].root / dest_id).exists()
    assert eng.drivers[BACKEND].levels[-1] == ["rw"] and data.exists()


def test_a_copy_that_differs_ends_in_error(eng, monkeypatch):
    db = eng.db
    inst, _data = _share(eng)
    dest_id = _copying(eng, inst)
    monkeypatch.setattr(data_mover, "differences", lambda a, b: ["d/f1: content"])
    _continue(eng)
    _undone(eng, inst, dest_id)
    (message,) = db_messages.message_list(db, inst.share_id)
    assert "the copy differs from the source: d/f1: content" in (message.detail or "")


def test_a_start_whose_clients_cannot_be_made_read_only_is_undone_once(eng, monkeypatch):
    """The source refuses the read-only rules: the destination is deleted
    once and the rules given back once (the start's own undo and its
    caller's both ran: two deletes and two rule resends for one failure)."""
    inst, _data = _share(eng)
    source_driver, dest_driver = eng.drivers[BACKEND], eng.drivers["beta"]
    given = source_driver.update_access

    def refuse_ro(share, access_rules, *args, **kwargs):
        if any(r["access_level"] == "ro" for r in access_rules):
            raise ShareBackendException("read-only rules refused")
        return given(share, access_rules, *args, **kwargs)

    monkeypatch.setattr(source_driver, "update_access", refuse_ro)
    _start(eng, inst, force_host_assisted=True, preserve_metadata=True)
    dest_id = str(migration_plans.shown(eng.db, inst.share_id)["destination_instance_id"])
    _run(eng, inst.id)
    _undone(eng, inst, dest_id)
    assert dest_driver.calls.count(("delete_share", dest_id)) == 1
    assert source_driver.levels == [["rw"]]  # given back once


@pytest.mark.parametrize("when", ["copying", "copied"])
def test_a_copy_whose_destination_an_admin_reset_ends_on_its_source(eng, when):
    """The destination reset to error while the copy runs or waits for its
    complete: the source is available again with its rules back (it stayed
    migrating, read-only, for ever) and a message says why."""
    db = eng.db
    inst, data = _share(eng)
    dest_id = _copying(eng, inst)
    if when == "copied":
        _continue(eng)
        assert _inst(db, inst.id).task_state == vocab.DATA_COPYING_COMPLETED
    api.conditional_update(db, models.ShareInstance, dest_id, {}, {"status": vocab.ERROR})
    _continue(eng)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)
    assert eng.drivers[BACKEND].levels[-1] == ["rw"] and data.exists()
    (message,) = db_messages.message_list(db, inst.share_id)
    assert "its destination was removed" in (message.detail or "")


def test_a_start_cut_after_it_went_host_assisted_is_undone(eng, monkeypatch):
    """The engine died between its own write (data_copying_starting) and
    the outcome: the periodic task removes the destination and gives the
    source its rules back."""
    db = eng.db
    inst, _data = _share(eng)
    _start(eng, inst, force_host_assisted=True)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])

    def crash(_sides):
        raise SystemExit("killed")  # not an Exception: nothing undoes it

    monkeypatch.setattr(migration_ops.migration_host, "begin", crash)
    with pytest.raises(SystemExit):
        _run(eng, inst.id)
    monkeypatch.undo()
    eng.drivers["beta"].create_share({"id": dest_id})  # what it had made
    assert _inst(db, inst.id).task_state == vocab.DATA_COPYING_STARTING
    (req,) = api.request_list(db, resource_id=inst.id)
    api.conditional_update(db, models.Request, req.id, {},
                           {"status": vocab.REQUEST_ABANDONED})
    _continue(eng)
    _undone(eng, inst, dest_id)


@pytest.mark.parametrize("dest, flags, words", [
    (DEST, {"writable": True}, "cannot keep the share writable"),
    (DEST, {"preserve_snapshots": True, "nondisruptive": True},
     "leave out --nondisruptive, --preserve-snapshots"),
    ("hostB@beta", {}, "copies on one host"),
])
def test_what_the_engine_cannot_copy_is_refused(eng, dest, flags, words):
    inst, _data = _share(eng)
    with pytest.raises(InvalidRequest, match=words):
        _start(eng, inst, dest, force_host_assisted=True, **flags)
    assert api.request_list(eng.db, resource_id=inst.id) == []


def test_a_failed_complete_is_carried_out_again(eng):
    """The source's delete failed (it may have begun): the destination,
    which holds the checked copy, is never removed; the migration stays
    completing, and the periodic task carries the complete out again
    until the backend lets it."""
    from sharemgr.manager.intake import Intake

    db, source_driver = eng.db, eng.drivers[BACKEND]
    inst, _data = _share(eng)
    dest_id = _copying(eng, inst)
    _continue(eng)
    source_driver.delete_fails.add(inst.id)
    Intake(db, None).migration_complete(inst.share_id)
    expect(_run(eng, inst.id), Result.STALE, "carried out again")
    (req,) = [r for r in api.request_list(db, resource_id=inst.id)
              if r.status == vocab.REQUEST_PENDING]
    api.conditional_update(db, models.Request, req.id, {}, {"status": vocab.REQUEST_DONE})
    source, dest = _inst(db, inst.id), _inst(db, dest_id)
    assert (source.status, source.task_state) == (vocab.MIGRATING, vocab.MIGRATION_COMPLETING)
    assert dest.status == vocab.MIGRATING_TO
    _continue(eng)  # still refused: still completing
    assert _inst(db, inst.id).task_state == vocab.MIGRATION_COMPLETING
    assert (eng.drivers["beta"].root / dest_id).exists()
    source_driver.delete_fails.clear()
    _continue(eng)
    source, dest = _inst(db, inst.id), _inst(db, dest_id)
    assert (source.status, dest.status, dest.task_state) == (
        vocab.DELETED, vocab.AVAILABLE, vocab.MIGRATION_SUCCESS)


def test_a_copy_taken_over_meanwhile_is_not_undone_by_its_old_holder(eng, monkeypatch):
    """The row was taken by another engine while this one copied (a pause
    past its lock): its failure removes nothing, the new holder's copy goes
    on."""
    db = eng.db
    inst, _data = _share(eng)
    dest_id = _copying(eng, inst)

    def taken_then_differs(a, b):
        row = _inst(db, inst.id)
        api.conditional_update(db, models.ShareInstance, inst.id, {}, {"fence": row.fence + 1})
        return ["d/f1: content"]

    monkeypatch.setattr(data_mover, "differences", taken_then_differs)
    _continue(eng)
    assert _inst(db, inst.id).task_state == vocab.DATA_COPYING_IN_PROGRESS
    assert _inst(db, dest_id).status == vocab.MIGRATING_TO
    assert (eng.drivers["beta"].root / dest_id).exists()
    assert "delete_share" not in eng.drivers["beta"].methods()


def test_each_take_of_a_migration_gives_its_destination_a_newer_token(eng, monkeypatch):
    """An earlier holder paused between its check and its call on the
    destination (its delete after a failed copy) must be refused by a
    backend that fences once the new holder has called: every take of the
    migration bumps the destination's fencing token with the source's, and
    the destination's calls carry it."""
    inst, _data = _share(eng)
    dest_id = _copying(eng, inst)
    tokens: list[int] = []
    real = migration_host.copy

    def cut_once(sides, *args, **kwargs):
        tokens.append(sides.dest_d["fence_token"])
        if len(tokens) == 1:
            raise data_mover.CopyStopped("cut short: taken over")
        return real(sides, *args, **kwargs)

    monkeypatch.setattr(migration_host, "copy", cut_once)
    _continue(eng)
    _continue(eng)
    assert tokens[0] < tokens[1] == _inst(eng.db, dest_id).fence
    assert _inst(eng.db, inst.id).task_state == vocab.DATA_COPYING_COMPLETED
    # The complete's request takes it again.
    from sharemgr.manager.intake import Intake
    Intake(eng.db, None).migration_complete(inst.share_id)
    switched = migration_host.switch
    monkeypatch.setattr(migration_host, "switch", lambda sides: tokens.append(
        sides.dest_d["fence_token"]) or switched(sides))
    _run(eng, inst.id)
    assert tokens[1] < tokens[2]
    assert _inst(eng.db, dest_id).status == vocab.AVAILABLE
