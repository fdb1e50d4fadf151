from __future__ import annotations

import pytest

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
