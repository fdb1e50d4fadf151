"""Manage and unmanage (manager/manage_ops.py): what the intake refuses and
writes, what each operation records from the driver's answer, and the error
statuses, with the dummy driver over a real database (a fake one where an
answer must be wrong)."""

from __future__ import annotations

import types
import uuid

import pytest
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.db import api, models
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.exceptions import InvalidShareRequest
from sharemgr.drivers.testing import build_driver
from sharemgr.manager.intake import Intake, InvalidRequest

from tests.unit.reconcile_harness import (
    BACKEND,
    HOST,
    Engine,
    claimed,
    coord_url,
    expect,
    make_share,
)

DHSS = "srv"


class Conf:
    """What the intake reads of the configuration: two backends, one DHSS."""

    enabled_share_backends = [BACKEND, DHSS]
    host = HOST

    def __getitem__(self, group):
        return types.SimpleNamespace(driver_handles_share_servers=group == DHSS)


@pytest.fixture
def eng(engine_db, tmp_path):
    drivers = {BACKEND: build_driver(DummyDriver, tmp_path / "be", backend=BACKEND, setup=True),
               DHSS: build_driver(DummyDriver, tmp_path / "srv", backend=DHSS, setup=True,
                                  driver_handles_share_servers=True)}
    e = Engine(engine_db, coord_url(tmp_path), drivers=drivers)
    yield e
    e.close()


def run(eng, ident):
    """Carry out the resource's pending request, as the runner would."""
    req = [r for r in api.request_list(eng.db, vocab.REQUEST_PENDING) if r.resource_id == ident][0]
    outcome = eng.operations.perform(claimed(eng, req))
    api.conditional_update(eng.db, models.Request, req.id, {}, {"status": vocab.REQUEST_DONE})
    return outcome


def backend_share(eng, size=3, proto="NFS", backend=BACKEND):
    """A share on the dummy backend that no record names."""
    drv = eng.drivers[backend]
    share = {"id": str(uuid.uuid4()), "share_id": None, "name": "legacy", "size": size,
             "share_proto": proto, "host": "", "export_locations": []}
    return share["id"], drv.create_share(share)[0]["path"]


def objects(eng, backend=BACKEND):
    with eng.drivers[backend].state.reading() as tx:
        return {o["id"]: o for o in tx.objects()}


def instance_of(db, share_id):
    return api.query(db, models.ShareInstance, {"share_id": share_id}, include_deleted=True)[0]


def test_a_managed_share_gets_the_backend_s_size_and_ids(eng):
    old_id, path = backend_share(eng)
    intake = Intake(eng.db, Conf())
    share = intake.manage_share(path, "nfs", BACKEND, "adopted", {"tier": "gold"})
    inst = instance_of(eng.db, share.id)
    assert (share.size, share.share_proto, inst.status) == (0, "NFS", vocab.MANAGING)
    assert inst.export_locations[0]["path"] == path
    expect(run(eng, inst.id), Result.DONE)
    inst = instance_of(eng.db, share.id)
    assert inst.status == vocab.AVAILABLE
    assert api.get(eng.db, models.Share, share.id).size == 3
    obj = objects(eng)[inst.id]  # the backend object answers to the new ids now
    assert old_id not in objects(eng) and obj["share_id"] == share.id
    assert obj["details"]["managed_with"] == {"tier": "gold"}
    assert {loc["path"] for loc in inst.export_locations} == {
        loc["path"] for loc in obj["export_locations"]}
    with pytest.raises(InvalidRequest, match="already managed"):
        intake.manage_share(path, "NFS", BACKEND)


@pytest.mark.parametrize("args, words", [
    (("", "NFS", BACKEND), "export path must not be empty"),
    (("h:/p", "FTP", BACKEND), "unknown protocol"),
    (("h:/p", "NFS", "nope"), "unknown backend"),
    (("h:/p", "NFS", DHSS), "handles share servers"),
    (("h:/p", "NFS", BACKEND, None, {"": "x"}), "invalid driver option"),
    (("x" * 1025, "NFS", BACKEND), "at most 1024"),
])
def test_a_bad_manage_is_refused_and_writes_nothing(eng, args, words):
    with pytest.raises(InvalidRequest, match=words):
        Intake(eng.db, Conf()).manage_share(*args)
    assert api.request_list(eng.db) == []


