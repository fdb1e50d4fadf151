"""Access rules: what a rule may say, and what allowing or denying one writes.

A rule belongs to a share (Manila's share access) and is applied on its
active instance by the ``update_access`` operation, which sends the driver the
full set of rules. Allow writes the rule in ``queued_to_apply``, deny moves it
to ``queued_to_deny``; both mark the instance ``syncing`` and come with the
operation's request, in one transaction (``plans.Plan``). Stacks use the same
plans for a share's ``access_rules`` property.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.drivers import access_rules
from sharemgr.manager import capabilities
from sharemgr.manager.plans import Change, Op, Plan, Refused, need, share

# Rules the backend serves or is about to: what a new rule must stand beside.
SERVED = (vocab.ACCESS_QUEUED_TO_APPLY, vocab.ACCESS_APPLYING, vocab.ACCESS_ACTIVE)
# Deny may start from these (a rule being applied is overtaken: the deny wins).
DENIABLE = (vocab.ACCESS_QUEUED_TO_APPLY, vocab.ACCESS_APPLYING, vocab.ACCESS_ACTIVE,
            vocab.ACCESS_ERROR)


@dataclass(frozen=True)
class RuleSpec:
    """A checked rule: what a user or a template asks for."""

    access_type: str
    access_to: str
    access_level: str = "rw"

    @property
    def key(self) -> tuple[str, str]:
        return self.access_type, self.access_to


def check(access_type: Any, access_to: Any, access_level: Any = "rw") -> RuleSpec:
    """The rule in its stored form ('10.0.0.0/24', not '10.0.0.0/024'), or
    Refused naming what is wrong (``drivers/access_rules.py``: the forms
    every backend takes; ``limited`` adds the share's backend's own)."""
    try:
        return RuleSpec(*access_rules.check(access_type, access_to, access_level))
    except access_rules.RuleRefused as exc:
        raise Refused(str(exc)) from None


def _declared(db: Database, host: str | None, proto: str) -> tuple[access_rules.Limits, str]:
    """What the backend of ``host`` declared it can express for ``proto``
    (its report's ``access_rule_limits``), and the words that name it in a
    refusal. A backend that declared nothing is held to Manila's limits."""
    report = capabilities.report(db, host) if host else None
    found = report.stats.get(access_rules.LIMITS_KEY) if report is not None else None
    limits = access_rules.for_protocol(found, proto)
    if limits is None:
        return access_rules.MANILA_LIMITS, "Manila's limits"
    return limits, f"backend {report.backend if report else host}: {proto} shares"


def limited(db: Database, host: str | None, proto: str, specs: Sequence[RuleSpec],
            have: Iterable[models.ShareAccessRule] = (), listed: bool = True
            ) -> list[RuleSpec]:
    """``specs`` checked one by one against what ``host``'s backend declared
    it can express (``_declared``), then together, in their order, beside
    the share's rules ``have`` that it serves or is about to (oldest
    first): a rule the backend cannot serve beside the others (the set
    limits ``alone``, ``one_level``) is refused here rather than ending in
    error there. ``listed``: the specs are a template's ``access_rules``
    (a refusal names the rule by its place)."""
    limits, where = _declared(db, host, proto)
    checked = []
    for spec in specs:
        try:
            checked.append(RuleSpec(*access_rules.check(
                spec.access_type, spec.access_to, spec.access_level, limits, where)))
        except access_rules.RuleRefused as exc:
            raise Refused(str(exc)) from None
    live = [(f"rule {r.id}", access_rules.Rule(r.access_type, r.access_to, r.access_level))
            for r in have if r.state in SERVED]
    wanted = [(f"rule {i} of access_rules" if listed else "the new rule",
               access_rules.Rule(s.access_type, s.access_to, s.access_level))
              for i, s in enumerate(checked, 1)]
    clashes = access_rules.conflicts([*live, *wanted], limits)
    for name, _rule in wanted:
        if name in clashes:
            raise Refused(f"{where}: {name + ': ' if listed else ''}{clashes[name]}")
    return checked


def check_list(rules: object) -> list[RuleSpec]:
    """A template's list of ``{access_type, access_to, access_level}``
    mappings, checked, without duplicates."""
    if not isinstance(rules, list):
        raise Refused(f"must be a list of rules, got {rules!r}")
    out: list[RuleSpec] = []
    for i, raw in enumerate(rules):
        if not isinstance(raw, Mapping) or set(raw) - {"access_type", "access_to",
                                                         "access_level"}:
            raise Refused(f"rule {i + 1} must be a mapping of access_type, access_to "
                          f"and access_level, got {raw!r}")
        try:
            spec = check(raw.get("access_type"), raw.get("access_to"),
                         raw.get("access_level", "rw"))
        except Refused as exc:
            raise Refused(f"rule {i + 1}: {exc}")
        if any(s.key == spec.key for s in out):
            raise Refused(f"rule {i + 1}: {spec.access_type} {spec.access_to} is listed twice")
        out.append(spec)
    return out


def view(rule: models.ShareAccessRule) -> dict[str, object]:
    """A rule as drivers receive it."""
    return {"id": rule.id, "access_type": rule.access_type, "access_to": rule.access_to,
            "access_level": rule.access_level}


def _op(inst: models.ShareInstance) -> Op:
    return Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_UPDATE_ACCESS, inst.host)


