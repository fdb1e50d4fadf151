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
    (c,) = [c for c in _preview(rig, changed).changes if c.name == "keep"]
    assert (c.change, c.properties) == ("replaced", ("type",))


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
