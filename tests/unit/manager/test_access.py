"""Access rules: what a rule may say, what allow and deny write, the
update_access operation's outcomes, and reconciliation of rules a crash left
in flight, on SQLite, PostgreSQL and MariaDB (the ``any_engine`` fixture)."""

from __future__ import annotations

import pytest
import yaml
from sharemgr.common import vocab
from sharemgr.common.outcome import Result
from sharemgr.convergence.properties import diff_properties
from sharemgr.convergence.template import TemplateError, parse
from sharemgr.db import access as db_access
from sharemgr.db import api, models
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.manager import access
from sharemgr.manager.intake import Intake, InvalidRequest
from sharemgr.manager.plans import Op

from tests.unit.reconcile_harness import (
    BACKEND,
    HOSTBE,
    FakeDriver,
    add_request,
    claimed,
    expect,
    make_share,
)

# What a rule may say ------------------------------------------------------------------


@pytest.mark.parametrize("given, stored", [
    ("10.0.0.1", "10.0.0.1"), ("10.0.0.1/32", "10.0.0.1"), ("10.0.0.0/24", "10.0.0.0/24"),
    (" 192.168.1.0/24 ", "192.168.1.0/24"),
    ("2001:db8::/32", "2001:db8::/32"), ("2001:DB8::1", "2001:db8::1"),
])
def test_ip_rules_are_stored_in_canonical_form(given, stored):
    assert access.check("ip", given).access_to == stored


@pytest.mark.parametrize("access_type, to, level, words", [
    ("ip", "10.0.0.300", "rw", "invalid IP"),
    ("ip", "10.0.0.1/24", "rw", "host bits"),  # a CIDR with host bits is a typo
    ("ip", "10.0.0.0/33", "rw", "invalid IP"),
    ("user", "x" * 256, "rw", "invalid user"),
    ("user", "bad name", "rw", "invalid user"),
    ("cert", "c" * 65, "rw", "at most 64"),
    ("nfs", "10.0.0.1", "rw", "unknown access type"),
    ("ip", "10.0.0.1", "rx", "unknown access level"),
    ("ip", "", "rw", "non-empty"),
])
def test_bad_rules_are_refused_with_the_reason(access_type, to, level, words):
    with pytest.raises(InvalidRequest, match=words):
        access.check(access_type, to, level)


def test_a_rule_list_names_the_bad_rule_and_duplicates():
    ok = access.check_list([{"access_type": "user", "access_to": "DOMAIN\\alice"},
                            {"access_type": "ip", "access_to": "10.0.0.1", "access_level": "ro"}])
    assert [(s.access_to, s.access_level) for s in ok] == [("DOMAIN\\alice", "rw"),
                                                           ("10.0.0.1", "ro")]
    with pytest.raises(InvalidRequest, match="rule 2: ip 10.0.0.1 is listed twice"):
        access.check_list([{"access_type": "ip", "access_to": "10.0.0.1"},
                           {"access_type": "ip", "access_to": "10.0.0.1/32"}])
    with pytest.raises(InvalidRequest, match="rule 1 must be a mapping"):
        access.check_list([{"access_type": "ip", "to": "10.0.0.1"}])


def test_a_template_checks_access_rules_and_changes_them_in_place():
    good = {"resources": {"s": {"type": "share", "properties": {
        "size": 1, "proto": "NFS",
        "access_rules": [{"access_type": "ip", "access_to": "10.0.0.0/8"}]}}}}
    parse(yaml.safe_dump(good))
    bad = {"resources": {"s": {"type": "share", "properties": {
        "size": 1, "proto": "NFS", "access_rules": [{"access_type": "ip", "access_to": "x"}]}}}}
    with pytest.raises(TemplateError, match="'access_rules': rule 1: invalid IP"):
        parse(yaml.safe_dump(bad))
    old = good["resources"]["s"]["properties"]
    new = {**old, "access_rules": []}
    diff = diff_properties("share", old, new)
    assert not diff.replace and diff.in_place == {"access_rules": []}


