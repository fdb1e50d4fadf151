"""Capabilities and pools through real share-manager processes and sharectl:
the engine refreshes its backend's get_share_stats() report into the
database, ``sharectl backend list`` / ``pool list`` show it, and what the
report rules out is refused at intake (exit 2, nothing written) or fails a
stack's resource. On SQLite + file locks and on PostgreSQL + Redis. The
loader refuses a DHSS mode the driver does not declare with one line."""

from __future__ import annotations

import textwrap

import pytest
from sharemgr.db import api, models
from sharemgr.manager import capabilities

from tests.functional.harness import SETUPS, database, servers, wait_until
from tests.functional.test_daemon import one_error_line
from tests.functional.test_health import _get, _sample, _url
from tests.unit.drivers.test_loader import write_dist

pytestmark = pytest.mark.functional

# No snapshots, two small pools; stats refreshed often so a test sees the
# free capacity drop without waiting long.
BACKENDS = {"dummy": {"dummy_snapshot_support": "false", "dummy_pools": "p1:10,p2:4"}}
EXTRA = {"DEFAULT": {"backend_stats_interval": "0.3"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(backends=BACKENDS, extra=EXTRA, **servers(request))
    d.sync()
    db, _ = database(d)
    yield d, db
    db.dispose()


def _free(d) -> dict[str, int]:
    return {p["name"]: p["free_capacity_gb"] for p in d.json("pool", "list")}


def _pool_free(db, host: str, pool: str) -> float | None:
    """What the engine last stored (read in-process: polling through
    sharectl would cost a process start per look)."""
    report = capabilities.report(db, host)
    found = report.pool(pool) if report else None
    return found.free_gb if found else None


def _written(db) -> tuple[int, ...]:
    return tuple(len(api.query(db, m, include_deleted=True)) for m in (
        models.Share, models.ShareInstance, models.ShareSnapshot,
        models.ShareSnapshotInstance)) + (len(api.request_list(db)),)


def _refused(d, db, *args: str) -> str:
    """``sharectl args`` exits 2 with one message and writes nothing."""
    before = _written(db)
    out = d.sharectl(*args, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert _written(db) == before
    return out.stderr


def test_requests_the_backend_cannot_serve_are_refused(setup):
    d, db = setup
    d.start()
    backends = wait_until(lambda: d.json("backend", "list"), what="the backend's report")
    assert [(b["host"], b["backend"]) for b in backends] == [(d.host, "dummy")]
    (report,) = backends
    assert report["snapshot_support"] is False and report["replication_type"] == "readable"
    assert report["driver_handles_share_servers"] is False and report["pools"] == 2
    assert _free(d) == {f"{d.host}@dummy#p1": 10, f"{d.host}@dummy#p2": 4}

    # Over every pool's free capacity.
    err = _refused(d, db, "share", "create", "11", "--proto", "NFS")
    assert "11 GiB is more than the free capacity of every pool of backend 'dummy'" in err

    # A share that fits goes to the pool with the most free space.
    share = d.json("share", "create", "7", "--proto", "NFS", "--wait")
    assert share["status"] == "available" and share["host"] == f"{d.host}@dummy#p1"
    p1, p2 = f"{d.host}@dummy#p1", f"{d.host}@dummy#p2"
    wait_until(lambda: _pool_free(db, p1, "p1") == 3, what="p1's free capacity to drop")
    assert _free(d) == {p1: 3, p2: 4}

    # No snapshot support.
    err = _refused(d, db, "snapshot", "create", share["id"], "--name", "s1")
    assert f"cannot snapshot share {share['id']}" in err and "snapshot_support" in err

    # The pool is fuller now: extending past its free capacity is refused.
    err = _refused(d, db, "share", "extend", share["id"], "11")
    assert f"4 GiB is more than the 3 GiB free in pool '{p1}'" in err
    # The next share fits p2 only.
    second = d.json("share", "create", "4", "--proto", "NFS", "--wait")
    assert second["host"] == p2
    wait_until(lambda: _pool_free(db, p2, "p2") == 0, what="p2 to fill up")

    # A stack gets the same refusal as a failed resource, not a crash.
    template = d.root / "big.yaml"
    template.write_text(textwrap.dedent("""
        resources:
          big:
            type: share
            properties: {size: 5, proto: NFS}
    """))
    out = d.sharectl("stack", "create", "big", "-t", str(template), "--disable-rollback",
                     "--wait", check=False)
    assert out.returncode == 1 and "CREATE FAILED" in out.stderr, out.stdout + out.stderr
    stack = d.json("stack", "show", "big")
    assert "more than the free capacity" in stack["status_reason"], stack
    assert len(api.query(db, models.Share)) == 2


PLUGIN = """
from sharemgr.drivers.dummy import DummyDriver


class NoServers(DummyDriver):
    supported_dhss_modes = (False,)
"""


def test_loader_refuses_an_unsupported_dhss_mode_with_one_line(deployment, tmp_path):
    site = tmp_path / "site"
    (site / "sm_caps_plugin").mkdir(parents=True)
    (site / "sm_caps_plugin" / "__init__.py").write_text(PLUGIN)
    write_dist(site, "sm-caps-plugin", {"no_servers": "sm_caps_plugin:NoServers"})
    d = deployment(backends={"gold": {"share_driver": "no_servers",
                                      "driver_handles_share_servers": "True"}})
    d.sync()
    out = d.run_manager(env={"PYTHONPATH": str(site)})
    assert out.returncode == 1, out.stdout + out.stderr
    line = one_error_line(out)
    assert "share-manager cannot start" in line and "backend [gold]" in line
    assert "driver_handles_share_servers = True is not supported" in line
    assert "share-manager up" not in out.stdout + out.stderr
    # The mode it declares starts.
    d.write_config(gold={"driver_handles_share_servers": "False"})
    engine = d.start(env={"PYTHONPATH": str(site)})
    assert engine.terminate() == 0


@pytest.fixture(params=SETUPS)
def server_kw(request) -> dict:
    return servers(request)


def test_concurrent_creates_cannot_overcommit_a_pool(deployment, server_kw):
    """Three 60 GiB creates at once in a 100 GiB pool (three sharectl
    processes, one report read by all): one is accepted, two refused with
    exit 2; ``pool list`` shows 60 allocated and 40 of room, and the pool is
    never overcommitted on the backend (its free capacity is not below 0)."""
    import subprocess

    from tests.functional.harness import tool

    d = deployment(backends={"dummy": {"dummy_pools": "p:100"}},
                   extra={**EXTRA, "health": {"enabled": "true", "port": "0"}}, **server_kw)
    d.sync()
    engine = d.start()
    host = f"{d.host}@dummy"
    wait_until(lambda: _free(d) == {f"{host}#p": 100}, what="the pool reported")
    procs = [subprocess.Popen([tool("sharectl"), "--config-file", str(d.config), "share",
                               "create", "60", "--proto", "NFS", "--name", f"big-{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    outs = [(p.wait(120), *p.communicate()) for p in procs]
    assert sorted(rc for rc, _out, _err in outs) == [0, 2, 2], outs
    for rc, _out, err in outs:
        if rc == 2:
            # Refused by the plan (it read the accepted one's instance) or by
            # the claim in the write (it planned before that was written).
            assert ("60 GiB is more than the free capacity of every pool" in err
                    or "60 GiB does not fit in pool" in err), err
            assert "Traceback" not in err
    (pool,) = d.json("pool", "list")
    assert (pool["allocated_capacity_gb"], pool["room_gb"]) == (60, 40), pool
    _, text = _get(_url(engine) + "/metrics")
    labels = {"pool": f"{host}#p", "backend": "dummy"}
    assert _sample(text, "sharemgr_pool_allocated_capacity_gb", **labels) == 60
    assert _sample(text, "sharemgr_pool_room_gb", **labels) == 40
    assert _sample(text, "sharemgr_pool_total_capacity_gb", **labels) == 100
    wait_until(lambda: d.json("share", "list")[0]["status"] == "available",
               what="the accepted create done")
    wait_until(lambda: _free(d) == {f"{host}#p": 40}, what="the backend's report after it")
