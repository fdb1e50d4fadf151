"""doc/design.rst's two walks (a share create from the request loop; one
stack node's check) are the paths the interpreter takes: each is traced
(tests/unit/walk.py) on the real dummy driver, real SQLite and the real
tooz file coordinator, and compared line by line with the doc. A change
of the path changes the doc with it; the failure prints the new walk."""

from __future__ import annotations

import pytest
from sharemgr.db import api, models
from sharemgr.manager.intake import Intake
from sharemgr.manager.runner import RequestRunner

from tests.unit.stack_rig import Rig
from tests.unit.walk import ROOT, Walk, trace

DESIGN = ROOT / "doc" / "design.rst"
# The driver behind its wrapper is the backend's, not the framework's path.
DRIVER = frozenset({("drivers/timing.py", "call")})
PERFORM = frozenset({("manager/operations.py", "perform")})
TWO_SHARES = """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
"""


def _documented(title: str) -> list[str]:
    """The literal block after the line ending in ``title``."""
    lines = DESIGN.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith(title))
    block: list[str] = []
    for line in lines[start + 2:]:
        if line.strip() and not line.startswith(" " * 8):
            break
        if line.strip():
            block.append(line[8:].rstrip())
    return block


def _same(walk: Walk, title: str) -> None:
    assert walk.lines() == _documented(title), "the walk is now:\n" + "\n".join(walk.lines())


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()


def test_a_share_create_walks_as_the_design_says(rig):
    engine = rig.engine()
    Intake(rig.db, engine.conf).create_share(1, "NFS", backend="dummy")
    (req,) = api.request_claim(rig.db, engine.hosts, engine.engine_id, 5)
    runner = RequestRunner(rig.db, engine.engine_id, engine.hosts,
                           lambda _req: engine.operations.handle, workers=1,
                           poll_interval=0.05, any_host=True)
    walk = trace(lambda: runner._execute(req), DRIVER)
    assert api.get(rig.db, models.Request, req.id).status == "done"
    _same(walk, "A share create, step by step::")
    assert len(walk.modules()) <= 15
    # The lock taken and asked again right before the driver call is one
    # visit: only the database is called between the two.
    assert walk.revisited() == {}


def test_a_stack_node_walks_as_the_design_says(rig):
    """The second of two independent shares: the traversal's template and
    graph are loaded (once per engine and traversal) by the first."""
    engine = rig.engine()
    rig.create("two", TWO_SHARES)
    (first,) = engine.claim()
    engine.run(first)
    (second,) = engine.claim()
    walk = trace(lambda: engine.worker(second), DRIVER | PERFORM)
    assert rig.stack("two").status == "COMPLETE"
    _same(walk, "A stack node, step by step::")