class Answers(DummyDriver):
    """The dummy, with manage_existing answering what a test says."""

    answer: object = None

    def manage_existing(self, share, driver_options):
        return self.answer


@pytest.mark.parametrize("answer, words", [
    ({}, "did not say the share's size"),
    ({"size": "big"}, "unusable size"),
    ({"size": 0}, "unusable size"),
    ("3", "not a dict"),
    ({"size": 2, "export_locations": [{"no": "path"}]}, "unusable export locations"),
])
def test_an_answer_that_cannot_be_recorded_ends_manage_error(eng, tmp_path, answer, words):
    drv = build_driver(Answers, tmp_path / "answers", backend=BACKEND)
    drv.answer = answer
    eng.drivers[BACKEND] = drv
    share = Intake(eng.db, Conf()).manage_share("h:/p", "NFS", BACKEND)
    inst = instance_of(eng.db, share.id)
    expect(run(eng, inst.id), Result.FAILED, words)
    assert instance_of(eng.db, share.id).status == vocab.MANAGE_ERROR
    assert api.get(eng.db, models.Share, share.id).size == 0


def test_a_driver_error_ends_manage_error_and_unmanage_goes_from_there(eng):
    _, path = backend_share(eng, proto="CIFS")
    intake = Intake(eng.db, Conf())
    share = intake.manage_share(path, "NFS", BACKEND)
    inst = instance_of(eng.db, share.id)
    expect(run(eng, inst.id), Result.FAILED, "is a CIFS share, not NFS")
    assert instance_of(eng.db, share.id).status == vocab.MANAGE_ERROR
    # A share whose manage failed holds nothing: the path may be managed again.
    retry = intake.manage_share(path, "CIFS", BACKEND)
    run(eng, instance_of(eng.db, retry.id).id)
    assert instance_of(eng.db, retry.id).status == vocab.AVAILABLE
    intake.unmanage(vocab.SHARE, share.id)
    expect(run(eng, inst.id), Result.DONE)
    assert api.get(eng.db, models.Share, share.id) is None  # the record went, soft-deleted
    assert instance_of(eng.db, share.id).deleted_at is not None


def test_unmanage_keeps_the_share_on_the_backend_and_is_refused_while_needed(eng):
    intake = Intake(eng.db, Conf())
    _, path = backend_share(eng)
    share = intake.manage_share(path, "NFS", BACKEND)
    inst = instance_of(eng.db, share.id)
    expect(run(eng, inst.id), Result.DONE)
    snap = intake.create_snapshot(share.id)
    run(eng, api.query(eng.db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0].id)
    with pytest.raises(InvalidRequest, match="has snapshots"):
        intake.unmanage(vocab.SHARE, share.id)
    intake.unmanage(vocab.SNAPSHOT, snap.id)
    snap_inst = api.query(eng.db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0]
    assert snap_inst.status == vocab.UNMANAGING
    expect(run(eng, snap_inst.id), Result.DONE)
    assert api.get(eng.db, models.ShareSnapshot, snap.id) is None
    assert snap_inst.id in objects(eng)
    with pytest.raises(InvalidRequest, match="no share"):
        intake.unmanage(vocab.SHARE, "nope")
    with pytest.raises(InvalidRequest, match="a replica cannot be unmanaged"):
        intake.unmanage(vocab.REPLICA, inst.id)
    intake.unmanage(vocab.SHARE, share.id)
    with pytest.raises(InvalidRequest, match="'unmanage_starting'"):
        intake.unmanage(vocab.SHARE, share.id)
    expect(run(eng, inst.id), Result.DONE)
    assert api.get(eng.db, models.Share, share.id) is None and inst.id in objects(eng)
    with eng.drivers[BACKEND].state.reading() as tx:
        calls = [c["method"] for c in tx.calls()]
    assert "delete_share" not in calls and "unmanage" in calls


def test_a_driver_that_refuses_unmanage_leaves_unmanage_error(eng, tmp_path):
    class Refusing(DummyDriver):
        def unmanage(self, share):
            raise InvalidShareRequest("replicated on the array")

    eng.drivers[BACKEND] = build_driver(Refusing, tmp_path / "refusing", backend=BACKEND)
    inst = make_share(eng.db)
    Intake(eng.db, Conf()).unmanage(vocab.SHARE, inst.share_id)
    expect(run(eng, inst.id), Result.FAILED, "replicated on the array")
    assert api.get(eng.db, models.ShareInstance, inst.id).status == vocab.UNMANAGE_ERROR