def test_a_backend_s_declared_limits_are_checked_at_intake(any_engine):
    """A share's backend's ``access_rule_limits`` narrow (or replace) the
    general forms; a backend that declared nothing is held to Manila's."""
    from sharemgr.db import capabilities as db_capabilities

    db = any_engine.db
    inst = make_share(db)
    intake = Intake(db, None)
    with pytest.raises(InvalidRequest, match="Manila's limits: .*at least 4"):
        intake.allow_access(inst.share_id, "user", "bob")
    db_capabilities.save(db, HOSTBE, {"access_rule_limits": {"NFS": {
        "ip": {"ipv6_max_prefix": 99}, "user": {"pattern": "[a-z]{1,8}", "hint": "a-z"}}}},
        "e1")
    assert intake.allow_access(inst.share_id, "user", "bob").access_to == "bob"
    with pytest.raises(InvalidRequest, match="NFS shares: invalid user or group 'bobbybobby'"):
        intake.allow_access(inst.share_id, "user", "bobbybobby")
    with pytest.raises(InvalidRequest, match="NFS shares take ip or user rules, not cert"):
        intake.allow_access(inst.share_id, "cert", "c1")
    with pytest.raises(InvalidRequest, match="at most /99"):
        intake.allow_access(inst.share_id, "ip", "2001:db8::/120")
    assert _rules(db, inst.share_id) == {"bob": vocab.ACCESS_QUEUED_TO_APPLY}


def test_rules_a_backend_cannot_hold_together_are_refused_at_intake(any_engine):
    """The set limits (``alone``, ``one_level``) judge a new rule beside the
    share's rules it serves or is about to; one on its way out or in error
    does not count, and a refusal writes nothing."""
    from sharemgr.db import capabilities as db_capabilities
    from sharemgr.drivers.local.validation import ACCESS_LIMITS

    db = any_engine.db
    inst = make_share(db)
    intake = Intake(db, None)
    db_capabilities.save(db, HOSTBE, {"access_rule_limits": {"NFS": ACCESS_LIMITS["CIFS"]}},
                         "e1")
    first = intake.allow_access(inst.share_id, "ip", "10.0.0.0/24")
    with pytest.raises(InvalidRequest, match=r"NFS shares: user rules cannot stand beside ip "
                                             r"rules on one share \(Samba would admit .*\): "
                                             rf"ip 10.0.0.0/24 \(rw, rule {first.id}\)"):
        intake.allow_access(inst.share_id, "user", "daemon")
    with pytest.raises(InvalidRequest, match="all have one access level"):
        intake.allow_access(inst.share_id, "ip", "10.0.1.0/24", "ro")
    assert _rules(db, inst.share_id) == {"10.0.0.0/24": vocab.ACCESS_QUEUED_TO_APPLY}
    assert intake.allow_access(inst.share_id, "ip", "10.0.1.0/24").access_level == "rw"
    # A rule in error or on its way out leaves room for the other kind.
    api.conditional_update(db, models.ShareAccessRule, first.id, {}, {"state": vocab.ACCESS_ERROR})
    rules = {r.access_to: r for r in db_access.rules_of(db, inst.share_id)}
    api.conditional_update(db, models.ShareAccessRule, rules["10.0.1.0/24"].id, {},
                              {"state": vocab.ACCESS_QUEUED_TO_DENY})
    assert intake.allow_access(inst.share_id, "user", "daemon").access_type == "user"


# Allow, deny and the operation ------------------------------------------------------------


class AccessDriver(FakeDriver):
    """Keeps the rules it was last told, as a backend's export would."""

    def __init__(self) -> None:
        super().__init__(dhss=False)
        self.exported: dict[str, list[tuple[str, str, str]]] = {}
        self.sent: list[tuple[list[str], list[str], list[str]]] = []
        self.refuse: set[str] = set()  # access_to values refused one by one
        self.fail = False

    def update_access(self, share, access_rules, add_rules, delete_rules, share_server=None):
        self._record("update_access", share["id"])
        self.sent.append(tuple([r["access_to"] for r in rules]
                               for rules in (access_rules, add_rules, delete_rules)))
        if self.fail:
            raise ShareBackendException("export table locked")
        self.exported[share["id"]] = sorted(
            (r["access_type"], r["access_to"], r["access_level"])
            for r in access_rules if r["access_to"] not in self.refuse)
        return {r["id"]: {"state": "error"} for r in access_rules
                if r["access_to"] in self.refuse} or None


@pytest.fixture
def eng(any_engine):
    any_engine.drivers[BACKEND] = AccessDriver()
    return any_engine


def _rules(db, share_id):
    return {r.access_to: r.state for r in db_access.rules_of(db, share_id)}


def _status(db, inst):
    return api.get(db, models.ShareInstance, inst.id).access_rules_status


