"""The update preview (convergence/preview.py): each resource classified by
the engine's own decision, against what the update then does."""

from __future__ import annotations

from sharemgr.convergence import actions, preview

V1 = """
resources:
  data: {type: share, properties: {size: 1, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  logs: {type: share, properties: {size: 1, proto: NFS}}
  keep: {type: share, properties: {size: 1, proto: NFS}}
  old: {type: share, properties: {size: 1, proto: NFS}}
"""
# data: proto (replace; its snapshot with it); logs grows; keep as is;
# old goes; extra is new.
V2 = """
resources:
  data: {type: share, properties: {size: 1, proto: CIFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  logs: {type: share, properties: {size: 3, proto: NFS}}
  keep: {type: share, properties: {size: 1, proto: NFS}}
  extra: {type: share, properties: {size: 1, proto: NFS}}
"""


def _preview(rig, text):
    stack = rig.stack("web")
    return preview.preview(rig.db, actions.load_template(text, rig.backends),
                           actions.current_rows(rig.db, stack))


def test_classification_matches_what_the_update_does(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    before = {n: rows[0] for n, rows in rig.rows("web").items()}

    got = _preview(rig, V2)
    assert {(c.name, c.change, c.properties) for c in got.changes} == {
        ("data", "replaced", ("proto",)), ("snap", "replaced", ("share",)),
        ("logs", "updated", ("size",)), ("keep", "unchanged", ()),
        ("extra", "added", ()), ("old", "deleted", ())}
    assert [c.name for c in got.lost_shares()] == ["data"]

    rig.update("web", V2)
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    after = {n: rows[-1] for n, rows in rig.rows("web").items()
             if rows[-1].action != "DELETE"}
    assert set(after) - set(before) == got.names("added")
    assert set(before) - set(after) == got.names("deleted")
    assert {n for n in after if n in before and after[n].physical_id != before[n].physical_id
            } == got.names("replaced")


def test_a_create_previews_every_resource_as_added(rig):
    tmpl = actions.load_template(V1, rig.backends)
    got = preview.preview(rig.db, tmpl, {})
    assert got.names("added") == set(tmpl.resources) and not got.lost_shares()


def test_a_type_change_is_a_replacement_named_by_type(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    changed = V1.replace("keep: {type: share, properties: {size: 1, proto: NFS}}",
                         "keep: {type: share_server}")
    got = _preview(rig, changed)
    (c,) = [c for c in got.changes if c.name == "keep"]
    assert (c.change, c.properties, c.was) == ("replaced", ("type",), "share")
    # A share made another type is lost as much as one a property replaces.
    assert [c.name for c in got.lost_shares()] == ["keep"]


def test_shares_are_observed_in_bulk_with_the_same_classification(rig):
    """A 10,000-share stack's preview read each share twice, one statement
    each (issue 29); now its shares in one statement per 500. A share gone
    behind the stack's back and a busy one are classified as a read sees them."""
    from sharemgr.common import vocab
    from sharemgr.db import api, models
    from sqlalchemy import event

    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    rows = {n: r[0] for n, r in rig.rows("web").items()}
    api.conditional_update(rig.db, models.Share, rows["old"].physical_id, {},
                           {"deleted_at": models.utcnow()})
    inst = api.query(rig.db, models.ShareInstance, {"share_id": rows["keep"].physical_id})[0]
    api.conditional_update(rig.db, models.ShareInstance, inst.id, {},
                           {"status": vocab.EXTENDING})
    text = V1 + "  extra: {type: share, properties: {size: 1, proto: NFS}}\n"
    selects: list[str] = []

    def count(conn, cursor, statement, *_args):
        if "share_instances" in statement and statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    event.listen(rig.db.engine, "before_cursor_execute", count)
    try:
        got = _preview(rig, text)
    finally:
        event.remove(rig.db.engine, "before_cursor_execute", count)
    assert {(c.name, c.change) for c in got.changes} == {
        ("data", "unchanged"), ("snap", "unchanged"), ("logs", "unchanged"),
        ("keep", "unknown"), ("old", "replaced"), ("extra", "added")}
    # The four shares in one statement; the snapshot (not observed in bulk)
    # reads its instance's host.
    assert len([s for s in selects if "shares" in s]) == 1, selects


def _guarded_update(rig, text):
    """``stack update`` without --allow-replace: the safeguard runs inside
    the preparation (preview.refuse_lost_shares)."""
    stack = rig.stack("web")
    template = actions.load_template(text, rig.backends)
    stored = actions.stored_template(rig.db, stack)
    guard = preview.refuse_lost_shares(rig.db, template, stored, stack.template_id)
    return actions.start(rig.db, "web", "UPDATE", template, guard=guard)


def test_the_safeguard_refuses_inside_the_preparation_and_writes_nothing(rig):
    import pytest
    from sharemgr.db import stacks

    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    before = rig.stack("web")
    rows_before = {r.id for r in stacks.resource_list(rig.db, before.id)}
    checks_before = len(rig.checks())
    with pytest.raises(preview.LosesShares) as caught:
        _guarded_update(rig, V2)
    assert [c.name for c in caught.value.lost] == ["data"]
    after = rig.stack("web")
    # The preparation rolled back: no traversal, template, row or request.
    assert (after.current_traversal, after.template_id, after.action, after.status) == (
        before.current_traversal, before.template_id, before.action, before.status)
    assert {r.id for r in stacks.resource_list(rig.db, after.id)} == rows_before
    assert len(rig.checks()) == checks_before

    # Without the replacement the same guard lets the update through.
    safe = V2.replace("proto: CIFS", "proto: NFS")
    traversal = _guarded_update(rig, safe)
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    assert rig.rows("web")["keep"][0].id in {n.resource_id for n in traversal.settled}


def test_the_safeguard_judges_settled_resources_without_a_second_look(rig, monkeypatch):
    """At 1 % changed, the preview the safeguard ran was the whole stack's
    work done twice (issue 29): resources the preparation settled are
    unchanged without deciding them again, and the answer is the full
    preview's."""
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    changed = V1.replace("logs: {type: share, properties: {size: 1, proto: NFS}}",
                         "logs: {type: share, properties: {size: 1, proto: CIFS}}")
    full = _preview(rig, changed)
    decided: list[str] = []
    real = preview.decide

    def counting(db, template, row, *args, **kw):
        decided.append(row.name)
        return real(db, template, row, *args, **kw)

    monkeypatch.setattr(preview, "decide", counting)
    import pytest
    with pytest.raises(preview.LosesShares) as caught:
        _guarded_update(rig, changed)
    assert [c.name for c in caught.value.lost] == [c.name for c in full.lost_shares()] == ["logs"]
    # The shares data, keep and old were settled; logs changed, and the
    # snapshot is not a type the preparation settles.
    assert sorted(decided) == ["logs", "snap"]


def test_a_resource_never_made_is_made_not_replaced(tmp_path):
    """After a create failed before them, a share made from a snapshot of
    the failed share was previewed "replaced (proto, snapshot)", so the
    update fixing the failure was refused as losing data (--allow-replace)
    that never existed; the snapshot said "replaced (share)" but was only
    made."""
    from tests.unit.stack_rig import Rig

    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_share.web-bad-"}})
    try:
        e = rig.engine()
        text = """
resources:
  bad: {type: share, properties: {size: 1, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: bad}}}
  copy: {type: share, properties: {size: 1, proto: NFS, snapshot: {get_resource: snap}}}
"""
        rig.create("web", text, disable_rollback=True)
        e.pump()
        assert rig.stack("web").status == "FAILED"
        got = _preview(rig, text.replace("bad: {type: share, properties: {size: 1",
                                         "bad: {type: share, properties: {size: 2"))
        by_name = {c.name: c for c in got.changes}
        assert by_name["bad"].reason == "resource is CREATE FAILED"
        assert {(by_name[n].change, by_name[n].properties, by_name[n].reason)
                for n in ("snap", "copy")} == {("replaced", (), "never made: made now")}
        assert got.lost_shares() == []
    finally:
        rig.close()
