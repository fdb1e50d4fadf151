"""Access rules: what a rule may say, and what allowing or denying one writes.

A rule belongs to a share (Manila's share access) and is applied on its
active instance by the ``update_access`` operation, which sends the driver the
full set of rules. Allow writes the rule in ``queued_to_apply``, deny moves it
to ``queued_to_deny``; both mark the instance ``syncing`` and come with the
operation's request, in one transaction (``plans.Plan``). Stacks use the same
plans for a share's ``access_rules`` property.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.manager.plans import Op, Plan, Refused, need, share

# A user or group name, Windows 'DOMAIN\user' and Kerberos 'user@REALM'
# included: Manila's limits, 4 to 255 characters.
USER_RE = re.compile(r"^[\w.\-$@\\]{4,255}$")
# A certificate's common name: at most 64 characters (X.509 ub-common-name).
CERT_MAX = 64
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


def _ip(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
        # One address, however written ('10.0.0.1' or '10.0.0.1/32'), is one rule.
        return str(net.network_address if net.prefixlen == net.max_prefixlen else net)
    except ValueError as exc:
        raise Refused(f"invalid IP address or CIDR {value!r}: {exc}")


def check(access_type: Any, access_to: Any, access_level: Any = "rw") -> RuleSpec:
    """The rule in its stored form ('10.0.0.0/24', not '10.0.0.0/024'), or
    Refused naming what is wrong."""
    if access_type not in vocab.ACCESS_TYPES:
        raise Refused(f"unknown access type {access_type!r}; one of "
                      f"{', '.join(vocab.ACCESS_TYPES)}")
    if access_level not in vocab.ACCESS_LEVELS:
        raise Refused(f"unknown access level {access_level!r}; one of "
                      f"{', '.join(vocab.ACCESS_LEVELS)}")
    if not isinstance(access_to, str) or not access_to.strip():
        raise Refused("access_to must be a non-empty string")
    to = access_to.strip()
    if access_type == "ip":
        to = _ip(to)
    elif access_type == "user" and not USER_RE.match(to):
        raise Refused(f"invalid user or group {to!r}: 4 to 255 letters, digits or "
                      "'.', '-', '_', '$', '@', '\\'")
    elif access_type == "cert" and len(to) > CERT_MAX:
        raise Refused(f"certificate common name {to[:20]!r}... is {len(to)} characters "
                      f"long; at most {CERT_MAX}")
    return RuleSpec(access_type, to, access_level)


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
    for rule in db_access.rules_of(db, row.id):
        if (rule.access_type, rule.access_to) == spec.key:
            raise Refused(f"share {share_id} already has rule {rule.id} for "
                          f"{spec.access_type} {spec.access_to} ({rule.state})")
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
    by_key = {s.key: s for s in wanted}
    plan = Plan(row.id, row=row)
    have = {}
    for rule in db_access.rules_of(db, row.id):
        spec = by_key.get((rule.access_type, rule.access_to))
        if rule.state in (vocab.ACCESS_QUEUED_TO_DENY, vocab.ACCESS_DENYING):
            continue  # on its way out; a wanted rule is allowed anew
        if spec is not None and spec.access_level == rule.access_level \
                and rule.state != vocab.ACCESS_ERROR:  # a rule in error is tried anew
            have[spec.key] = rule
            continue
        plan.changes.append((models.ShareAccessRule, rule.id, {"state": rule.state},
                             {"state": vocab.ACCESS_QUEUED_TO_DENY}))
    plan.add = [new_rule(row.id, s) for k, s in by_key.items() if k not in have]
    if plan.add or plan.changes:
        need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "change access to")
        plan.changes.append(_syncing(inst))
        plan.op = _op(inst)
    return plan
