"""The update preview against the real engine, for random templates and
random updates (issue 31): what ``stack update --dry-run`` says each
resource will go through (added, updated in place, replaced, deleted,
retained, unchanged) is what the update then does, read back from the
stack's rows and from its events after the in-process engine
(tests/unit/stack_rig.py) ran it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sharemgr.convergence import actions, preview
from sharemgr.convergence import physical as phys
from sharemgr.db import models, stack_events

from tests.unit.property_scenarios import templates
from tests.unit.stack_rig import Rig

EXAMPLES = 30
CLASSES = (preview.ADDED, preview.UPDATED, preview.REPLACED, preview.DELETED,
           preview.RETAINED, preview.UNCHANGED)


def _refs(value: object) -> set[str]:
    if isinstance(value, dict):
        if "get_resource" in value:
            return {value["get_resource"]}
        return {r for v in value.values() for r in _refs(v)}
    return set()


@st.composite
def kept_templates(draw: st.DrawFn) -> dict:
    """A template of the property tests' strategy, some resources with
    ``deletion_policy: retain`` (only where everything they refer to is
    retained too, as the template requires)."""
    template = draw(templates())
    retained: set[str] = set()
    for name, res in template["resources"].items():
        parents = _refs(res["properties"]) | set(res.get("depends_on", ()))
        if parents <= retained and draw(st.booleans()):
            res["deletion_policy"] = "retain"
            retained.add(name)
    return template


def _current(rig: Rig) -> dict[str, models.StackResource]:
    stack = rig.stack("web")
    return actions.current_rows(rig.db, stack)


class _Row(Protocol):
    """What the comparison reads of a resource's row."""

    @property
    def physical_id(self) -> str | None: ...

    @property
    def type(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, object]: ...


R = TypeVar("R", bound=_Row)


def _done(before: Mapping[str, R], after: Mapping[str, R],
          exists: Callable[[R], bool]) -> dict[str, set[str]]:
    """Per change, the names the update put through it, from the rows: a
    name's physical resource made anew is a replacement, the same one with
    other properties an update in place; a name gone whose physical resource
    is still there was retained. Replacements whose old physical resource
    is still there go in ``kept`` as well."""
    out: dict[str, set[str]] = {k: set() for k in (*CLASSES, "kept")}
    for name in set(before) | set(after):
        old, new = before.get(name), after.get(name)
        if old is None:
            out[preview.ADDED].add(name)
        elif new is None:
            out[preview.RETAINED if exists(old) else preview.DELETED].add(name)
        elif new.physical_id != old.physical_id or new.type != old.type:
            out[preview.REPLACED].add(name)
            if exists(old):
                out["kept"].add(name)
        elif new.properties != old.properties:
            out[preview.UPDATED].add(name)
        else:
            out[preview.UNCHANGED].add(name)
    return out


def _exists(rig: Rig, row) -> bool:
    return phys.observe(rig.db, row.type, row.physical_id).state != phys.GONE


def _said(got: preview.Preview) -> dict[str, set[str]]:
    return {**{k: got.names(k) for k in CLASSES},
            "kept": {c.name for c in got.changes if c.kept}}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(first=kept_templates(), second=kept_templates())
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
            traversal = rig.update("web", text).traversal_id
            e.pump()
            stack = rig.stack("web")
            assert stack.status == "COMPLETE", stack.status_reason
            done = _done(before, _current(rig), lambda row: _exists(rig, row))
            assert _said(said) == done
            # The stack's events say the same (a retained resource's row is
            # deleted as any other's: its physical resource tells them apart).
            recorded = stack_events.changes(stack_events.events(rig.db, stack.id), traversal)
            assert (recorded.added, recorded.updated, recorded.replaced, recorded.deleted) == (
                done[preview.ADDED], done[preview.UPDATED], done[preview.REPLACED],
                done[preview.DELETED] | done[preview.RETAINED])
        finally:
            rig.close()


def test_the_comparison_tells_a_replacement_from_an_update() -> None:
    """The reading of the records has teeth: a name whose physical id
    changed is a replacement, one whose properties changed an update."""

    class Row:
        def __init__(self, pid: str, props: dict[str, object], type_: str = "share") -> None:
            self.physical_id: str | None = pid
            self.properties: Mapping[str, object] = props
            self.type = type_

    before = {"a": Row("p1", {"size": 1}), "b": Row("p2", {"size": 1}),
              "c": Row("p3", {"size": 1})}
    after = {"a": Row("p1", {"size": 2}), "b": Row("p9", {"size": 1}),
             "d": Row("p4", {"size": 1})}
    got = _done(before, after, lambda row: row.physical_id == "p3")
    assert got["retained"] == {"c"} and not got["deleted"]
    got = _done(before, after, lambda row: False)
    assert got == {"added": {"d"}, "updated": {"a"}, "replaced": {"b"}, "deleted": {"c"},
                   "retained": set(), "unchanged": set(), "kept": set()}
