from __future__ import annotations

import pytest

from tests.functional import ceph_shared
from tests.functional import local_harness as lh
from tests.functional.etcd_cluster import Cluster
from tests.functional.harness import Deployment


@pytest.fixture
def deployment(tmp_path):
    """A factory: deployment(**kw) -> Deployment; engines are stopped afterwards."""
    made = []

    def factory(**kw) -> Deployment:
        d = Deployment(tmp_path / f"d{len(made)}", **kw)
        made.append(d)
        return d

    yield factory
    for d in made:
        d.stop_all()


@pytest.fixture
def etcd_cluster(tmp_path):
    """A 3-member etcd cluster behind a gateway, stopped afterwards."""
    cluster = Cluster(tmp_path / "etcd")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def etcd_url(etcd_cluster):
    """tooz's URL of the test's own etcd cluster (each test has its own: tooz's
    etcd driver has no namespace, and engines of other tests must not be
    seen coming and going)."""
    return etcd_cluster.url()


LOCAL_OPTIONS = {"DEFAULT": {"startup_reconciliation_wait_seconds": "2"}}


@pytest.fixture
def local(deployment):
    """A factory: local(**kw) -> (Deployment, backend options), one [local]
    backend on ports of its own; its servers, mounts and loop devices are
    gone afterwards. Skips (fails under CI=true) without root and packages."""
    lh.require_local()
    made = []

    def factory(**kw):
        options = lh.backend_options()
        d = deployment(backends={"local": options}, extra=LOCAL_OPTIONS, **kw)
        d.sync()
        made.append(d)
        return d, options

    yield factory
    for d in made:
        d.stop_all()
        lh.cleanup(lh.local_root(d.state))


@pytest.fixture(scope="session")
def ceph_cluster(tmp_path_factory):
    """One Ceph cluster for the whole run, shared by every worker (the
    first to need it brings it up, under a file lock); stopped at the end
    of the run (``pytest_sessionfinish`` in tests/conftest.py). Tests keep apart by subvolume
    group."""
    return ceph_shared.cluster(tmp_path_factory)

