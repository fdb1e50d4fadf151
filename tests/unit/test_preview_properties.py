"""The update preview against the real engine, for random templates and
random updates (issue 31): what ``stack update --dry-run`` says each
resource will go through (added, updated in place, replaced, deleted,
unchanged) is what the update then does, read back from the stack's
records after the in-process engine (tests/unit/stack_rig.py) ran it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from sharemgr.convergence import actions, preview

from tests.unit.property_scenarios import templates
from tests.unit.stack_rig import Rig

EXAMPLES = 30


def _current(rig: Rig) -> dict:
    stack = rig.stack("web")
    return actions.current_rows(rig.db, stack)


def _done(rig: Rig, before: dict, after: dict) -> dict[str, set[str]]:
    """Per change, the names the update put through it, from the rows: a
    name's physical resource made anew is a replacement, the same one with
    other properties an update in place."""
    out: dict[str, set[str]] = {k: set() for k in (preview.ADDED, preview.UPDATED,
                                                   preview.REPLACED, preview.DELETED,
                                                   preview.UNCHANGED)}
    for name in set(before) | set(after):
        old, new = before.get(name), after.get(name)
        if old is None:
            out[preview.ADDED].add(name)
        elif new is None:
            out[preview.DELETED].add(name)
        elif new.physical_id != old.physical_id or new.type != old.type:
            out[preview.REPLACED].add(name)
        elif new.properties != old.properties:
            out[preview.UPDATED].add(name)
        else:
            out[preview.UNCHANGED].add(name)
    return out


def _said(got: preview.Preview) -> dict[str, set[str]]:
    return {k: got.names(k) for k in (preview.ADDED, preview.UPDATED, preview.REPLACED,
                                      preview.DELETED, preview.UNCHANGED)}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(first=templates(), second=templates())
def test_the_preview_says_what_the_update_does(first: dict, second: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp))
        try:
            e = rig.engine()
            rig.create("web", yaml.safe_dump(first))
            e.pump()
            assert rig.stack("web").status == "COMPLETE"
            before = _current(rig)
            text = yaml.safe_dump(second)
            said = preview.preview(rig.db, actions.load_template(text, rig.backends), before)
            assert not said.names(preview.UNKNOWN), said.changes
            rig.update("web", text)
            e.pump()
            assert rig.stack("web").status == "COMPLETE", rig.stack("web").status_reason
            assert _said(said) == _done(rig, before, _current(rig))
        finally:
            rig.close()


def test_the_comparison_tells_a_replacement_from_an_update() -> None:
    """The reading of the records has teeth: a name whose physical id
    changed is a replacement, one whose properties changed an update."""

    class Row:
        def __init__(self, pid: str, props: dict, type_: str = "share") -> None:
            self.physical_id, self.properties, self.type = pid, props, type_

    before = {"a": Row("p1", {"size": 1}), "b": Row("p2", {"size": 1}),
              "c": Row("p3", {"size": 1})}
    after = {"a": Row("p1", {"size": 2}), "b": Row("p9", {"size": 1}),
             "d": Row("p4", {"size": 1})}
    got = _done(None, before, after)  # type: ignore[arg-type]
    assert got == {"added": {"d"}, "updated": {"a"}, "replaced": {"b"}, "deleted": {"c"},
                   "unchanged": set()}
