"""A way out of error states (issue 14): 'sharectl <noun> delete --force'
through real share-manager processes, on SQLite and on PostgreSQL + Redis."""

from __future__ import annotations

import json

import pytest

from tests.functional.harness import SETUPS, servers

pytestmark = pytest.mark.functional

# The backend refuses to delete the snapshot and the replica of share 'doomed'
# (a replica carries its share's name).
FAILING = {"dummy": {"dummy_fail_methods": "delete_snapshot.doomed,delete_replica.doomed"}}


@pytest.fixture(params=SETUPS)
def setup(deployment, request):
    d = deployment(backends=FAILING, **servers(request))
    d.sync()
    return d


def _warnings(engine, needle: str) -> list[str]:
    return [line for line in engine.text().splitlines()
            if " WARNING " in line and needle in line]


def test_force_delete_out_of_error_deleting(setup):
    d = setup
    engine = d.start()
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "doomed", "--wait")["id"]
    snap = d.json("snapshot", "create", share, "--name", "doomed", "--wait")
    replica = d.json("replica", "create", share, "--wait")["id"]

    # A plain delete the driver refuses ends in error_deleting ...
    out = d.sharectl("snapshot", "delete", snap["id"], "--wait", check=False)
    assert out.returncode == 1 and "error_deleting" in out.stderr
    # ... and the snapshot keeps its share: refused, forced or not (as Manila).
    for extra in ((), ("--force",)):
        out = d.sharectl("share", "delete", share, *extra, check=False)
        assert out.returncode == 2 and "has snapshots" in out.stderr, out.stderr

    # Forced: the record goes though the driver still fails, tried once more.
    out = d.sharectl("snapshot", "delete", snap["id"], "--force", "--wait")
    assert f"snapshot {snap['id']} deleted" in out.stdout
    snap_inst = snap["instance_id"]
    assert len(_warnings(engine, f"forced delete of snapshot instance {snap_inst}")) == 1
    left = _warnings(engine, f"snapshot instance {snap_inst} may remain on backend hostA@dummy")
    assert left and "delete_snapshot failed" in left[0]
    calls = [c for c in d.backend("calls") if c["method"] == "delete_snapshot"]
    assert len(calls) == 2  # the plain delete and the forced one

    # A replica straight from available: forced, the driver failing.
    out = d.sharectl("replica", "delete", replica, "--force", "--wait")
    assert f"replica {replica} deleted" in out.stdout
    assert _warnings(engine, f"replica {replica} may remain on backend hostA@dummy")

    # What the forced deletes could not remove is still on the backend; the
    # dummy backend, like a real one, will not drop a share under a snapshot:
    # the admin cleans up there, as the warning says.
    assert {(o["kind"], o["id"]) for o in d.backend("list")} >= {
        ("snapshot", snap_inst), ("replica", replica)}
    d.backend("remove", snap_inst)

    # The parent is deletable now, the plain way.
    out = d.sharectl("share", "delete", share, "--wait")
    assert f"share {share} deleted" in out.stdout
    assert d.json("share", "list") == []
    assert {(o["kind"], o["id"]) for o in d.backend("list")} == {("replica", replica)}
    forced = [r for r in d.json("request", "list") if r["action"] == "delete"]
    assert {r["status"] for r in forced} == {"done", "failed"}


def test_force_delete_of_a_share_no_engine_serves(setup):
    """A share created for a host no engine serves waits in creating; its
    forced delete removes it at once (a delete request would wait for ever
    too), and its create's request ends failed: nothing reached a backend."""
    d = setup
    d.start()
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--host", "nowhere",
                     "-f", "json")
    assert "no live share-manager serves nowhere@dummy" in out.stderr
    share = d.json("share", "show", json.loads(out.stdout)["id"])
    assert share["status"] == "creating"
    # Not forced: refused from creating, as before.
    out = d.sharectl("share", "delete", share["id"], check=False)
    assert out.returncode == 2 and "its status is 'creating'" in out.stderr
    assert "an admin's delete --force starts from any status" in out.stderr
    out = d.sharectl("share", "delete", share["id"], "--force", "--wait")
    assert f"share {share['id']} deleted (no engine had begun its create" in out.stdout
    assert "no live share-manager" not in out.stderr  # nothing left to wait for
    assert d.sharectl("share", "show", share["id"], check=False).returncode == 2
    (create,) = [r for r in d.json("request", "list", "--resource", share["id"])
                 if r["action"] == "create"]
    assert create["status"] == "failed" and "force-deleted" in create["error"]
    assert not [c for c in d.backend("calls") if c["resource_id"] is not None]


def test_a_share_with_a_backup_is_not_deleted_even_forced(setup):
    """A backup is restored into its share alone: the share waits for its
    backups to go, as in Manila; a restore into it once shrunk below the
    backup is refused before anything is written."""
    d = setup
    d.start()
    share = d.json("share", "create", "2", "--proto", "NFS", "--wait")["id"]
    backup = d.json("backup", "create", share, "--name", "b", "--wait")["id"]
    d.sharectl("share", "shrink", share, "1", "--wait")
    out = d.sharectl("backup", "restore", backup, "--wait", check=False)
    assert out.returncode == 2 and "(2 GiB) into share" in out.stderr, out.stderr
    assert d.json("share", "show", share)["status"] == "available"
    d.sharectl("share", "extend", share, "2", "--wait")
    assert d.json("backup", "restore", backup, "--wait")["status"] == "available"
    for extra in ((), ("--force",)):
        out = d.sharectl("share", "delete", share, *extra, check=False)
        assert out.returncode == 2 and "has 1 backup(s)" in out.stderr, out.stderr
    assert d.json("share", "show", share)["status"] == "available"
    d.sharectl("backup", "delete", backup, "--wait")
    assert f"share {share} deleted" in d.sharectl("share", "delete", share, "--wait").stdout
