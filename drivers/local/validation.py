"""Checks of every value that reaches a command line or a server's
configuration. The driver runs as root and writes Ganesha and Samba
configuration, so it does not rely on intake: what fails here is refused
with one clear message and nothing is changed."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NotRequired, TypedDict

from sharemgr.drivers import access_rules
from sharemgr.drivers.exceptions import InvalidShareRequest

if TYPE_CHECKING:  # records imports fencing, which imports this module
    from sharemgr.drivers.local.records import Record

LOG = logging.getLogger(__name__)

# Ids name files, mount points, export paths and Samba sections: letters,
# digits, '-' and '_' only (uuids fit), never '.', '/', spaces or quotes.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# Samba/Unix account names: the portable POSIX set, no '$' (machine accounts).
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
LEVELS = ("rw", "ro")
PROTOCOLS = ("NFS", "CIFS")


def object_id(value: object, what: str = "id") -> str:
    """A backend object id, safe as a file name and a config token."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidShareRequest(
            f"local driver: {what} {value!r} is not valid: use 1-64 letters, digits, "
            "'-' or '_', starting with a letter or digit")
    return value


def protocol(value: object) -> str:
    proto = str(value or "").upper()
    if proto not in PROTOCOLS:
        raise InvalidShareRequest(
            f"local driver: protocol {value!r} is not supported: use NFS or CIFS")
    return proto


def size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidShareRequest(f"local driver: size {value!r} is not a positive integer")
    return value


# What this backend's exporters can express, per protocol (the general
# forms of drivers/access_rules.py narrowed): reported with the stats so that
# intake refuses the rest up front, and checked again here.
#   NFS-Ganesha 4 reads an IPv6 network's prefix as at most two digits (/100
#   and longer are a syntax error that drops the export); /0 it cannot read
#   at all, so ganesha.py writes it as the two halves of the space.
#   Samba accounts are Unix ones: the portable POSIX set, no groups ('@'),
#   no '$' (machine accounts).
USER_HINT = ("Samba accounts of this host: 1-32 letters, digits, '_', '.' or '-', "
             "starting with a letter or '_' (no groups)")
#   A Samba share has one 'hosts allow' for every account and one 'read only'
#   for every address: ip and user rules beside each other would admit only
#   the rules' users from the rules' addresses, and ip rules at two levels
#   cannot both hold.
CIFS_ALONE = ("Samba would admit only the user rules' accounts from the ip rules' "
              "addresses; deny one kind, or give each its own share")
CIFS_ONE_LEVEL = "Samba has one 'read only' for every address of a share"
ACCESS_LIMITS: dict[str, dict[str, dict[str, object]]] = {
    "NFS": {"ip": {"ipv6_max_prefix": 99}},
    "CIFS": {"ip": {"alone": CIFS_ALONE, "one_level": CIFS_ONE_LEVEL},
             "user": {"pattern": _USER.pattern, "hint": USER_HINT, "alone": CIFS_ALONE}},
}


def ip_target(value: object) -> str:
    """An address or CIDR in its stored form (access_rules.ip)."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise InvalidShareRequest(f"local driver: ip rule target {value!r} is not an address")
    try:
        return access_rules.ip(value)
    except access_rules.RuleRefused as exc:
        raise InvalidShareRequest(f"local driver: ip rule target: {exc}") from None


def user_target(value: object) -> str:
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise InvalidShareRequest(
            f"local driver: user rule target {value!r} is not valid: use {USER_HINT}")
    return value


class CheckedRule(TypedDict):
    """A rule as ``rule`` answers it and a share's record keeps it."""

    id: str
    access_type: str
    access_to: str
    access_level: str
    error: NotRequired[bool]  # True: not served (refused beside another, or by the exporter)
    reason: NotRequired[str]  # the exporter's refusal (exports.py)


def rule(raw: Mapping[str, object], proto: str) -> CheckedRule:
    """A checked access rule ``{"id", "access_type", "access_to",
    "access_level"}``, by the validator intake uses, with this backend's
    limits for the protocol.

    :raises InvalidShareRequest: a bad type, target or level, or a type the
        protocol cannot enforce (NFS: ip; CIFS: ip and user).
    """
    try:
        checked = access_rules.check(raw.get("access_type"), raw.get("access_to"),
                                     raw.get("access_level") or "rw", ACCESS_LIMITS[proto],
                                     f"the local backend's {proto} shares")
    except access_rules.RuleRefused as exc:
        raise InvalidShareRequest(f"local driver: {exc}") from None
    return {"id": str(raw.get("id") or ""), "access_type": checked.access_type,
            "access_to": checked.access_to, "access_level": checked.access_level}


def config_token(value: str) -> str:
    """Last line of defence before a value is written into a Ganesha or
    Samba file: no character that could end a value, a line, a block or a
    section there."""
    if any(c in value for c in '\n\r"\';{}[]=#%$\\,\t\0') or value != value.strip():
        raise InvalidShareRequest(f"local driver: {value!r} cannot be written to a config file")
    return value


def unservable(rules: list[CheckedRule], proto: str) -> dict[str, str]:
    """The checked rules of one share (oldest first) that cannot stand
    beside an older one (the set limits of ACCESS_LIMITS), by id, with the
    reason."""
    named = [(r["id"], access_rules.Rule(r["access_type"], r["access_to"], r["access_level"]))
             for r in rules]
    return {ident: f"local driver: {why}"
            for ident, why in access_rules.conflicts(named, ACCESS_LIMITS[proto]).items()}


def servable(record: Record) -> list[CheckedRule]:
    """The rules of a share's record to serve: not marked in error, and
    passing the checks of today, alone and together (a record written by an
    older version may hold a rule they refuse: it is left out alone, never
    the whole backend)."""
    good = []
    for raw in record.get("rules", []):
        if raw.get("error"):
            continue
        try:
            good.append(rule(raw, record["proto"]))
        except InvalidShareRequest as exc:
            LOG.error("local driver: share %s: recorded rule %s left out: %s", record["id"],
                      raw.get("id"), exc)
    clashes = unservable(good, record["proto"])
    for ident, why in clashes.items():
        LOG.error("local driver: share %s: recorded rule %s left out: %s", record["id"],
                  ident, why)
    return [r for r in good if r["id"] not in clashes]
