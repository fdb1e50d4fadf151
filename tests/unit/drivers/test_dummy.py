"""The dummy driver: the conformance kit, its knobs, its state and its command."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from sharemgr.drivers import dummy_cli, dummy_knobs
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.dummy_state import BackendObject, Call
from sharemgr.drivers.exceptions import (
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
)
from sharemgr.drivers.testing import DriverConformanceTests, build_driver


class TestDummyConformance(DriverConformanceTests):
    """The dummy driver, loaded by its entry point name, in both DHSS modes."""

    dhss_modes = (False, True)

    def make_driver(self, tmp_path, *, driver_handles_share_servers):
        return build_driver("dummy", tmp_path,
                            driver_handles_share_servers=driver_handles_share_servers)


class TestDummyWithoutStatusMethodsConformance(DriverConformanceTests):
    """With no status methods the kit skips what needs them and still passes."""

    def make_driver(self, tmp_path, *, driver_handles_share_servers):
        return build_driver(DummyDriver, tmp_path, dummy_status_methods=[],
                            driver_handles_share_servers=driver_handles_share_servers)


def wait_until(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def make(tmp_path, **options) -> DummyDriver:
    return build_driver(DummyDriver, tmp_path, setup=True, **options)


def share_dict(name: str = "data", size: int = 1, **extra) -> dict:
    return {"id": str(uuid.uuid4()), "share_id": str(uuid.uuid4()), "name": name,
            "size": size, "share_proto": "NFS", "host": "kithost@kit",
            "share_server_id": None, "export_locations": [], "snapshot_id": None, **extra}


def calls(drv: DummyDriver, method: str | None = None) -> list[Call]:
    with drv.state.reading() as tx:
        return [c for c in tx.calls() if method is None or c["method"] == method]


def objects(drv: DummyDriver) -> list[BackendObject]:
    with drv.state.reading() as tx:
        return tx.objects()


# Behaviour -----------------------------------------------------------------------


def test_extend_and_shrink_change_size_and_status_reports_it(tmp_path):
    drv = make(tmp_path)
    share = share_dict(size=2)
    locations = drv.create_share(share)
    drv.extend_share(share, 5)
    assert drv.get_share_status(share) == {
        "status": "available", "size": 5, "export_locations": locations}
    drv.shrink_share(share, 3)
    assert drv.get_share_status(share)["size"] == 3
    with pytest.raises(InvalidShareRequest):
        drv.extend_share(share, 2)
    with pytest.raises(InvalidShareRequest):
        drv.shrink_share(share, 4)


def test_create_again_with_the_same_id_returns_the_same_share(tmp_path):
    drv = make(tmp_path)
    share = share_dict()
    assert drv.create_share(share) == drv.create_share(share)
    assert len(objects(drv)) == 1


def test_delete_of_a_share_with_snapshots_is_refused(tmp_path):
    drv = make(tmp_path)
    share = share_dict()
    drv.create_share(share)
    snap = {"id": "snap-i", "snapshot_id": "snap", "share_instance_id": share["id"],
            "share_id": share["share_id"], "name": "s", "size": 1, "share": share}
    drv.create_snapshot(snap)
    with pytest.raises(InvalidShareRequest, match="in use by snapshot snap-i"):
        drv.delete_share(share)
    drv.delete_snapshot(snap)
    drv.delete_share(share)
    assert objects(drv) == []


def test_a_promote_moves_the_rules_and_the_deletes_find_either_kind(tmp_path):
    """The new active serves the rules the manager hands in; after a
    promote the share's delete and the old active's are each of the other
    kind of object, and still delete it."""
    drv = make(tmp_path)
    share = share_dict()
    drv.create_share(share)
    rep = {**share_dict(), "share_id": share["share_id"], "replica_state": "out_of_sync"}
    drv.create_replica(rep, {**share, "replica_state": "active"})
    rule = {"id": "r1", "access_type": "ip", "access_to": "10.0.0.0/24",
            "access_level": "rw"}
    denied = {"id": "r2", "access_type": "user", "access_to": "alice", "access_level": "rw"}
    states = drv.promote_replica([{**share, "replica_state": "active"}, rep], rep,
                                 [rule, denied])
    assert {s["id"]: s["replica_state"] for s in states} == {
        share["id"]: "in_sync", rep["id"]: "active"}
    by_id = {o["id"]: o for o in objects(drv)}
    assert by_id[rep["id"]]["details"]["access_rules"] == [
        {k: rule[k] for k in ("id", "access_type", "access_to", "access_level")}]
    drv.delete_replica(share)  # the first instance, a replica now
    drv.delete_share(rep)  # the promoted one, the share's instance now
    assert objects(drv) == []


def test_dhss_needs_a_known_share_server(tmp_path):
    drv = make(tmp_path, driver_handles_share_servers=True)
    with pytest.raises(InvalidShareRequest, match="needs a share server"):
        drv.create_share(share_dict())
    server = {"id": str(uuid.uuid4()), "host": "kithost@kit", "backend_details": {}}
    with pytest.raises(ShareResourceNotFound):
        drv.create_share(share_dict(), server)
    server["backend_details"] = drv.setup_server(server)
    share = share_dict()
    drv.create_share(share, server)
    kinds = sorted((o["kind"], o["share_server_id"]) for o in objects(drv))
    assert kinds == [("share", server["id"]), ("share_server", server["id"])]
    with pytest.raises(InvalidShareRequest, match="in use"):
        drv.teardown_server(server, server["backend_details"])


def test_no_share_servers_without_dhss(tmp_path):
    drv = make(tmp_path)
    with pytest.raises(InvalidShareRequest, match="does not handle share servers"):
        drv.setup_server({"id": "srv", "host": "h", "backend_details": {}})


def test_state_is_shared_by_drivers_of_two_engines(tmp_path):
    """Two engines on one host drive one backend: each sees what the other did,
    also when they work at the same time."""
    first = build_driver(DummyDriver, tmp_path / "a", setup=True,
                         dummy_state_path=str(tmp_path / "backend"))
    second = build_driver(DummyDriver, tmp_path / "b", setup=True,
                          dummy_state_path=str(tmp_path / "backend"))
    first.engine_id, second.engine_id = "hostA.one", "hostA.two"
    shares = {drv.engine_id: [share_dict(f"{drv.engine_id}-{i}") for i in range(40)]
              for drv in (first, second)}

    def work(drv):
        for share in shares[drv.engine_id]:
            drv.create_share(share)
            drv.extend_share(share, 2)

    threads = [threading.Thread(target=work, args=(d,)) for d in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for share in shares["hostA.one"] + shares["hostA.two"]:
        assert second.get_share_status(share)["size"] == 2
        assert first.get_share_status(share)["size"] == 2
    engines = {c["engine_id"] for c in calls(first, "create_share")}
    assert engines == {"hostA.one", "hostA.two"}


def test_backup_progresses_and_restores(tmp_path):
    drv = make(tmp_path)
    share = share_dict(size=4)
    drv.create_share(share)
    backup = {"id": "bk", "share_id": share["share_id"], "name": "nightly", "size": 4}
    drv.create_backup(share, backup)
    assert [drv.create_backup_continue(share, backup)["total_progress"] for _ in range(3)] == [
        "50", "100", "100"]
    drv.restore_backup(backup, share)
    assert drv.restore_backup_continue(backup, share) == {"total_progress": "50"}
    with pytest.raises(ShareResourceNotFound):
        drv.create_backup_continue(share, {"id": "nope"})


# Call log --------------------------------------------------------------------------


def test_every_call_is_logged_with_engine_and_resource(tmp_path):
    drv = make(tmp_path, dummy_status_methods=["get_share_status"])
    share = share_dict()
    drv.create_share(share)
    drv.get_share_status(share)
    drv.delete_share(share)
    drv.delete_share(share)  # already gone: still a call
    with pytest.raises(NotImplementedError):
        drv.get_snapshot_status({"id": "snap-x"})
    with pytest.raises(ShareResourceNotFound):
        drv.get_share_status({"id": "never"})
    log = calls(drv)
    assert [c["method"] for c in log] == [
        "do_setup", "check_for_setup_error", "create_share", "get_share_status",
        "delete_share", "delete_share", "get_snapshot_status", "get_share_status"]
    assert [c["resource_id"] for c in log[2:]] == [share["id"]] * 4 + ["snap-x", "never"]
    assert {c["engine_id"] for c in log} == {drv.engine_id}
    assert all(c["time"] for c in log)


# Knobs -------------------------------------------------------------------------------


def test_fail_methods_raise_a_driver_error_and_change_nothing(tmp_path):
    drv = make(tmp_path, dummy_fail_methods=["extend_share", "create_share.web-"])
    share = share_dict("data")
    drv.create_share(share)
    with pytest.raises(ShareBackendException, match="dummy_fail_methods"):
        drv.extend_share(share, 2)
    assert drv.get_share_status(share)["size"] == 1
    with pytest.raises(ShareBackendException):
        drv.create_share(share_dict("web-data-1"))
    assert len(objects(drv)) == 1
    assert len(calls(drv, "create_share")) == 2


def test_delays_sleep_per_method_and_prefix(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(dummy_knobs.time, "sleep", slept.append)
    drv = make(tmp_path, dummy_method_delays={"create_share": 0.5, "create_share.big-": 2,
                                              "delete_share": 0.25})
    drv.create_share(share_dict("small"))
    drv.create_share(share_dict("big-one"))
    drv.delete_share(share_dict("gone"))
    assert slept == [0.5, 2.0, 0.25]


def test_status_methods_can_be_switched_off(tmp_path):
    drv = make(tmp_path, dummy_status_methods=["get_snapshot_status"])
    share = share_dict()
    drv.create_share(share)
    with pytest.raises(NotImplementedError):
        drv.get_share_status(share)
    with pytest.raises(ShareResourceNotFound):
        drv.get_snapshot_status({"id": "never"})


def test_gate_holds_the_call_until_the_file_goes(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    drv = make(tmp_path, dummy_gate_dir=str(gates), dummy_gate_poll_interval=0.01)
    (gates / "create_share.web-data-").touch()
    other, held = share_dict("db-data-1"), share_dict("web-data-1")
    drv.create_share(other)  # another name passes the gate
    worker = threading.Thread(target=drv.create_share, args=(held,))
    worker.start()
    # A call is in the log before it waits at a gate.
    wait_until(lambda: any(c["resource_id"] == held["id"] for c in calls(drv)),
               what="the held call in the log")
    assert worker.is_alive()
    assert [o["id"] for o in objects(drv)] == [other["id"]]
    (gates / "create_share.web-data-").unlink()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert {o["id"] for o in objects(drv)} == {other["id"], held["id"]}


def test_gate_without_prefix_holds_every_call_of_the_method(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    drv = make(tmp_path, dummy_gate_dir=str(gates), dummy_gate_poll_interval=0.01)
    (gates / "delete_share").touch()
    share = share_dict("anything")
    drv.create_share(share)
    worker = threading.Thread(target=drv.delete_share, args=(share,))
    worker.start()
    wait_until(lambda: calls(drv, "delete_share"), what="delete_share in the log")
    assert worker.is_alive() and len(objects(drv)) == 1
    (gates / "delete_share").unlink()
    worker.join(timeout=30)
    assert objects(drv) == []


# The sharemgr-dummy-backend command -------------------------------------------------


def cli(capsys, *argv) -> tuple[int, object, str]:
    code = dummy_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


@pytest.fixture
def backend(tmp_path):
    drv = make(tmp_path)
    share = share_dict("data", size=2)
    drv.create_share(share)
    drv.create_replica({**share_dict("data-r"), "share_id": share["share_id"]}, share)
    return drv, share


def test_cli_list_and_calls(capsys, backend):
    drv, share = backend
    code, listed, _ = cli(capsys, "--state-path", drv.dummy_state_path, "list")
    assert code == 0
    assert [(o["kind"], o["id"], o["share_id"], o["name"], o["size"], o["status"])
            for o in listed][0] == ("share", share["id"], share["share_id"], "data", 2,
                                    "available")
    assert listed[0]["export_locations"][0]["path"].endswith(share["id"])
    assert {o["backend"] for o in listed} == {"kit"}
    code, log, _ = cli(capsys, "--state-path", drv.dummy_state_path, "calls",
                       "--method", "create_share")
    assert code == 0 and len(log) == 1
    assert {"method", "resource_id", "engine_id", "time"} <= set(log[0])
    assert (log[0]["resource_id"], log[0]["engine_id"]) == (share["id"], drv.engine_id)


def test_cli_finds_backends_under_the_manager_state_path(capsys, backend, tmp_path):
    drv, _ = backend
    code, listed, _ = cli(capsys, "--state-path", str(tmp_path / "state"), "list",
                          "--kind", "replica")
    assert code == 0 and [o["name"] for o in listed] == ["data-r"]


def test_cli_set_makes_drift_the_driver_reports(capsys, backend):
    drv, share = backend
    code, obj, _ = cli(capsys, "--state-path", drv.dummy_state_path, "set", share["id"],
                       "status=error", "size=5")
    assert code == 0 and (obj["status"], obj["size"]) == ("error", 5)
    assert drv.get_share_status(share)["status"] == "error"
    assert drv.get_share_status(share)["size"] == 5


def test_cli_remove_by_name(capsys, backend):
    drv, share = backend
    code, obj, _ = cli(capsys, "--state-path", drv.dummy_state_path, "remove", "data")
    assert code == 0 and obj["id"] == share["id"]
    with pytest.raises(ShareResourceNotFound):
        drv.get_share_status(share)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["set", "SHARE_ID", "colour=red"], "cannot set 'colour'"),
        (["set", "SHARE_ID", "size=big"], "bad value for size"),
        (["set", "SHARE_ID", "status"], "'status' is not key=value"),
        (["remove", "no-such-id"], "no object with id or name 'no-such-id'"),
        (["remove", "LOGICAL_ID"], "matches several objects"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(capsys, backend, argv, message):
    drv, share = backend
    argv = [a.replace("SHARE_ID", share["id"]).replace("LOGICAL_ID", share["share_id"])
            for a in argv]
    code, out, err = cli(capsys, "--state-path", drv.dummy_state_path, *argv)
    assert code == 2 and out is None
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_cli_without_state_is_bad_input(capsys, tmp_path):
    code, out, err = cli(capsys, "--state-path", str(tmp_path / "nothing"), "list")
    assert code == 2 and "no dummy backend state under" in err


def test_a_newer_token_fences_a_call_still_at_work(tmp_path):
    """Fencing: a call whose slow part is under way when a newer owner's
    call arrives is refused at its change, and changes nothing; the call
    log says which calls were fenced."""
    from sharemgr.drivers.exceptions import FencedCall

    gates = tmp_path / "gates"
    gates.mkdir()
    drv = make(tmp_path, dummy_gate_dir=str(gates))
    share = share_dict("data", size=2, fence_token=1)
    drv.create_share(share)
    (gates / "extend_share").touch()
    raised: list[BaseException] = []

    def old_owner() -> None:
        try:
            drv.extend_share(share, 5)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            raised.append(exc)

    thread = threading.Thread(target=old_owner)
    thread.start()
    while not calls(drv, "extend_share"):
        time.sleep(0.01)
    assert drv.get_share_status({**share, "fence_token": 2})["size"] == 2  # the new owner
    (gates / "extend_share").unlink()
    thread.join(10)
    assert len(raised) == 1 and isinstance(raised[0], FencedCall)
    assert drv.get_share_status({**share, "fence_token": 2})["size"] == 2
    with pytest.raises(FencedCall):
        drv.delete_share({**share, "fence_token": 1})  # refused as it arrives
    assert [c["fenced"] for c in calls(drv, "extend_share")] == [True]
    assert [(c["token"], c["fenced"]) for c in calls(drv, "delete_share")] == [(1, True)]
    assert drv.get_share_status({**share, "fence_token": None})["size"] == 2


def test_without_fencing_tokens_are_ignored(tmp_path):
    drv = make(tmp_path, dummy_honours_fencing=False)
    share = share_dict("data", size=2, fence_token=5)
    drv.create_share(share)
    drv.extend_share({**share, "fence_token": 1}, 3)
    assert drv.get_share_status(share)["size"] == 3
    assert {c["token"] for c in calls(drv)} == {None}


def test_two_engines_upgrading_an_old_state_file_at_once(tmp_path, monkeypatch):
    """An engine adds the call log's new columns to an older state file while
    another engine is opening it: the second must not add them again
    (a CI run lost an engine to ``duplicate column name``)."""
    import sqlite3

    from sharemgr.drivers import dummy_state

    folder = tmp_path / "backend"
    dummy_state.BackendState(str(folder), backend="dummy")
    path = folder / dummy_state.DB_NAME
    old = sqlite3.connect(path, isolation_level=None)
    # Back to the call log's first shape.
    old.executescript(
        "DROP TABLE calls; CREATE TABLE calls (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " time TEXT NOT NULL, method TEXT NOT NULL, resource_id TEXT,"
        " engine_id TEXT, pid INTEGER NOT NULL);")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    raced = []

    def other_engine_upgrades(statement: str) -> None:
        # The other engine adds the columns between this one's look and its
        # ALTER; it can only when this one does not hold the write lock.
        if "ADD COLUMN" in statement and not raced:
            try:
                for column, decl in dummy_state._CALL_COLUMNS.items():
                    other.execute(f"ALTER TABLE calls ADD COLUMN {column} {decl}")
                raced.append("added")
            except sqlite3.OperationalError as exc:
                raced.append(str(exc))

    real_conn = dummy_state.BackendState._conn

    def traced(self):
        conn = real_conn(self)
        conn.set_trace_callback(other_engine_upgrades)
        return conn

    monkeypatch.setattr(dummy_state.BackendState, "_conn", traced)
    dummy_state.BackendState(str(folder))
    assert raced == ["database is locked"]
    columns = {r[1] for r in old.execute("PRAGMA table_info(calls)")}
    assert set(dummy_state._CALL_COLUMNS) <= columns


def test_the_call_log_orders_calls_without_the_engines_clocks(tmp_path):
    """``finished_after``: the last call logged when a call finished. A call
    logged before another finished overlaps it whatever the times its
    engine wrote (an engine's clock may run two minutes ahead); one logged
    after does not."""
    from sharemgr.drivers.dummy_state import BackendState

    state = BackendState(str(tmp_path / "backend"), "dummy")
    with state.transaction() as tx:
        first = tx.log_call("extend_share", "s1", "e1")
    with state.transaction() as tx:
        during = tx.log_call("shrink_share", "s1", "e2")
    with state.transaction() as tx:
        tx.finish_call(first)
    with state.transaction() as tx:
        tx.finish_call(during)
    with state.transaction() as tx:
        after = tx.log_call("extend_share", "s1", "e1")
        tx.finish_call(after)
    calls = {c["seq"]: c for c in _calls(state)}
    assert during <= calls[first]["finished_after"]  # overlaps the first
    assert after > calls[during]["finished_after"]  # does not
    assert calls[after]["finished_after"] == after


def _calls(state):
    with state.transaction() as tx:
        return tx.calls()
