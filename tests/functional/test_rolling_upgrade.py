"""A rolling upgrade (doc/operations.rst): the engine of the previous
schema head — the code before the commit that added the newest migration,
taken from git — runs on a database the new release synced to the newest
head (expand migrations only), restarts on it, and carries out what the
new sharectl asks, beside an engine of the new release. On SQLite + file
locks and on PostgreSQL + Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sharemgr.db import migration

from tests.functional.harness import SETUPS, Engine, servers, wait_until

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=SETUPS)
def server_kw(request) -> dict:
    return servers(request)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def previous_release(into: Path) -> tuple[Path, str]:
    """The tree before the newest migration was added, importable as
    ``sharemgr`` from the returned folder, and its schema head."""
    head = migration.head()
    (newest,) = (ROOT / "db" / "migrations" / "versions").glob(f"{head}_*.py")
    try:
        # The oldest commit that added a file of this revision: a migration
        # renamed before it was released shows as added again by the rename.
        added_by = _git("log", "--format=%H", "--diff-filter=A", "--",
                        str(newest.relative_to(ROOT).with_name(f"{head}_*.py"))).split()
        added = added_by[-1] if added_by else ""
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history to take the previous release from: {exc}")
    if not added:
        pytest.skip(f"{newest.name} is not committed yet")
    tree = into / "sharemgr"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", f"{added}^"],
                             capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=120)
    old_head = subprocess.run(
        [sys.executable, "-c", "from sharemgr.db import migration; print(migration.head())"],
        capture_output=True, text=True, check=True, env=_env(into), cwd=into).stdout.strip()
    assert old_head != head
    return into, old_head


def _env(old: Path) -> dict:
    # The old tree comes first on the path: ``sharemgr`` is its code (the
    # editable install's finder only answers what the path does not).
    return {**os.environ, "PYTHONPATH": str(old)}


def _old(d, old: Path, module: str, *args: str, name: str = "old") -> Engine | str:
    main = {"engine": "sharemgr.daemon.service", "sharectl": "sharemgr.cli.app"}[module]
    argv = [sys.executable, "-c", f"import sys; from {main} import main; sys.exit(main())",
            "--config-file", str(d.config), *args]
    if module == "sharectl":
        out = subprocess.run(argv, capture_output=True, text=True, env=_env(old), cwd=old,
                             timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout
    log = d.root / f"{name}.log"
    proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env=_env(old), cwd=old)
    engine = Engine(proc, log)
    d.engines.append(engine)
    return engine


def test_the_previous_release_runs_on_the_new_schema(deployment, server_kw, tmp_path):
    old, old_head = previous_release(tmp_path / "previous")
    d = deployment(**server_kw, host="rolling")
    # The previous release deployed: its db sync, its engine, a share.
    _old(d, old, "sharectl", "db", "sync")
    assert d.json("db", "version")["current"] == old_head
    first = _old(d, old, "engine", name="old-1")
    first.wait_for_log("share-manager up")
    kept = json.loads(_old(d, old, "sharectl", "share", "create", "1", "--proto", "NFS",
                           "--name", "kept", "--wait", "-f", "json"))

    # The new release's db sync, the old engine still running.
    d.sync()
    assert d.json("db", "version")["current"] == migration.head()
    made = d.json("share", "create", "1", "--proto", "NFS", "--name", "during", "--wait")
    assert made["status"] == "available"

    # The old engine restarts on the newer schema: it says so and serves.
    assert first.terminate() == 0
    again = _old(d, old, "engine", name="old-2")
    again.wait_for_log("share-manager up")
    assert f"newer than this engine's {old_head}" in again.text()
    extended = d.json("share", "extend", kept["id"], "2", "--wait")
    assert extended["size"] == 2 and extended["status"] == "available"

    # An engine of the new release beside it; the old one stops; all served.
    new = d.start(name="new")
    assert again.terminate() == 0
    deleted = d.sharectl("share", "delete", made["id"], "--wait")
    assert "deleted" in deleted.stdout
    wait_until(lambda: {s["name"]: s["status"] for s in d.json("share", "list")}
               == {"kept": "available"}, what="the shares as asked")
    assert new.terminate() == 0