def _syncing(inst: models.ShareInstance) -> db_api.Change:
    return (models.ShareInstance, inst.id, {}, {"access_rules_status": vocab.ACCESS_RULES_SYNCING})


def new_rule(share_id: str, spec: RuleSpec) -> models.ShareAccessRule:
    return models.ShareAccessRule(id=models.new_id(), share_id=share_id,
                                  access_type=spec.access_type, access_to=spec.access_to,
                                  access_level=spec.access_level,
                                  state=vocab.ACCESS_QUEUED_TO_APPLY)


def allow(db: Database, share_id: str, spec: RuleSpec) -> Plan:
    row, inst = share(db, share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "change access to")
    have = db_access.rules_of(db, row.id)
    for rule in have:
        if (rule.access_type, rule.access_to) == spec.key:
            raise Refused(f"share {share_id} already has rule {rule.id} for "
                          f"{spec.access_type} {spec.access_to} ({rule.state})")
    spec = limited(db, inst.host, row.share_proto or "", [spec], have, listed=False)[0]
    rule = new_rule(row.id, spec)
    return Plan(rule.id, [rule], [_syncing(inst)], _op(inst), rule)


def deny(db: Database, share_id: str, rule_id: str) -> Plan:
    row, inst = share(db, share_id)
    rule = db_api.get(db, models.ShareAccessRule, rule_id)
    if rule is None or rule.share_id != row.id:
        raise Refused(f"share {share_id} has no access rule {rule_id!r}")
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "change access to")
    need(rule.state, DENIABLE, f"access rule {rule_id}", "deny")
    return Plan(rule.id, [], [
        (models.ShareAccessRule, rule.id, {"state": rule.state},
         {"state": vocab.ACCESS_QUEUED_TO_DENY}),
        _syncing(inst)], _op(inst), rule)


def converge(db: Database, share_id: str, wanted: Iterable[RuleSpec]) -> Plan:
    """What makes the share's rules exactly ``wanted`` (a stack's
    ``access_rules``): new rules queued to apply, rules not wanted any more
    queued to deny, a changed level as a deny and an allow. No op when the
    rules are as wanted already."""
    row, inst = share(db, share_id)
    # The wanted rules are the share's whole set: judged together, not
    # beside the rules they replace.
    by_key = {s.key: s for s in limited(db, inst.host, row.share_proto or "", list(wanted))}
    have = {}
    changes: list[Change] = []
    for rule in db_access.rules_of(db, row.id):
        spec = by_key.get((rule.access_type, rule.access_to))
        if rule.state in (vocab.ACCESS_QUEUED_TO_DENY, vocab.ACCESS_DENYING):
            continue  # on its way out; a wanted rule is allowed anew
        if spec is not None and spec.access_level == rule.access_level \
                and rule.state != vocab.ACCESS_ERROR:  # a rule in error is tried anew
            have[spec.key] = rule
            continue
        changes.append((models.ShareAccessRule, rule.id, {"state": rule.state},
                        {"state": vocab.ACCESS_QUEUED_TO_DENY}))
    add = [new_rule(row.id, s) for k, s in by_key.items() if k not in have]
    if not (add or changes):
        return Plan(row.id, row=row)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "change access to")
    return Plan(row.id, add, [*changes, _syncing(inst)], _op(inst), row)
