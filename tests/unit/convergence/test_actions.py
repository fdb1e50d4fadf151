"""Starting a traversal of an existing stack (``actions.start``) when
another traversal starts between the stack's read and the start's write: a
DELETE reads the stack again and goes on, an UPDATE is refused with nothing
written (the caller asked it of the stack as it saw it)."""

from __future__ import annotations

import pytest
from sharemgr.convergence import actions, lifecycle, prepare, template
from sharemgr.db import resources, stacks

from tests.unit.stack_rig import _status

V1 = template.parse("resources:\n  data: {type: share, properties: {size: 1, proto: NFS}}\n")
V2 = template.parse("resources:\n  data: {type: share, properties: {size: 2, proto: NFS}}\n")


def _stack(db):
    with db.session() as session:
        stack = stacks.stack_create_tx(session, "web")
    lifecycle.prepare_traversal(db, stack, "CREATE", V1)
    return stack.id


def _raced(monkeypatch, times):
    """The next ``times`` reads of a stack by name are each overtaken by
    another client's UPDATE; the traversals those started."""
    read = stacks.stack_lookup
    started = []

    def lookup(db, name_or_id):
        seen = read(db, name_or_id)
        if len(started) < times:
            started.append(lifecycle.prepare_traversal(db, read(db, name_or_id), "UPDATE", V2))
        return seen

    monkeypatch.setattr(stacks, "stack_lookup", lookup)
    return started


def test_a_delete_overtaken_by_an_update_reads_the_stack_again(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, actions.DELETE_TRIES - 1)
    tr = actions.start(db, "web", "DELETE")
    assert len(overtaken) == actions.DELETE_TRIES - 1
    stack = stacks.stack_get(db, stack_id)
    assert (stack.action, stack.current_traversal) == ("DELETE", tr.traversal_id)
    assert tr.traversal_id not in {t.traversal_id for t in overtaken}


def test_a_delete_overtaken_every_time_is_refused(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, actions.DELETE_TRIES)
    with pytest.raises(prepare.TraversalLost):
        actions.start(db, "web", "DELETE")
    stack = stacks.stack_get(db, stack_id)
    assert (stack.action, stack.current_traversal) == ("UPDATE", overtaken[-1].traversal_id)


def test_an_update_overtaken_by_another_is_refused_with_nothing_written(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, 1)
    with pytest.raises(prepare.TraversalLost):
        actions.start(db, "web", "UPDATE", V1)
    assert stacks.stack_get(db, stack_id).current_traversal == overtaken[0].traversal_id


UNKNOWN_SERVER = "00000000-0000-0000-0000-000000000000"
MISSING = f"""
resources:
  s: {{type: share, properties: {{size: 1, proto: NFS, share_server: {UNKNOWN_SERVER}}}}}
  t: {{type: snapshot, properties: {{share: not-a-uuid}}}}
"""


def test_a_literal_id_must_name_a_live_resource_of_its_type(rig):
    """Refused before anything is written, naming the resource and the
    property (a user's typo is not a stack created and rolled back)."""
    tmpl = actions.load_template(MISSING, rig.backends)
    with pytest.raises(template.TemplateError, match=(
            f"resource 's' property 'share_server': no share server with id '{UNKNOWN_SERVER}'")):
        actions.check_references(rig.db, tmpl)
    e = rig.engine()
    rig.create("base", "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}}\n")
    e.pump()
    share_id = rig.rows("base")["a"][0].physical_id
    good = actions.load_template(f"resources:\n  t: {{type: snapshot, properties: {{share: "
                                 f"{share_id}}}}}\n", rig.backends)
    actions.check_references(rig.db, good)  # a live share: accepted
    # A snapshot's id is not a share's.
    rig.create("snap", f"resources:\n  t: {{type: snapshot, properties: {{share: {share_id}}}}}\n")
    e.pump()
    snap_id = rig.rows("snap")["t"][0].physical_id
    wrong = actions.load_template(f"resources:\n  t: {{type: snapshot, properties: {{share: "
                                  f"{snap_id}}}}}\n", rig.backends)
    with pytest.raises(template.TemplateError, match="property 'share': no share with id"):
        actions.check_references(rig.db, wrong)


