"""The ``rig`` fixture of the stack worker tests: a Rig (tests/unit/stack_rig.py)
in the test's folder, closed after the test."""

from __future__ import annotations

import pytest

from tests.unit.stack_rig import Rig


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()