def _run_request(eng, inst):
    req = [r for r in api.request_list(eng.db, vocab.REQUEST_PENDING)
           if r.resource_id == inst.id][0]
    assert (req.resource_type, req.action) == (vocab.SHARE_INSTANCE, vocab.ACTION_UPDATE_ACCESS)
    outcome = eng.operations.perform(claimed(eng, req))
    api.conditional_update(eng.db, models.Request, req.id, {}, {"status": vocab.REQUEST_DONE})
    return outcome


def test_allow_and_deny_go_through_queued_states_to_the_backend(eng):
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    intake = Intake(db, None)
    first = intake.allow_access(inst.share_id, "ip", "10.0.0.0/24")
    assert _rules(db, inst.share_id) == {"10.0.0.0/24": vocab.ACCESS_QUEUED_TO_APPLY}
    assert _status(db, inst) == vocab.ACCESS_RULES_SYNCING
    expect(_run_request(eng, inst), Result.DONE)
    assert _rules(db, inst.share_id) == {"10.0.0.0/24": vocab.ACCESS_ACTIVE}
    assert _status(db, inst) == vocab.ACCESS_ACTIVE

    with pytest.raises(InvalidRequest, match="already has rule"):
        intake.allow_access(inst.share_id, "ip", "10.0.0.0/24", "ro")
    intake.allow_access(inst.share_id, "ip", "10.0.1.5", "ro")
    expect(_run_request(eng, inst), Result.DONE)
    assert driver.sent[-1] == (["10.0.0.0/24", "10.0.1.5"], ["10.0.1.5"], [])

    intake.deny_access(inst.share_id, first.id)
    assert _rules(db, inst.share_id)["10.0.0.0/24"] == vocab.ACCESS_QUEUED_TO_DENY
    with pytest.raises(InvalidRequest, match="cannot deny"):
        intake.deny_access(inst.share_id, first.id)
    expect(_run_request(eng, inst), Result.DONE)
    assert driver.sent[-1] == (["10.0.1.5"], [], ["10.0.0.0/24"])
    assert _rules(db, inst.share_id) == {"10.0.1.5": vocab.ACCESS_ACTIVE}
    assert driver.exported[inst.id] == [("ip", "10.0.1.5", "ro")]
    denied = api.get(db, models.ShareAccessRule, first.id, include_deleted=True)
    assert denied.state == vocab.ACCESS_DELETED and denied.deleted_at is not None


def test_nothing_is_written_for_a_refused_request(eng):
    db = eng.db
    inst = make_share(db, status=vocab.EXTENDING)
    with pytest.raises(InvalidRequest, match="its status is 'extending'"):
        Intake(db, None).allow_access(inst.share_id, "ip", "10.0.0.1")
    with pytest.raises(InvalidRequest, match="no share"):
        Intake(db, None).allow_access("no-such-share", "ip", "10.0.0.1")
    with pytest.raises(InvalidRequest, match="has no access rule"):
        Intake(db, None).deny_access(inst.share_id, "no-such-rule")
    assert api.query(db, models.ShareAccessRule) == []
    assert api.request_list(db) == []
    assert _status(db, inst) == vocab.ACCESS_ACTIVE


def test_a_refused_rule_and_a_failed_call_end_in_error(eng):
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    intake = Intake(db, None)
    intake.allow_access(inst.share_id, "ip", "10.0.0.1")
    driver.refuse = {"10.0.0.2"}
    intake.allow_access(inst.share_id, "ip", "10.0.0.2")
    expect(_run_request(eng, inst), Result.FAILED, "refused rule")
    assert _rules(db, inst.share_id) == {"10.0.0.1": vocab.ACCESS_ACTIVE,
                                         "10.0.0.2": vocab.ACCESS_ERROR}
    assert _status(db, inst) == vocab.ACCESS_ERROR

    driver.fail = True
    intake.allow_access(inst.share_id, "ip", "10.0.0.3")
    expect(_run_request(eng, inst), Result.FAILED, "export table locked")
    # What the backend allows now is unknown: every rule sent is in error.
    assert set(_rules(db, inst.share_id).values()) == {vocab.ACCESS_ERROR}


def test_a_key_the_backend_gives_a_rule_is_kept_with_it(eng):
    """A cephx rule is answered with the key its client mounts with
    (Manila's access_key): stored on the rule; a refused one gets none."""
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    real = driver.update_access

    def with_keys(share, access_rules, add_rules, delete_rules, share_server=None):
        answers = dict(real(share, access_rules, add_rules, delete_rules, share_server) or {})
        for r in add_rules:
            answers.setdefault(r["id"], {"access_key": f"key-of-{r['access_to']}"})
        return answers

    driver.update_access = with_keys
    driver.refuse = {"10.0.0.2"}
    intake = Intake(db, None)
    intake.allow_access(inst.share_id, "ip", "10.0.0.1")
    intake.allow_access(inst.share_id, "ip", "10.0.0.2")
    expect(_run_request(eng, inst), Result.FAILED, "refused rule")
    keys = {r.access_to: (r.state, r.access_key) for r in db_access.rules_of(db, inst.share_id)}
    assert keys == {"10.0.0.1": (vocab.ACCESS_ACTIVE, "key-of-10.0.0.1"),
                    "10.0.0.2": (vocab.ACCESS_ERROR, None)}


