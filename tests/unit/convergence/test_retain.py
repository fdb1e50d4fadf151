"""deletion_policy: retain (convergence/retain.py): the template key, and the
clean-up that keeps a physical resource when the stack or the resource
goes — except in a rollback — as the preview says it will."""

from __future__ import annotations

import pytest
from sharemgr.convergence import actions, preview
from sharemgr.convergence.template import TemplateError, parse
from sharemgr.db import api, models, stacks, status_reads

from tests.unit.stack_rig import Rig

V1 = """
resources:
  data:
    type: share
    deletion_policy: Retain
    properties: {size: 1, proto: NFS}
  scratch: {type: share, properties: {size: 1, proto: NFS}}
"""
WITHOUT_DATA = """
resources:
  scratch: {type: share, properties: {size: 1, proto: NFS}}
"""


def _share(rig, pid):
    """The share's (status of its instance) in the database, or None."""
    found = status_reads.share_with_status(rig.db, pid)
    return None if found is None or found[1] is None else found[1].status


def _backend_shares(rig):
    return {o["status"] for o in rig.objects() if o["kind"] == "share"}, len(
        [o for o in rig.objects() if o["kind"] == "share"])


@pytest.mark.parametrize("spelling", ["Retain", "retain", "RETAIN"])
def test_the_policy_is_heats_key_in_any_case(spelling):
    t = parse(V1.replace("Retain", spelling))
    assert t.resources["data"].retain and not t.resources["scratch"].retain
    assert t.to_dict()["resources"]["data"]["deletion_policy"] == "retain"
    assert parse(V1.replace("Retain", "Delete")).resources["data"].retain is False


def test_a_bad_policy_or_a_retained_child_of_a_deleted_parent_is_refused():
    with pytest.raises(TemplateError, match="'deletion_policy' must be Retain or Delete"):
        parse(V1.replace("Retain", "Snapshot"))
    with pytest.raises(TemplateError, match="'snap' has deletion_policy retain but 'scratch'"):
        parse(WITHOUT_DATA + "  snap: {type: snapshot, deletion_policy: retain, "
              "properties: {share: {get_resource: scratch}}}\n")


def test_stack_delete_keeps_a_retained_share_and_deletes_the_rest(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    rows = {n: v[0] for n, v in rig.rows("web").items()}
    rig.start("web", "DELETE")
    e.pump()
    assert stacks.stack_get_by_name(rig.db, "web") is None
    assert _share(rig, rows["data"].physical_id) == "available"
    assert _share(rig, rows["scratch"].physical_id) is None
    assert _backend_shares(rig) == ({"available"}, 1)  # no driver delete for it


def test_an_update_that_removes_it_keeps_it_and_the_preview_says_so(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    data = rig.rows("web")["data"][0]
    stack = rig.stack("web")
    got = preview.preview(rig.db, actions.load_template(WITHOUT_DATA, rig.backends),
                          actions.current_rows(rig.db, stack))
    assert {(c.name, c.change) for c in got.changes} == {
        ("data", "retained"), ("scratch", "unchanged")}
    rig.update("web", WITHOUT_DATA)
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    assert "data" not in rig.rows("web")  # no longer tied to the stack
    assert _share(rig, data.physical_id) == "available"
    # Deleting the stack later leaves it alone too.
    rig.start("web", "DELETE")
    e.pump()
    assert _share(rig, data.physical_id) == "available"


def test_a_replaced_retained_share_is_kept_and_needs_no_allow_replace(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    old = rig.rows("web")["data"][0].physical_id
    v2 = V1.replace("{size: 1, proto: NFS}\n  scratch", "{size: 1, proto: CIFS}\n  scratch")
    got = preview.preview(rig.db, actions.load_template(v2, rig.backends),
                          actions.current_rows(rig.db, rig.stack("web")))
    (c,) = [c for c in got.changes if c.name == "data"]
    assert (c.change, c.properties, c.kept) == ("replaced", ("proto",), True)
    assert "the old one is retained" in c.reason and not got.lost_shares()
    rig.update("web", v2)
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    (new,) = rig.rows("web")["data"]
    assert new.physical_id != old
    assert _share(rig, old) == "available" and _share(rig, new.physical_id) == "available"


def test_a_rollback_deletes_what_the_failed_create_made_retained_or_not(tmp_path):
    rig = Rig(tmp_path, backends={"dummy": {"dummy_fail_methods": "create_share.web-bad-"}})
    try:
        e = rig.engine()
        rig.create("web", V1 + "  bad: {type: share, properties: {size: 1, proto: NFS}, "
                   "depends_on: [data]}\n")
        e.pump()
        assert (rig.stack("web").action, rig.stack("web").status) == ("ROLLBACK", "COMPLETE")
        assert [o for o in rig.objects() if o["kind"] == "share"
                and o["status"] != "deleted"] == []
    finally:
        rig.close()


def test_a_failed_retained_share_is_deleted_as_before(rig):
    """Nothing worth keeping: an errored share is not left behind."""
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    data = rig.rows("web")["data"][0].physical_id
    _share_row, inst = status_reads.share_with_status(rig.db, data)
    with rig.db.session() as session:
        api.conditional_update_tx(session, models.ShareInstance, inst.id, {},
                                  {"status": "error"})
    got = preview.preview(rig.db, actions.load_template(WITHOUT_DATA, rig.backends),
                          actions.current_rows(rig.db, rig.stack("web")))
    assert {(c.name, c.change) for c in got.changes} == {
        ("data", "deleted"), ("scratch", "unchanged")}
    rig.update("web", WITHOUT_DATA)
    e.pump()
    assert rig.stack("web").status == "COMPLETE"
    assert _share(rig, data) is None
