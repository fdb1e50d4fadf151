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
