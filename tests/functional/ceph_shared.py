"""The run's one Ceph cluster (tests/functional/ceph_cluster.py), shared by
the pytest-xdist workers: the first worker that needs it brings it up under
a file lock, the others find it up; the controller stops it when the run
ends. A cluster start is about 15 s and a gigabyte: once per run, not per
worker or per test."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.functional.ceph_cluster import PACKAGES, CephError, Cluster, missing

FOLDER = "sharemgr-ceph"
DRIVER_ID = "manila"  # the cephx id the driver acts as (Manila's default)


def _root(base: Path) -> Path:
    # An xdist worker's basetemp is <the run's basetemp>/popen-gwN.
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _unavailable(msg: str) -> None:
    if IN_CI:
        pytest.fail(msg + " (CI=true: Ceph is required)")
    pytest.skip(msg)


def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    if missing():
        _unavailable(f"Ceph tests need {', '.join(missing())} (Debian packages {PACKAGES})")
    folder = _root(tmp_path_factory.getbasetemp()) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    ceph = Cluster(folder)
    with open(folder.parent / f"{FOLDER}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        failed = folder / "failed"
        if failed.exists():
            _unavailable(f"the test Ceph cluster did not start: {failed.read_text()}")
        if not (folder / "up").exists():
            try:
                ceph.up()
                ceph.client(DRIVER_ID)
            except CephError as exc:
                failed.write_text(str(exc))
                ceph.down()
                _unavailable(f"the test Ceph cluster did not start: {exc}")
            (folder / "up").write_text("")
    return ceph


def stop(config: pytest.Config) -> None:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    folder = factory.getbasetemp() / FOLDER
    if (folder / "run").is_dir():
        Cluster(folder).down()
