"""Backends that cannot stall each other: each backend's requests run on
workers of its own ([<backend>] request_workers, by default [DEFAULT]
request_workers), so creates hung on one backend leave another's create
to run at once. Through share-manager and sharectl, on SQLite + file locks
and on PostgreSQL + Redis."""

from __future__ import annotations

import pytest

from tests.functional.harness import SETUPS, servers, wait_until

pytestmark = pytest.mark.functional


@pytest.fixture(params=SETUPS)
def setup(request):
    return servers(request)


def _shares(d) -> dict[str, str]:
    return {s["name"]: s["status"] for s in d.json("share", "list")}


def test_a_hung_backend_holds_only_its_own_workers(deployment, setup, tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    # Every create on 'slow' waits at its gate until the test lifts it.
    (gates / "create_share").touch()
    d = deployment(**setup, host="isolation", backends={
        "slow": {"share_driver": "dummy", "dummy_gate_dir": str(gates),
                 "dummy_gate_poll_interval": "0.05", "request_workers": "1"},
        "fast": {"share_driver": "dummy"},
    }, extra={"DEFAULT": {"request_workers": "2"}})
    d.sync()
    d.start()
    for name in ("slow-1", "slow-2"):
        d.sharectl("share", "create", "1", "--proto", "NFS", "--name", name,
                   "--backend", "slow")
    wait_until(lambda: any(c["method"] == "create_share" for c in d.backend("calls",
                                                                           backend="slow")),
               what="a create hung on the slow backend")

    # The general workers (2) would be enough for both slow creates; the
    # slow backend has one of its own, so its second create waits, and the
    # fast backend's create runs at once on its own workers.
    made = d.json("share", "create", "1", "--proto", "NFS", "--name", "quick",
                  "--backend", "fast", "--wait", "--timeout", "60")
    assert made["status"] == "available"
    assert _shares(d) == {"slow-1": "creating", "slow-2": "creating", "quick": "available"}
    queue = d.json("status")["queue"]
    assert queue["isolation@slow"] == {"pending": 1, "running": 1}, queue

    (gates / "create_share").unlink()
    wait_until(lambda: set(_shares(d).values()) == {"available"}, timeout=60,
               what="the slow creates done once the backend answers")


def test_a_hung_backup_continue_stalls_neither_other_backends_nor_the_engine(
        deployment, setup, tmp_path):
    """A backend's backups are driven on (create_backup_continue) on a
    thread of that backend's own, off the periodic thread: one hung there
    leaves the other backend's backups to finish and the engine's heartbeat
    and membership going."""
    gates = tmp_path / "gates"
    gates.mkdir()
    d = deployment(**setup, host="isolation-backups", backends={
        "slow": {"share_driver": "dummy", "dummy_gate_dir": str(gates),
                 "dummy_gate_poll_interval": "0.05"},
        "fast": {"share_driver": "dummy"},
    }, extra={"DEFAULT": {"backup_continue_interval": "1"}})
    d.sync()
    d.start()
    slow = d.json("share", "create", "1", "--proto", "NFS", "--backend", "slow", "--wait")
    fast = d.json("share", "create", "1", "--proto", "NFS", "--backend", "fast", "--wait")
    (gates / "create_backup_continue").touch()
    d.sharectl("backup", "create", slow["id"], "--name", "held")
    wait_until(lambda: any(c["method"] == "create_backup_continue"
                           for c in d.backend("calls", backend="slow")),
               what="the slow backend's backup continue hung at its gate")

    done = d.json("backup", "create", fast["id"], "--name", "quick", "--wait",
                  "--timeout", "60")
    assert done["status"] == "available"
    # The heartbeat went on while the slow backend's call hung.
    (engine,) = d.json("service", "list")
    assert engine["alive"] is True, engine
    assert {b["name"]: b["status"] for b in d.json("backup", "list")} == {
        "held": "creating", "quick": "available"}

    (gates / "create_backup_continue").unlink()
    wait_until(lambda: {b["status"] for b in d.json("backup", "list")} == {"available"},
               timeout=60, what="the held backup done once its backend answers")
