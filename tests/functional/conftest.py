from __future__ import annotations

import pytest

from tests.functional import local_harness as lh
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