def test_a_literal_id_gone_by_the_time_its_node_runs_fails_the_node_by_name(rig):
    """Checked again as the node runs (the resource may be deleted since):
    the node fails with its name and the reason, as a refused plan does,
    not as an engine's bug (the exception's class name, a traceback)."""
    e = rig.engine()
    rig.create("web", MISSING, disable_rollback=True)  # the rig writes it unchecked
    e.pump()
    stack = rig.stack("web")
    assert stack.status == "FAILED"
    (s,) = rig.rows("web")["s"]
    assert s.status_reason == f"s: share server {UNKNOWN_SERVER} does not exist"
    assert stack.status_reason == f"Resource CREATE failed: {s.status_reason}"


def test_a_failed_traversal_shows_the_resources_it_did(tmp_path):
    """``stack show``'s progress of a FAILED create counts the resources made
    (it said 0/N whatever was done), and a FAILED delete those deleted."""
    from tests.unit.stack_rig import Rig

    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_share.web-bad-,"
                                                                  "delete_share.gone-last-"}})
    three = ("resources:\n"
             "  {1}: {{type: share, properties: {{size: 1, proto: NFS}}}}\n"
             "  good: {{type: share, properties: {{size: 1, proto: NFS}}{0}}}\n"
             "  other: {{type: share, properties: {{size: 1, proto: NFS}}{0}}}\n")
    try:
        e = rig.engine()
        # bad is made last (after good and other), and its create fails.
        rig.create("web", three.format("", "bad").replace(
            "bad: {type: share, properties: {size: 1, proto: NFS}}",
            "bad: {type: share, properties: {size: 1, proto: NFS}, depends_on: [good, other]}"),
            disable_rollback=True)
        # last is deleted last (after good and other), and its delete fails.
        rig.create("gone", three.format(", depends_on: [last]", "last"))
        e.pump()
        stack = rig.stack("web")
        assert (stack.action, stack.status) == ("CREATE", "FAILED")
        assert str(actions.progress(rig.db, stack)) == "2/3"  # good and other made
        rig.start("gone", "DELETE")
        e.pump()
        stack = rig.stack("gone")
        assert (stack.action, stack.status) == ("DELETE", "FAILED"), stack.status_reason
        assert str(actions.progress(rig.db, stack)) == "2/3"  # good and other deleted
    finally:
        rig.close()


def test_a_share_server_on_a_backend_without_them_is_refused_by_name():
    """As ``sharectl share-server create`` refuses: before anything is
    written (it was found as the node ran, and the stack rolled back)."""
    dhss = {"plain": False, "servers": True}
    given = actions.load_template(
        "resources:\n  srv: {type: share_server, properties: {backend: plain}}\n", dhss)
    with pytest.raises(template.TemplateError, match=(
            "resource 'srv': backend 'plain' does not handle share servers")):
        actions.check_servers(given, dhss)
    # Without a backend it goes to the first enabled one.
    bare = actions.load_template("resources:\n  srv: {type: share_server}\n", dhss)
    with pytest.raises(template.TemplateError, match="backend 'plain'"):
        actions.check_servers(bare, dhss)
    actions.check_servers(bare, {"servers": True, "plain": False})
    actions.check_servers(actions.load_template(
        "resources:\n  srv: {type: share_server, properties: {backend: servers}}\n", dhss), dhss)


GROUPED = """
resources:
  grp: {type: share_group}
  gs: {type: group_snapshot, properties: {share_group: {get_resource: grp}}}
  a: {type: share, properties: {size: 1, proto: NFS, share_group: {get_resource: grp}}}
  b: {type: share, properties: {size: 1, proto: NFS, share_group: {get_resource: grp}}}
"""


def test_a_group_snapshot_is_taken_of_the_stacks_shares_and_deleted_before_them(rig):
    """Nothing in the template orders the group snapshot after the shares:
    the implicit dependency does (template_validation.py). Without it the
    snapshot could be taken of an empty group, and the stack's delete
    deleted the shares first, which a group snapshot holding them refuses."""
    e = rig.engine()
    rig.create("web", GROUPED)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    rows = rig.rows("web")
    held = {m.share_id for m in resources.group_snapshot_members(
        rig.db, rows["gs"][0].physical_id)}
    assert held == {rows["a"][0].physical_id, rows["b"][0].physical_id}
    rig.start("web", "DELETE")
    e.pump()
    assert _status(rig, "web") == ("DELETE", "COMPLETE")
    assert rig.objects() == []
    methods = [c["method"] for c in rig.calls()]
    assert methods.index("delete_share_group_snapshot") < methods.index("delete_share")
