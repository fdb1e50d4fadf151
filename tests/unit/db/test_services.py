"""Each engine's backends and their state (service_backends, migration
0008), on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid

from sharemgr.cli.service_cmds import backend_states
from sharemgr.common import vocab
from sharemgr.db import models, services

HOST = "h" * 255
ENGINE = f"{HOST}.{uuid.uuid4()}"


def test_states_are_recorded_and_listed_per_engine(db):
    services.service_register(db, HOST, "share-manager", ENGINE)
    other = f"{HOST}.{uuid.uuid4()}"
    services.service_register(db, HOST, "share-manager", other)
    long_name = "b" * 128
    for backend in ("dummy", long_name):
        services.service_backend_set(db, ENGINE, backend, vocab.BACKEND_INITIALIZING)
    services.service_backend_set(db, ENGINE, "dummy", vocab.BACKEND_UP)
    reason = "do_setup failed: ShareBackendException: cannot reach array: " + "x" * 2000
    services.service_backend_set(db, ENGINE, long_name, vocab.BACKEND_FAILED, reason)
    services.service_backend_set(db, other, "dummy", vocab.BACKEND_UP)

    found = services.service_backends(db, [ENGINE, other, "nobody"])
    assert [(r.backend, r.state) for r in found[ENGINE]] == [
        (long_name, "failed"), ("dummy", "up")]
    stored = found[ENGINE][0].reason
    # Cut to the column, marked as cut; the start is kept.
    assert len(stored) == models.BACKEND_REASON and stored.endswith("...")
    assert stored.startswith("do_setup failed: ShareBackendException: cannot reach array")
    assert [(r.backend, r.state) for r in found[other]] == [("dummy", "up")]
    assert found["nobody"] == [] and services.service_backends(db, []) == {}

    # Up again: the reason goes.
    services.service_backend_set(db, ENGINE, long_name, vocab.BACKEND_UP)
    assert [(r.state, r.reason) for r in services.service_backends(db, [ENGINE])[ENGINE]] == [
        ("up", None), ("up", None)]


def test_the_list_column_names_each_backend_and_why_it_failed(sqlite_db):
    services.service_backend_set(sqlite_db, ENGINE, "broken", vocab.BACKEND_FAILED,
                            "do_setup failed: OSError: no route")
    services.service_backend_set(sqlite_db, ENGINE, "dummy", vocab.BACKEND_UP)
    services.service_backend_set(sqlite_db, ENGINE, "slow", vocab.BACKEND_INITIALIZING)
    rows = services.service_backends(sqlite_db, [ENGINE])[ENGINE]
    assert backend_states(rows) == (
        "broken: failed (do_setup failed: OSError: no route), dummy: up, slow: initializing")
    # An engine not alive (killed, its membership expired) serves none: its
    # last states said "up" for ever.
    assert backend_states(rows, alive=False) == (
        "broken: down (engine not alive; was failed), dummy: down (engine not alive; was up), "
        "slow: down (engine not alive; was initializing)")


def test_the_health_endpoint_sees_each_backends_state(sqlite_db):
    import types

    from sharemgr.daemon import health
    from sharemgr.daemon.backends import BackendSetup

    service = types.SimpleNamespace(db=sqlite_db, engine_id=ENGINE, drivers={})
    setup = BackendSetup(service)
    setup.record("dummy", vocab.BACKEND_UP)
    setup.record("broken", vocab.BACKEND_FAILED, "do_setup failed: OSError: no route")
    setup.record("slow", vocab.BACKEND_INITIALIZING)
    service.backend_states = setup.states  # what ShareManagerService exposes
    assert health.backend_states(service) == {
        "dummy": (True, "up"),
        "broken": (False, "failed (do_setup failed: OSError: no route)"),
        "slow": (False, "initializing")}
    # The same states in the database, for sharectl service list.
    rows = services.service_backends(sqlite_db, [ENGINE])[ENGINE]
    assert backend_states(rows) == (
        "broken: failed (do_setup failed: OSError: no route), dummy: up, slow: initializing")
    # An engine not alive (killed, its membership expired) serves none: its
    # last states said "up" for ever.
    assert backend_states(rows, alive=False) == (
        "broken: down (engine not alive; was failed), dummy: down (engine not alive; was up), "
        "slow: down (engine not alive; was initializing)")


def test_heartbeats_are_written_and_aged_by_the_databases_clock(db, monkeypatch):
    """An engine whose clock runs two minutes ahead neither ages a peer's
    fresh heartbeat by two minutes nor cleans up the record of an engine
    that stopped a moment ago as if it had been gone for a minute."""
    import datetime

    db_services = services
    db_services.service_register(db, "hostA", "share-manager", "e1")
    assert db_services.service_heartbeat(db, "e1")
    ahead = models.utcnow() + datetime.timedelta(minutes=2)
    monkeypatch.setattr(models, "utcnow", lambda: ahead)
    monkeypatch.setattr(db_services, "utcnow", lambda: ahead)
    [row], now = db_services.service_list_at(db)
    assert datetime.timedelta(0) <= now - row.heartbeat_at < datetime.timedelta(seconds=30)
    assert db_services.service_cleanup(db, alive=set(), older_than=60) == []
    assert [r.engine_id for r in db_services.service_list(db)] == ["e1"]
