"""What an access rule may say: one validator per access type, shared by
intake (``sharectl access allow``, stacks' ``access_rules``) and the
drivers, so that nothing intake accepts can fail at a driver for its form.

A rule is checked in two steps, by the same functions everywhere:

* the forms every backend takes, stored in one form (``10.0.0.1/32`` is
  ``10.0.0.1``, IPv6 in lower case, an IPv4-mapped IPv6 address is the IPv4
  one): what the manager checks for a backend that declared nothing;
* the limits the share's backend declares, per protocol, in its
  ``get_share_stats()`` report under ``access_rule_limits`` (the types it
  serves and narrower forms of each): sharectl reads the report from the
  database, the driver passes its own declaration.

The declaration, as JSON::

    {"NFS": {"ip": {"ipv6_max_prefix": 99}},
     "CIFS": {"ip": {}, "user": {"pattern": "[a-z_][a-z0-9_.-]{0,31}",
                                 "hint": "1-32 letters, ..."}}}

A protocol it does not name is not limited; a type its protocol does not
list is refused. ``ip``: ``ipv4_max_prefix``/``ipv6_max_prefix`` (longest
network prefix; single addresses are always taken). ``user`` and ``cert``:
``pattern`` (a regular expression the whole value must match) with
``hint`` (the words a refusal shows), ``max_length``.

Two limits concern a share's rules together, not one rule (``conflicts``),
each with the backend's reason as its value: ``alone`` (rules of this type
cannot stand beside rules of another type on one share: Samba's ``hosts
allow`` holds a share's users to its addresses, so ip and user rules would
admit only their intersection) and ``one_level`` (this type's rules of one
share all have one access level: Samba has one ``read only`` per share).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from sharemgr.common import vocab

LIMITS_KEY = "access_rule_limits"

# A user or group name, Windows 'DOMAIN\user' and Kerberos 'user@REALM'
# included: Manila's character set, at most 255 characters.
USER_RE = re.compile(r"[\w.\-$@\\]{1,255}")
USER_HINT = "up to 255 letters, digits or '.', '-', '_', '$', '@', '\\'"
# A certificate's common name: at most 64 characters (X.509 ub-common-name).
CERT_MAX = 64


class RuleRefused(ValueError):
    """A rule that may not be written; its text says why, in one line."""


class Rule(NamedTuple):
    access_type: str
    access_to: str
    access_level: str


Limits = Mapping[str, object]  # one protocol's {type: {limit: value}}


def _show(value: str, counted: bool = True) -> str:
    """A value as a refusal quotes it: bounded, control characters escaped;
    ``counted``: a cut one says its length (not where the refusal does)."""
    text = repr(value[:40])
    if len(value) <= 40:
        return text
    return text + (f" (of {len(value)} characters)" if counted else "...")


def ip(value: str, limits: Mapping[str, object] | None = None) -> str:
    """An IPv4 or IPv6 address or CIDR network in its stored form."""
    if "%" in value:
        # ipaddress takes 'fe80::1%lo'; the zone names an interface of one
        # host, which no exporter's client list can say.
        raise RuleRefused(f"{_show(value)} is a scoped address: a zone (%...) names an "
                          "interface of one host, not a client; give the address without it")
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise RuleRefused(f"invalid IP address or CIDR {_show(value)}: {exc}") from None
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 \
            and net.network_address.ipv4_mapped is not None:
        # '::ffff:10.0.0.1' is the IPv4 client 10.0.0.1: one rule, one form.
        net = ipaddress.IPv4Network((net.network_address.ipv4_mapped, net.prefixlen - 96))
    if net.prefixlen == net.max_prefixlen:
        if net.network_address.is_unspecified:
            raise RuleRefused(f"{net.network_address} is the unspecified address and names no "
                              f"client; every client is {net.network_address}/0")
        return str(net.network_address)
    longest = (limits or {}).get(f"ipv{net.version}_max_prefix")
    if isinstance(longest, int) and net.prefixlen > longest:
        raise RuleRefused(f"IPv{net.version} networks may have a prefix of at most /{longest} "
                          f"here, not /{net.prefixlen} ({net}); name the addresses one by one "
                          "or a shorter prefix")
    return str(net)


def _named(value: str, what: str, default: re.Pattern[str] | None, hint: str,
           limits: Mapping[str, object] | None) -> str:
    limits = limits or {}
    if default is not None and not default.fullmatch(value):
        raise RuleRefused(f"invalid {what} {_show(value)}: {hint}")
    pattern = limits.get("pattern")
    longest, shortest = limits.get("max_length"), limits.get("min_length")
    if isinstance(longest, int) and len(value) > longest:
        raise RuleRefused(f"{what} {_show(value, False)} is {len(value)} characters long; "
                          f"at most {longest}")
    if isinstance(shortest, int) and len(value) < shortest:
        raise RuleRefused(f"{what} {_show(value, False)} is {len(value)} characters long; "
                          f"at least {shortest}")
    if isinstance(pattern, str) and not re.fullmatch(pattern, value):
        raise RuleRefused(f"invalid {what} {_show(value)}: "
                          f"{limits.get('hint') or 'must match ' + pattern}")
    return value


def user(value: str, limits: Mapping[str, object] | None = None) -> str:
    """A user or group name."""
    return _named(value, "user or group", USER_RE, USER_HINT, limits)


def cert(value: str, limits: Mapping[str, object] | None = None) -> str:
    """A certificate's common name."""
    if len(value) > CERT_MAX:
        raise RuleRefused(f"certificate common name {_show(value, False)} is {len(value)} "
                          f"characters long; at most {CERT_MAX}")
    return _named(value, "certificate common name", None, "", limits)


