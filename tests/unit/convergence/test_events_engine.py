"""The events the in-process engine (tests/unit/stack_rig.py) records, on
SQLite, PostgreSQL and MariaDB: an update's settled and unchanged nodes have
none, a replacement is a CREATE and a DELETE, a failure rolls back with one
ROLLBACK IN_PROGRESS event saying why, and a resource the failure left
unmade has no event (doc/convergence.rst, "Events")."""

from __future__ import annotations

import pytest
from sharemgr.db import stack_events

from tests.unit.stack_rig import Rig

SHARES = """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}, depends_on: [a]}
  c: {type: share, properties: {size: 1, proto: NFS}}
"""
# a grows in place (b follows it and is checked, unchanged); c is replaced;
# d is new.
CHANGED = SHARES.replace("a: {type: share, properties: {size: 1",
                         "a: {type: share, properties: {size: 2").replace(
    "c: {type: share, properties: {size: 1, proto: NFS}}",
    "c: {type: share, properties: {size: 1, proto: CIFS}}\n"
    "  d: {type: share, properties: {size: 1, proto: NFS}}")


@pytest.fixture
def any_rig(tmp_path, db_url):
    r = Rig(tmp_path, db_url=db_url, backends={"dummy": {
        "dummy_fail_methods": "create_share.web-bad-"}})
    yield r
    r.close()


def _seen(rig, stack, traversal=None):
    return [(e.resource_name, e.action, e.status)
            for e in stack_events.events(rig.db, stack.id)
            if traversal is None or e.traversal_id == traversal]


def test_an_update_records_what_it_changed_only(any_rig):
    rig = any_rig
    e = rig.engine()
    rig.create("web", SHARES)
    e.pump()
    tr = rig.update("web", CHANGED)
    e.pump()
    stack = rig.stack("web")
    assert (stack.action, stack.status) == ("UPDATE", "COMPLETE")
    got = stack_events.changes(stack_events.events(rig.db, stack.id), tr.traversal_id)
    assert (got.added, got.updated, got.replaced, got.deleted) == ({"d"}, {"a"}, {"c"}, set())
    seen = _seen(rig, stack, tr.traversal_id)
    assert not [s for s in seen if s[0] == "b"]  # checked, unchanged: no event
    assert seen[0] == (None, "UPDATE", "IN_PROGRESS")
    assert seen[-1] == (None, "UPDATE", "COMPLETE")  # after every resource's
    assert ("a", "UPDATE", "COMPLETE") in seen

    # Nothing changed: the stack's events only, settled or checked.
    again = rig.update("web", CHANGED)
    e.pump()
    assert _seen(rig, rig.stack("web"), again.traversal_id) == [
        (None, "UPDATE", "IN_PROGRESS"), (None, "UPDATE", "COMPLETE")]


def test_a_failure_rolls_back_with_its_reason(any_rig):
    rig = any_rig
    e = rig.engine()
    rig.create("web", SHARES.replace("  c:", "  bad:")
               + "  later: {type: share, properties: {size: 1, proto: NFS}, depends_on: [bad]}\n")
    e.pump()
    stack = rig.stack("web")
    assert (stack.action, stack.status) == ("ROLLBACK", "COMPLETE")
    events = stack_events.events(rig.db, stack.id)
    mine = [(x.resource_name, x.action, x.status) for x in events]
    assert ("bad", "CREATE", "FAILED") in mine
    assert ("bad", "DELETE", "COMPLETE") in mine
    # Never made: neither created nor deleted (was DELETE IN_PROGRESS and
    # COMPLETE, as if the rollback had removed something).
    assert not [m for m in mine if m[0] == "later"], mine
    stack_level = [x for x in events if x.resource_name is None]
    assert [(x.action, x.status) for x in stack_level] == [
        ("CREATE", "IN_PROGRESS"), ("CREATE", "FAILED"), ("ROLLBACK", "IN_PROGRESS"),
        ("ROLLBACK", "COMPLETE")]
    assert stack_level[2].reason.startswith("rolling back: Resource CREATE failed: bad")
    assert mine.index(("bad", "CREATE", "FAILED")) < mine.index((None, "CREATE", "FAILED"))