# Reconciliation ---------------------------------------------------------------------


def _stuck(db, inst, *states):
    """Rules a crash left in ``states``: written as the operation leaves them."""
    rules = []
    for i, state in enumerate(states):
        rule = models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id,
                                      access_type="ip", access_to=f"10.9.0.{i + 1}",
                                      access_level="rw", state=state)
        api.add_all(db, [rule])
        rules.append(rule)
    api.conditional_update(db, models.ShareInstance, inst.id, {},
                           {"access_rules_status": vocab.ACCESS_RULES_SYNCING})
    return rules


def test_reconciliation_resends_rules_a_crash_left_in_flight(eng):
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    active, applying, denying = _stuck(db, inst, vocab.ACCESS_ACTIVE, vocab.ACCESS_APPLYING,
                                       vocab.ACCESS_DENYING)
    # The dead engine's request is abandoned; the rules are sent again.
    add_request(db, vocab.SHARE_INSTANCE, inst.id, inst.host, vocab.REQUEST_RUNNING,
                engine_id="hostA.dead", action=vocab.ACTION_UPDATE_ACCESS)

    plan = eng.run(dry_run=True)["plan"]
    planned = {p["id"]: p for p in plan if p["type"] == "access_rule"}
    assert planned[applying.id]["outcome"] == "active or error"
    assert planned[denying.id]["outcome"] == "deleted or error"
    assert driver.sent == []  # a dry run calls nothing

    summary = eng.run()
    assert driver.sent == [(["10.9.0.1", "10.9.0.2"], ["10.9.0.2"], ["10.9.0.3"])]
    assert _rules(db, inst.share_id) == {"10.9.0.1": vocab.ACCESS_ACTIVE,
                                         "10.9.0.2": vocab.ACCESS_ACTIVE}
    assert _status(db, inst) == vocab.ACCESS_ACTIVE
    assert summary["outcomes"]["access_rule"] == {vocab.ACCESS_ACTIVE: 1,
                                                  vocab.ACCESS_DELETED: 1}
    assert active.id not in planned


def test_reconciliation_leaves_rules_with_a_live_request_and_errors_a_failed_resend(eng):
    db, driver = eng.db, eng.driver
    waiting = make_share(db)
    _stuck(db, waiting, vocab.ACCESS_QUEUED_TO_APPLY)
    add_request(db, vocab.SHARE_INSTANCE, waiting.id, waiting.host,
                action=vocab.ACTION_UPDATE_ACCESS)
    broken = make_share(db)
    _stuck(db, broken, vocab.ACCESS_APPLYING)
    driver.fail = True
    summary = eng.run()
    assert summary["skipped"]["request pending"] == 1
    assert set(_rules(db, waiting.share_id).values()) == {vocab.ACCESS_QUEUED_TO_APPLY}
    assert set(_rules(db, broken.share_id).values()) == {vocab.ACCESS_ERROR}
    assert _status(db, broken) == vocab.ACCESS_ERROR


def test_ensure_resources_reapplies_the_rules_of_each_share_it_ensured(eng):
    db, driver = eng.db, eng.driver
    with_rules, without = make_share(db), make_share(db)
    _stuck(db, with_rules, vocab.ACCESS_ACTIVE)
    api.conditional_update(db, models.ShareInstance, with_rules.id, {},
                           {"access_rules_status": vocab.ACCESS_ACTIVE})
    driver.get_backend_info = lambda: {"version": "2"}
    driver.ensure_shares = lambda shares: {s["id"]: {"status": vocab.AVAILABLE} for s in shares}
    from sharemgr.manager import ensure

    assert ensure.ensure_backend(db, HOSTBE, driver) == 2
    (req,) = api.request_list(db, vocab.REQUEST_PENDING)
    assert (req.resource_id, req.action, req.args) == (
        with_rules.id, vocab.ACTION_UPDATE_ACCESS, {"resync": True})
    expect(eng.operations.perform(claimed(eng, req)), Result.DONE)
    # The full set, nothing as a change: the backend is made to match.
    assert driver.sent == [(["10.9.0.1"], [], [])]
    assert without.id not in driver.exported


