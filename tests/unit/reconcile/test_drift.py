"""Drift detection as data (reconcile/drift.py): the policy table and what
counts as drift in a backend's answer."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.reconcile import drift
from sharemgr.reconcile.scan import Candidate
from sharemgr.reconcile.stack_check import CHECK_POLICIES

from tests.unit.reconcile_harness import BACKEND_SIZE, HOSTBE, make_replica

LOCS = [{"path": "h:/shares/1", "is_admin_only": False, "preferred": True}]


def test_policy_defaults_and_choices():
    assert drift.policy_table(None) == {"missing": "report", "size": "report",
                                        "export_locations": "report", "orphan": "report",
                                        "not_served": "repair"}
    table = drift.policy_table({"size": "correct", "missing": "error"})
    assert (table["size"], table["missing"], table["orphan"]) == ("correct", "error", "report")


@pytest.mark.parametrize("chosen,message", [
    ({"missing": "correct"}, "'missing' cannot be 'correct' (allowed: report, error)"),
    ({"orphan": "error"}, "'orphan' cannot be 'error' (allowed: report)"),
    ({"colour": "report"}, "unknown kind 'colour'"),
])
def test_policy_refused(chosen, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        drift.policy_table(chosen)


def test_compare():
    def compare(answer, size=1, locs=LOCS, kinds_=("missing", "size", "export_locations")):
        return drift.compare(answer, size, locs, kinds_)

    assert compare({"status": "available", "size": 1, "export_locations": LOCS}) == []
    # What the answer leaves out (or cannot be used) is not compared.
    assert compare({"status": "available"}) == []
    assert compare({"status": "available", "size": "lots"}) == []
    assert [f.kind for f in compare(ShareResourceNotFound("x"))] == ["missing"]
    found = compare({"status": "available", "size": 2, "export_locations": ["h:/elsewhere"]})
    assert [(f.kind, f.database) for f in found] == [("size", 1), ("export_locations", LOCS)]
    assert found[0].backend == 2 and found[1].backend[0]["path"] == "h:/elsewhere"
    # Only the kinds a type compares (TARGETS): a replica's size is its share's.
    assert [f.kind for f in compare({"status": "available", "size": 2,
                                     "export_locations": ["h:/elsewhere"]},
                                    None, LOCS, ("missing", "export_locations"))] == [
        "export_locations"]
    assert compare(ShareResourceNotFound("x"), kinds_=("size",)) == []
    # Held but not served: that, and not the export it lacks.
    found = drift.compare({"status": "error", "size": 1, "export_locations": [],
                           "served": False, "detail": "its export is gone"}, 1, LOCS,
                          ("missing", "size", "export_locations", "not_served"))
    assert [(f.kind, f.backend) for f in found] == [("not_served", "its export is gone")]
    assert compare({"status": "available", "size": 1, "export_locations": LOCS,
                    "served": False}) == []  # a kind the type does not compare


def test_every_target_is_a_type_with_a_status_method_and_allowed_kinds():
    from sharemgr.drivers.base import STATUS_METHODS
    from sharemgr.reconcile.rules import RULES

    for target in drift.TARGETS:
        assert target.method in STATUS_METHODS and target.rtype in RULES
        assert set(target.kinds) <= set(drift.POLICIES) - {"orphan"}


def test_findings_are_counted_in_the_metrics():
    from sharemgr.common import metrics

    labels = {"kind": "size", "action": "corrected"}
    before = metrics.REGISTRY.get_sample_value("sharemgr_drift_findings_total", labels) or 0
    summary = drift.DriftSummary()
    summary.found({"kind": "size", "share_id": "s"}, "corrected")
    assert metrics.REGISTRY.get_sample_value("sharemgr_drift_findings_total", labels) == \
        before + 1
    assert summary.drift["size"] == 1


def test_a_replica_s_size_is_compared_with_its_share_s_and_only_reported(engine):
    """Issue 30: a stack check (size: correct) finds a replica whose backend
    size differs from its share's, and leaves the share's size alone."""
    rep = make_replica(engine.db, vocab.AVAILABLE)  # its share: 5 GiB
    checker = drift.DriftChecker(engine.reconciler, {})
    summary, unchecked = checker.check_resources(
        [Candidate(vocab.REPLICA, rep.id, rep.status, HOSTBE, rep)], CHECK_POLICIES)
    assert unchecked == set()
    (size,) = [i for i in summary.items if i["kind"] == "size"]
    assert (size["instance_id"], size["database"], size["backend"], size["action"]) == (
        rep.id, 5, BACKEND_SIZE, "report")
    assert api.get(engine.db, models.Share, rep.share_id).size == 5
