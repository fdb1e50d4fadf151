"""A share's migration (manager/migration_plans.py, migration_ops.py,
migration_continue.py, migration_rows.py) on
SQLite, PostgreSQL and MariaDB: what each plan refuses (nothing written),
the driver-assisted flow through ``Operations.perform`` and the periodic
task, and the periodic task settling migrations that a failure or a crash
cut short."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Outcome, Result
from sharemgr.db import access as db_access
from sharemgr.db import api, models
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db import messages as db_messages
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import migration_continue, migration_plans
from sharemgr.manager.intake import Intake, InvalidRequest

from tests.unit.reconcile_harness import BACKEND, HOST, HOSTBE, FakeDriver, add, claimed, make_share

DEST = f"{HOST}@beta"


class MigratingDriver(FakeDriver):
    """Moves a share in two continue calls; failures per method on demand."""

    def __init__(self) -> None:
        super().__init__(dhss=False)
        self.compatible = True
        self.fail: set[str] = set()
        self.progress: dict[str, int] = {}

    def _call(self, method: str, source: dict, dest: dict) -> None:
        self._record(method, source["id"])
        if method in self.fail:
            raise ShareBackendException(f"{method} refused")

    def migration_check_compatibility(self, source, dest, server=None, dest_server=None):
        self._call("migration_check_compatibility", source, dest)
        return {"compatible": self.compatible, "writable": True, "nondisruptive": False,
                "preserve_metadata": True, "preserve_snapshots": False}

    def migration_start(self, source, dest, snaps, mappings, server=None, dest_server=None):
        self._call("migration_start", source, dest)
        self.progress.setdefault(dest["id"], 0)

    def migration_continue(self, source, dest, snaps, mappings, server=None, dest_server=None):
        self._call("migration_continue", source, dest)
        self.progress[dest["id"]] += 50
        return self.progress[dest["id"]] >= 100

    def migration_get_progress(self, source, dest, snaps, mappings, server=None,
                               dest_server=None):
        return {"total_progress": str(self.progress.get(dest["id"], 0))}

    def migration_complete(self, source, dest, snaps, mappings, server=None, dest_server=None):
        self._call("migration_complete", source, dest)
        return {"export_locations": [{"path": f"beta:/{dest['id']}", "is_admin_only": False,
                                      "preferred": True}]}

    def migration_cancel(self, source, dest, snaps, mappings, server=None, dest_server=None):
        self._call("migration_cancel", source, dest)
        self.progress.pop(dest["id"], None)


@pytest.fixture
def eng(any_engine):
    any_engine.drivers[BACKEND] = MigratingDriver()
    for host in (HOSTBE, DEST):
        db_capabilities.save(any_engine.db, host, {"storage_protocol": "NFS_CIFS"}, "e1")
    yield any_engine
    # The engine's check after a test forbids the calls no reconciliation
    # may make: these tests make them as the requests do.
    any_engine.driver.calls.clear()


def _start(eng, inst, dest=DEST, **flags):
    return Intake(eng.db, None).migration_start(
        migration_plans.Request(inst.share_id, dest, **flags))


def _run(eng, inst_id: str) -> Outcome[object]:
    """Carry out the newest open request about ``inst_id`` as the runner
    would: done or failed, its request ends; otherwise it stays."""
    req = [r for r in api.request_list(eng.db, resource_id=inst_id)
           if r.status == vocab.REQUEST_PENDING][0]
    outcome = eng.operations.perform(claimed(eng, req))
    api.conditional_update(eng.db, models.Request, req.id, {}, (
        {"status": vocab.REQUEST_DONE} if outcome.result in (Result.DONE, Result.FAILED)
        else {"status": vocab.REQUEST_PENDING, "engine_id": None}))
    return outcome


def _inst(db, ident):
    return api.get(db, models.ShareInstance, ident, include_deleted=True)


def _continue(eng) -> None:
    migration_continue.continue_migrations(eng.operations, [HOSTBE])


def _written(db) -> tuple[int, int]:
    return (len(api.query(db, models.ShareInstance, include_deleted=True)),
            len(api.request_list(db)))


@pytest.mark.parametrize("dest, flags, words", [
    ("nohost@beta", {}, "no engine serves nohost@beta \\(it has never reported; "
                        "'sharectl backend list'"),
    (HOSTBE, {}, "is on hostA@be already"),
    ("beta", {}, "invalid destination"),
    ("a@b@c", {}, "invalid destination"),
    (DEST, {"force_host_assisted": True, "writable": True}, "cannot keep the share writable"),
    ("hostB@beta", {"force_host_assisted": True}, "copies on one host"),
])
def test_a_bad_start_is_refused_and_writes_nothing(eng, dest, flags, words):
    inst = make_share(eng.db)
    before = _written(eng.db)
    with pytest.raises(InvalidRequest, match=words):
        _start(eng, inst, dest, **flags)
    assert _written(eng.db) == before
    assert _inst(eng.db, inst.id).status == vocab.AVAILABLE


def test_what_a_share_has_or_does_refuses_its_start(eng):
    db = eng.db
    inst = make_share(db)
    add(db, models.ShareInstance(id=models.new_id(), share_id=inst.share_id, host=HOSTBE,
                                 status=vocab.AVAILABLE, replica_state=vocab.REPLICA_IN_SYNC,
                                 export_locations=[]))
    with pytest.raises(InvalidRequest, match="replica"):
        _start(eng, inst)
    snapped = make_share(db)
    add(db, models.ShareSnapshot(id=models.new_id(), share_id=snapped.share_id, size=5))
    with pytest.raises(InvalidRequest, match="snapshot"):
        _start(eng, snapped)
    syncing = make_share(db)
    add(db, models.ShareAccessRule(id=models.new_id(), share_id=syncing.share_id,
                                   access_type="ip", access_to="10.0.0.1", access_level="rw",
                                   state=vocab.ACCESS_QUEUED_TO_APPLY))
    with pytest.raises(InvalidRequest, match="access rules are being applied"):
        _start(eng, syncing)
    # What the source backend declares it keeps: a flag it does not, refused.
    db_capabilities.save(db, HOSTBE, {"migration_support": {"writable": True}}, "e1")
    plain = make_share(db)
    with pytest.raises(InvalidRequest, match="--preserve-metadata"):
        _start(eng, plain, preserve_metadata=True)
    # The destination's room and protocols.
    db_capabilities.save(db, DEST, {"storage_protocol": "CIFS"}, "e1")
    with pytest.raises(InvalidRequest, match="serves CIFS"):
        _start(eng, plain)
    db_capabilities.save(db, DEST, {"pools": [{"pool_name": "p", "total_capacity_gb": 2,
                                               "free_capacity_gb": 2}]}, "e1")
    with pytest.raises(InvalidRequest, match="more than the free capacity"):
        _start(eng, plain)


def test_a_start_planned_before_a_resize_began_and_ended_is_refused(eng):
    """The destination's claim is the share's size as planned: a resize
    that began and ended before the plan was written is refused by it."""
    db = eng.db
    inst = make_share(db)
    plan = migration_plans.start(db, migration_plans.Request(inst.share_id, DEST))
    api.conditional_update(db, models.Share, inst.share_id, {}, {"size": plan.row.size + 1})
    assert not api.transition_with_request(db, plan.changes, plan.op.request(), rows=plan.add,
                                           claims=plan.claims, conditions=plan.conditions)
    assert _inst(db, inst.id).status == vocab.AVAILABLE
    assert [i.id for i in api.query(db, models.ShareInstance, {"share_id": inst.share_id})] \
        == [inst.id]


def test_start_continue_complete_moves_the_share_and_its_rules(eng):
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    rule = models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id, access_type="ip",
                                  access_to="10.0.0.1", access_level="rw",
                                  state=vocab.ACCESS_ACTIVE)
    add(db, rule)
    _start(eng, inst, writable=True)
    shown = migration_plans.shown(db, inst.share_id)
    dest_id = str(shown["destination_instance_id"])
    assert (shown["task_state"], _inst(db, dest_id).status) == (
        vocab.MIGRATION_STARTING, vocab.MIGRATING_TO)
    with pytest.raises(InvalidRequest, match="needs migration_driver_phase1_done"):
        Intake(db, None).migration_complete(inst.share_id)
    _run(eng, inst.id)
    assert _inst(db, inst.id).task_state == vocab.MIGRATION_DRIVER_IN_PROGRESS
    _continue(eng)
    assert migration_plans.shown(db, inst.share_id)["total_progress"] == "50%"
    _continue(eng)
    assert migration_plans.shown(db, inst.share_id)["task_state"] == \
        vocab.MIGRATION_DRIVER_PHASE1_DONE
    _continue(eng)  # phase 1 done: nothing more to drive
    assert driver.methods().count("migration_continue") == 2

    Intake(db, None).migration_complete(inst.share_id)
    _run(eng, inst.id)
    source, dest = _inst(db, inst.id), _inst(db, dest_id)
    assert (source.status, source.task_state) == (vocab.DELETED, vocab.MIGRATION_SUCCESS)
    assert (dest.status, dest.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_SUCCESS)
    assert dest.export_locations[0]["path"] == f"beta:/{dest_id}"
    # The rules go to the destination, by its host's request.
    assert [r.state for r in db_access.rules_of(db, inst.share_id)] == [
        vocab.ACCESS_QUEUED_TO_APPLY]
    (req,) = [r for r in api.request_list(db, resource_id=dest_id)]
    assert (req.action, req.host, req.status) == (vocab.ACTION_UPDATE_ACCESS, DEST,
                                                  vocab.REQUEST_PENDING)
    assert migration_plans.shown(db, inst.share_id)["task_state"] == vocab.MIGRATION_SUCCESS


def test_an_incompatible_driver_or_a_failed_copy_ends_in_migration_error(eng):
    db, driver = eng.db, eng.driver
    driver.compatible = False
    inst = make_share(db)
    _start(eng, inst)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    _run(eng, inst.id)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)
    assert _inst(db, dest_id).status == vocab.DELETED
    assert "migration_start" not in driver.methods()

    driver.compatible = True
    _start(eng, inst)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    _run(eng, inst.id)
    driver.fail.add("migration_continue")
    _continue(eng)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)
    assert _inst(db, dest_id).status == vocab.DELETED
    assert driver.methods()[-1] == "migration_cancel"  # the destination removed
    (message,) = db_messages.message_list(db, inst.share_id)
    assert (message.action_id, message.detail_id) == ("013", "002")
    assert "migration_continue refused" in (message.detail or "")


@pytest.mark.parametrize("cut, settled, called", [
    (vocab.MIGRATION_STARTING, vocab.MIGRATION_ERROR, "migration_cancel"),
    (vocab.MIGRATION_CANCEL_IN_PROGRESS, vocab.MIGRATION_CANCELLED, "migration_cancel"),
    (vocab.MIGRATION_COMPLETING, vocab.MIGRATION_SUCCESS, "migration_complete"),
])
def test_a_migration_whose_request_ended_without_it_is_settled(eng, cut, settled, called):
    """A crash cut its request short (a reconciliation pass abandoned it):
    the periodic task settles it; while the request is open it waits."""
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    _start(eng, inst)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    if cut != vocab.MIGRATION_STARTING:
        _run(eng, inst.id)
        _continue(eng)
        _continue(eng)
        plan = (Intake(db, None).migration_cancel if cut == vocab.MIGRATION_CANCEL_IN_PROGRESS
                else Intake(db, None).migration_complete)
        plan(inst.share_id)
    assert _inst(db, inst.id).task_state == cut
    _continue(eng)  # its request is open: left alone
    assert _inst(db, inst.id).task_state == cut
    (req,) = [r for r in api.request_list(db, resource_id=inst.id)
              if r.status == vocab.REQUEST_PENDING]
    api.conditional_update(db, models.Request, req.id, {},
                           {"status": vocab.REQUEST_ABANDONED})
    _continue(eng)
    assert migration_plans.shown(db, inst.share_id)["task_state"] == settled
    assert driver.methods()[-1] == called
    source, dest = _inst(db, inst.id), _inst(db, dest_id)
    if settled == vocab.MIGRATION_SUCCESS:
        assert (source.status, dest.status) == (vocab.DELETED, vocab.AVAILABLE)
    else:
        assert (source.status, dest.status) == (vocab.AVAILABLE, vocab.DELETED)


def test_an_engine_out_of_the_group_drives_no_migration(eng):
    """The periodic task calls no driver while its engine may not (paused,
    cut off): the next run, once it is back, goes on."""
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    _start(eng, inst)
    _run(eng, inst.id)
    eng.operations.not_member = lambda: "out of the engines group"
    _continue(eng)
    assert "migration_continue" not in driver.methods()
    assert _inst(db, inst.id).task_state == vocab.MIGRATION_DRIVER_IN_PROGRESS
    eng.operations.not_member = lambda: None
    _continue(eng)
    assert driver.methods().count("migration_continue") == 1


def test_a_migration_whose_destination_an_admin_removed_ends_on_its_source(eng):
    db = eng.db
    inst = make_share(db)
    _start(eng, inst)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    api.conditional_update(db, models.ShareInstance, dest_id, {}, {"status": vocab.ERROR})
    (req,) = api.request_list(db, resource_id=inst.id)
    api.conditional_update(db, models.Request, req.id, {}, {"status": vocab.REQUEST_FAILED})
    _continue(eng)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)
    assert eng.driver.methods() == []


def test_a_driver_migration_whose_destination_an_admin_reset_ends_on_its_source(eng):
    """Phase 1 under way in the driver when an admin resets the destination:
    the source is available again (it stayed migrating for ever)."""
    db = eng.db
    inst = make_share(db)
    _start(eng, inst)
    _run(eng, inst.id)
    assert _inst(db, inst.id).task_state == vocab.MIGRATION_DRIVER_IN_PROGRESS
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    api.conditional_update(db, models.ShareInstance, dest_id, {}, {"status": vocab.ERROR})
    _continue(eng)
    source = _inst(db, inst.id)
    assert (source.status, source.task_state) == (vocab.AVAILABLE, vocab.MIGRATION_ERROR)


def test_show_is_about_the_newest_migration_after_a_cancelled_one(eng):
    """The newest instance is the newest destination, and its source is the
    instance served meanwhile, not the cancelled migration's destination
    made just before (``migration start --wait`` read that one's end)."""
    db = eng.db
    inst = make_share(db)
    _start(eng, inst)
    _run(eng, inst.id)
    Intake(db, None).migration_cancel(inst.share_id)
    _run(eng, inst.id)
    assert migration_plans.shown(db, inst.share_id)["task_state"] == \
        vocab.MIGRATION_CANCELLED
    _start(eng, inst)
    shown = migration_plans.shown(db, inst.share_id)
    assert (shown["task_state"], shown["source_instance_id"]) == (
        vocab.MIGRATION_STARTING, inst.id)
    _run(eng, inst.id)
    _continue(eng)
    _continue(eng)
    Intake(db, None).migration_complete(inst.share_id)
    _run(eng, inst.id)
    shown = migration_plans.shown(db, inst.share_id)
    assert (shown["task_state"], shown["source_instance_id"]) == (
        vocab.MIGRATION_SUCCESS, inst.id)
    # A migration of the moved share: its source is the first one's destination.
    moved = _inst(db, str(shown["destination_instance_id"]))
    _start(eng, moved, HOSTBE)
    shown = migration_plans.shown(db, inst.share_id)
    assert (shown["source_instance_id"], shown["destination_host"].partition("#")[0]) == (
        moved.id, HOSTBE)


def test_an_instance_a_failed_migration_left_is_deleted_and_then_its_share(eng):
    """A destination a migration could not remove (or an admin reset) stays
    in error beside the share's own instance: the share's delete names it,
    ``share-instance delete`` removes it (refused for the share's own
    instance and while a migration is under way), then the share goes."""
    db = eng.db
    beta = eng.drivers["beta"] = FakeDriver(dhss=False)
    intake = Intake(db, None)
    inst = make_share(db)
    _start(eng, inst)
    _run(eng, inst.id)
    dest_id = str(migration_plans.shown(db, inst.share_id)["destination_instance_id"])
    with pytest.raises(InvalidRequest, match="is migrating: cancel its migration first"):
        intake.delete_share_instance(dest_id)
    api.conditional_update(db, models.ShareInstance, dest_id, {}, {"status": vocab.ERROR})
    _continue(eng)
    assert _inst(db, inst.id).task_state == vocab.MIGRATION_ERROR
    with pytest.raises(InvalidRequest, match=rf"has another instance \({dest_id}\): delete "
                                             "it first \\(sharectl share-instance delete\\)"):
        intake.delete_share(inst.share_id)
    with pytest.raises(InvalidRequest, match="is its share's own: delete the share"):
        intake.delete_share_instance(inst.id)
    intake.delete_share_instance(dest_id)
    assert _inst(db, dest_id).status == vocab.DELETING
    _run(eng, dest_id)
    assert _inst(db, dest_id).status == vocab.DELETED
    assert beta.methods() == ["delete_share"]
    assert api.get(db, models.Share, inst.share_id) is not None  # not its last instance
    intake.delete_share(inst.share_id)
    _run(eng, inst.id)
    assert api.get(db, models.Share, inst.share_id) is None


def test_a_stack_moves_a_share_to_the_backend_on_its_own_host_else_on_one_that_serves_it(
        sqlite_db):
    """``destination_for``: the template's backend on the share's own host
    when that host reports it, else the first host that does, else the
    share's own host by name (the plan then refuses what cannot serve it)."""
    for host in ("h2@other", "h1@other", "h3@gold"):
        db_capabilities.save(sqlite_db, host, {"storage_protocol": "NFS"}, "e1")
    assert migration_plans.destination_for(sqlite_db, "h3@silver#p", "gold") == "h3@gold"
    assert migration_plans.destination_for(sqlite_db, "h3@silver#p", "other") == "h1@other"
    assert migration_plans.destination_for(sqlite_db, "h3@silver#p", "none") == "h3@none"