def test_ensure_runs_at_every_start_when_the_backend_info_is_empty(eng):
    """Empty backend info means "cannot tell" (drivers/base.py): ensure is
    never skipped for it, where an unchanged non-empty info skips it."""
    db, driver = eng.db, eng.driver
    make_share(db)
    driver.ensure_shares = lambda shares: {}
    from sharemgr.manager import ensure

    driver.get_backend_info = lambda: {}
    assert ensure.ensure_backend(db, HOSTBE, driver) == 1
    assert ensure.ensure_backend(db, HOSTBE, driver) == 1
    driver.get_backend_info = lambda: {"version": "2"}
    assert ensure.ensure_backend(db, HOSTBE, driver) == 1
    assert ensure.ensure_backend(db, HOSTBE, driver) == 0


def test_each_update_access_call_carries_a_newer_token(eng):
    """update_access does not go through ``Operations.run``; it takes the
    instance all the same, so a call left running by a taken-over update
    cannot land after the next one (doc/reconciliation.rst, "Fencing")."""
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    tokens = []
    sent = driver.update_access

    def update_access(share, *args, **kwargs):
        tokens.append(share["fence_token"])
        return sent(share, *args, **kwargs)

    driver.update_access = update_access
    intake = Intake(db, None)
    for to in ("10.0.0.1", "10.0.0.2"):
        intake.allow_access(inst.share_id, "ip", to)
        expect(_run_request(eng, inst), Result.DONE)
    assert len(tokens) == 2 and tokens[0] < tokens[1], tokens
    assert api.get(db, models.ShareInstance, inst.id).fence == tokens[1]


def test_update_access_out_of_the_group_sends_nothing_and_is_given_back(eng):
    """Out of the engines group (or its lock expired) an update_access
    request calls no driver: it ends NotNow (the runner gives it back
    pending) with the rules still applying, sent once the engine may."""

    db, driver = eng.db, eng.driver
    inst = make_share(db)
    Intake(db, None).allow_access(inst.share_id, "ip", "10.0.0.1")
    eng.operations.not_member = lambda: "its membership expired"
    expect(_run_request(eng, inst),
           Result.NOT_NOW, "not calling the driver: its membership expired")
    assert driver.sent == [] and _rules(db, inst.share_id) == {"10.0.0.1": vocab.ACCESS_APPLYING}
    eng.operations.not_member = lambda: None
    expect(eng.operations.perform(Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_UPDATE_ACCESS,
                                     inst.host)), Result.DONE)
    assert driver.sent == [(["10.0.0.1"], ["10.0.0.1"], [])]
    assert _rules(db, inst.share_id) == {"10.0.0.1": vocab.ACCESS_ACTIVE}


def test_rules_queued_behind_an_operation_cut_off_meanwhile_go_to_a_request(eng):
    """Rules queued while the share was busy are sent when its operation
    ends (``flush_access``). If the engine dropped out of the group while
    the operation's driver call ran, the success is written but the rules
    are not sent from there: an update_access request carries them, for
    a member (this engine, once back) to run."""
    db, driver = eng.db, eng.driver
    inst = make_share(db)
    intake = Intake(db, None)
    intake.resize_share(inst.share_id, 10, extend=True)  # the share is extending
    _stuck(db, inst, vocab.ACCESS_QUEUED_TO_APPLY)  # as a stack queues them meanwhile
    extend = [r for r in api.request_list(db, vocab.REQUEST_PENDING)
              if r.resource_id == inst.id]
    assert [r.action for r in extend] == [vocab.ACTION_EXTEND]
    op = claimed(eng, extend[0])

    def extend_share(share, new_size, server=None):
        eng.operations.not_member = lambda: "its membership expired"

    driver.extend_share = extend_share
    expect(eng.operations.perform(op), Result.DONE)
    assert api.get(db, models.ShareInstance, inst.id).status == vocab.AVAILABLE
    assert driver.sent == []
    assert _rules(db, inst.share_id) == {"10.9.0.1": vocab.ACCESS_QUEUED_TO_APPLY}
    eng.operations.not_member = lambda: None
    expect(_run_request(eng, inst), Result.DONE)
    assert driver.sent == [(["10.9.0.1"], ["10.9.0.1"], [])]
    assert _rules(db, inst.share_id) == {"10.9.0.1": vocab.ACCESS_ACTIVE}