# A cephx id (the client's ``client.<id>``): no periods (Manila refuses
# them: ``client.a.b`` reads as the id ``a.b`` of type ``client``).
CEPHX_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
CEPHX_HINT = "1 to 64 letters, digits, '_' or '-' (no periods)"


def cephx(value: str, limits: Mapping[str, object] | None = None) -> str:
    """A cephx identity, as ``--id`` names it."""
    return _named(value, "cephx id", CEPHX_RE, CEPHX_HINT, limits)


VALIDATORS = {"ip": ip, "user": user, "cert": cert, "cephx": cephx}

# What a backend that declares nothing for a protocol is held to: Manila's
# limits (a user or group of at least 4 characters).
MANILA_LIMITS: Mapping[str, Mapping[str, object]] = {
    "ip": {}, "user": {"min_length": 4}, "cert": {}, "cephx": {}}


def check(access_type: object, access_to: object, access_level: object = "rw",
          limits: Limits | None = None, where: str = "") -> Rule:
    """The rule in its stored form, or RuleRefused naming what is wrong.

    ``limits`` is one protocol's declaration (``for_protocol``) and
    ``where`` names it in a refusal ("backend h@b, NFS shares").
    """
    if access_type not in vocab.ACCESS_TYPES:
        raise RuleRefused(f"unknown access type {access_type!r}; one of "
                          f"{', '.join(vocab.ACCESS_TYPES)}")
    if access_level not in vocab.ACCESS_LEVELS:
        raise RuleRefused(f"unknown access level {access_level!r}; one of "
                          f"{', '.join(vocab.ACCESS_LEVELS)}")
    if not isinstance(access_to, str) or not access_to.strip(" "):
        raise RuleRefused("access_to must be a non-empty string")
    if any(not c.isprintable() for c in access_to):
        # Newlines, NUL, tabs and other controls end lines and values in the
        # files exporters read; no name or address holds one.
        raise RuleRefused(f"access_to {_show(access_to)} holds a control character")
    to = access_to.strip(" ")
    own = None
    if limits is not None:
        if access_type not in limits:
            served = " or ".join(sorted(limits)) or "no"
            raise RuleRefused(f"{where or 'the backend'} take {served} rules, not "
                              f"{access_type}")
        own_raw = limits[access_type]
        own = own_raw if isinstance(own_raw, Mapping) else {}
    try:
        stored = VALIDATORS[access_type](to, own)
    except RuleRefused as exc:
        raise RuleRefused(f"{where}: {exc}" if where and own else str(exc)) from None
    return Rule(str(access_type), stored, str(access_level))


def for_protocol(declared: object, proto: str) -> Limits | None:
    """One protocol's limits from a report's ``access_rule_limits`` (None:
    the backend declared none for it, so only the general forms apply)."""
    if not isinstance(declared, Mapping):
        return None
    limits = declared.get(proto.upper())
    return limits if isinstance(limits, Mapping) else None


def _set_refusal(rule: Rule, other_name: str, other: Rule, limits: Limits) -> str | None:
    """Why ``rule`` cannot stand beside ``other`` on one share (None: it can)."""
    own, theirs = (limits.get(r.access_type) for r in (rule, other))
    own = own if isinstance(own, Mapping) else {}
    theirs = theirs if isinstance(theirs, Mapping) else {}
    there = f"{other.access_type} {other.access_to} ({other.access_level}, {other_name})"
    if other.access_type != rule.access_type:
        why = own.get("alone") or theirs.get("alone")
        if why:
            return (f"{rule.access_type} rules cannot stand beside {other.access_type} rules "
                    f"on one share ({why}): {there}")
    elif own.get("one_level") and other.access_level != rule.access_level:
        return (f"{rule.access_type} rules of one share all have one access level "
                f"({own['one_level']}): {there}")
    return None


def conflicts(rules: Sequence[tuple[str, Rule]], limits: Limits | None) -> dict[str, str]:
    """The rules of one share (``(name, rule)``, oldest first) that cannot
    stand beside an older one by the set limits (``alone``, ``one_level``),
    by name, with the reason: each rule is judged against the older rules
    kept, so the newer of two that clash is the one refused."""
    kept: list[tuple[str, Rule]] = []
    refused: dict[str, str] = {}
    for ident, rule in rules:
        for other_id, other in kept if limits else ():
            why = _set_refusal(rule, other_id, other, limits or {})
            if why:
                refused[ident] = why
                break
        else:
            kept.append((ident, rule))
    return refused