def test_a_managed_snapshot_gets_its_size_or_its_share_s(eng, tmp_path):
    intake = Intake(eng.db, Conf())
    _, path = backend_share(eng, size=4)
    share = intake.manage_share(path, "NFS", BACKEND)
    inst = instance_of(eng.db, share.id)
    expect(run(eng, inst.id), Result.DONE)
    drv = eng.drivers[BACKEND]
    snap_d = {"id": "backend-snap", "snapshot_id": None, "share_instance_id": inst.id,
              "share_id": share.id, "name": "old", "size": 4}
    drv.create_snapshot(snap_d)
    with pytest.raises(InvalidRequest, match="provider location must not be empty"):
        intake.manage_snapshot(share.id, " ")
    snap = intake.manage_snapshot(share.id, "backend-snap", "s", {"k": "v"})
    snap_inst = api.query(eng.db, models.ShareSnapshotInstance, {"snapshot_id": snap.id})[0]
    assert (snap.size, snap_inst.status) == (0, vocab.MANAGING)
    expect(run(eng, snap_inst.id), Result.DONE)
    snap_inst = api.get(eng.db, models.ShareSnapshotInstance, snap_inst.id)
    assert (snap_inst.status, snap_inst.provider_location) == (vocab.AVAILABLE, "backend-snap")
    assert api.get(eng.db, models.ShareSnapshot, snap.id).size == 4
    assert objects(eng)[snap_inst.id]["snapshot_id"] == snap.id
    with pytest.raises(InvalidRequest, match="already managed"):
        intake.manage_snapshot(share.id, "backend-snap")

    class NoSize(DummyDriver):
        def manage_existing_snapshot(self, snapshot, driver_options):
            return {"provider_location": "elsewhere"}

    eng.drivers[BACKEND] = build_driver(NoSize, tmp_path / "nosize", backend=BACKEND)
    other = intake.manage_snapshot(share.id, "somewhere")
    other_inst = api.query(eng.db, models.ShareSnapshotInstance, {"snapshot_id": other.id})[0]
    expect(run(eng, other_inst.id), Result.DONE)
    assert api.get(eng.db, models.ShareSnapshot, other.id).size == 4  # the share's, as Manila
    assert api.get(eng.db, models.ShareSnapshotInstance,
                   other_inst.id).provider_location == "elsewhere"


def test_share_servers_are_managed_by_identifier_and_unmanaged(eng, tmp_path):
    intake = Intake(eng.db, Conf())
    drv = eng.drivers[DHSS]
    drv.setup_server({"id": "array-server-1", "host": ""})
    with pytest.raises(InvalidRequest, match="does not handle share servers"):
        intake.manage_share_server("array-server-1", BACKEND)
    server = intake.manage_share_server("dummy-server-array-server-1", DHSS, {"vlan": "7"})
    assert server.status == vocab.MANAGING
    expect(run(eng, server.id), Result.DONE)
    row = api.get(eng.db, models.ShareServer, server.id)
    assert row.status == vocab.ACTIVE
    assert row.backend_details["identifier"] == "dummy-server-array-server-1"
    assert row.backend_details["server_name"] == "dummy-server-array-server-1"
    assert objects(eng, DHSS)[server.id]["details"]["managed_with"] == {"vlan": "7"}
    with pytest.raises(InvalidRequest, match="already managed"):
        intake.manage_share_server("dummy-server-array-server-1", DHSS)
    intake.unmanage(vocab.SHARE_SERVER, server.id)
    expect(run(eng, server.id), Result.DONE)
    assert api.get(eng.db, models.ShareServer, server.id) is None
    assert server.id in objects(eng, DHSS)

    class Base(DummyDriver):  # the base class's unmanage_server: not supported
        unmanage_server = ShareDriver.unmanage_server

    eng.drivers[DHSS] = build_driver(Base, tmp_path / "base", backend=DHSS,
                                     driver_handles_share_servers=True,
                                     dummy_state_path=drv.dummy_state_path)
    again = intake.manage_share_server("dummy-server-array-server-1", DHSS)
    expect(run(eng, again.id), Result.DONE)
    intake.unmanage(vocab.SHARE_SERVER, again.id)
    expect(run(eng, again.id), Result.FAILED, "unmanage_server")
    assert api.get(eng.db, models.ShareServer, again.id).status == vocab.UNMANAGE_ERROR
