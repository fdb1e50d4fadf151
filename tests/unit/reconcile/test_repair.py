"""A drift check's repair of a share its backend does not serve as recorded
(reconcile/repair.py, kind not_served): the share applied again (ensure,
then its full rule set), asked again, a user message; a backend that still
does not serve it is recorded as a failed repair; a dry run or the report
policy changes nothing."""

from __future__ import annotations

from sharemgr.common import messages, vocab
from sharemgr.db import api, models
from sharemgr.db import messages as db_messages
from sharemgr.reconcile import drift
from sharemgr.reconcile.scan import Candidate

from tests.unit.reconcile_harness import (
    BACKEND_SIZE,
    HOSTBE,
    Literal,
    add,
    export_path,
    make_share,
)


def _answer(ident: str, served: bool) -> Literal:
    return Literal({"status": vocab.AVAILABLE, "size": BACKEND_SIZE, "served": served,
                    "detail": None if served else "its export is gone",
                    "export_locations": [{"path": export_path(ident), "is_admin_only": False,
                                          "preferred": True}] if served else []})


def _unserved(engine, fixes: bool = True) -> models.ShareInstance:
    inst = make_share(engine.db, vocab.AVAILABLE, size=BACKEND_SIZE)
    api.conditional_update(engine.db, models.ShareInstance, inst.id, {}, {
        "export_locations": [{"path": export_path(inst.id), "is_admin_only": False,
                              "preferred": True}]})
    driver = engine.driver
    driver.answers[inst.id] = _answer(inst.id, False)

    def ensure_shares(shares):
        driver._record("ensure_shares", shares[0]["id"])
        return {}

    def update_access(share, rules, add, delete, server=None):
        driver._record("update_access", share["id"])
        if fixes:
            driver.answers[share["id"]] = _answer(share["id"], True)

    driver.ensure_shares, driver.update_access = ensure_shares, update_access
    return api.get(engine.db, models.ShareInstance, inst.id)


def _check(engine, inst, policies=None, dry_run=False):
    checker = drift.DriftChecker(engine.reconciler, drift.policy_table(policies))
    if dry_run:
        checker.run("drift", dry_run=True)
        return None
    summary, unchecked = checker.check_resources(
        [Candidate(vocab.SHARE_INSTANCE, inst.id, inst.status, HOSTBE, inst)],
        drift.policy_table(policies))
    assert unchecked == set()
    return summary


def test_a_share_not_served_is_applied_again_with_a_message(engine):
    inst = _unserved(engine)
    summary = _check(engine, inst)
    (item,) = summary.items
    assert (item["kind"], item["policy"], item["action"], item["backend"]) == (
        "not_served", "repair", "repaired", "its export is gone")
    methods = engine.driver.methods()
    assert methods.index("ensure_shares") < methods.index("update_access") \
        < len(methods) - 1 and methods[-1] == "get_share_status"  # asked again
    row = api.get(engine.db, models.ShareInstance, inst.id)
    assert row.status == vocab.AVAILABLE
    assert row.drift["found"]["not_served"]["action"] == "repaired"
    # Its export locations are not taken from the unserved answer.
    assert [loc["path"] for loc in row.export_locations] == [export_path(inst.id)]
    (msg,) = db_messages.message_list(engine.db, inst.share_id)
    assert (msg.action_id, msg.detail_id, msg.message_level, msg.detail) == (
        messages.ACTION_REPAIR, messages.NOT_SERVED, "WARNING", "its export is gone")
    # The next check finds it served: the old finding goes.
    assert _check(engine, api.get(engine.db, models.ShareInstance, inst.id)).items == []
    assert api.get(engine.db, models.ShareInstance, inst.id).drift is None


def test_a_repair_the_backend_does_not_take_is_recorded_failed(engine):
    inst = _unserved(engine, fixes=False)
    (item,) = _check(engine, inst).items
    assert item["action"] == "repair failed"
    assert db_messages.message_list(engine.db, inst.share_id) == []


def test_report_policy_and_dry_run_change_nothing(engine):
    inst = _unserved(engine)
    (item,) = _check(engine, inst, {"not_served": "report"}).items
    assert item["action"] == "report"
    _check(engine, inst, dry_run=True)
    assert "update_access" not in engine.driver.methods()
    assert "ensure_shares" not in engine.driver.methods()
    assert db_messages.message_list(engine.db, inst.share_id) == []


def test_the_status_call_gets_the_share_s_active_rules(engine):
    """What the servers should let in is what the manager holds active
    (``access_rules`` in the share dict); nothing while a rule changes."""
    inst = _unserved(engine)
    seen = []
    driver = engine.driver

    def get_share_status(share, server=None):
        seen.append(share.get("access_rules"))
        return _answer(share["id"], True).value

    driver.get_share_status = get_share_status
    rule = models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id,
                                  access_type="ip", access_to="10.0.0.1", access_level="ro",
                                  state=vocab.ACCESS_ACTIVE)
    gone = models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id,
                                  access_type="ip", access_to="10.0.0.2", access_level="rw",
                                  state=vocab.ACCESS_ERROR)
    add(engine.db, rule, gone)
    _check(engine, inst)
    assert seen[-1] == [{"id": rule.id, "access_type": "ip", "access_to": "10.0.0.1",
                         "access_level": "ro"}]
    api.conditional_update(engine.db, models.ShareAccessRule, gone.id, {},
                           {"state": vocab.ACCESS_APPLYING})
    _check(engine, inst)
    assert seen[-1] is None
