"""Checks of every value that reaches a command line or a server's
configuration. The driver runs as root and writes Ganesha and Samba
configuration, so it does not rely on intake: what fails here is refused
with one clear message and nothing is changed."""

from __future__ import annotations

import ipaddress
import re

from sharemgr.drivers.exceptions import InvalidShareRequest

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


def ip_target(value: object) -> str:
    """An address or CIDR, normalised (``10.0.0.1/24`` is refused as a
    network with host bits, as ipaddress does with strict=True)."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise InvalidShareRequest(f"local driver: ip rule target {value!r} is not an address")
    try:
        if "/" in value:
            net = ipaddress.ip_network(value, strict=True)
            return str(net)
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise InvalidShareRequest(
            f"local driver: ip rule target {value!r} is not an address or CIDR") from None


def user_target(value: object) -> str:
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise InvalidShareRequest(
            f"local driver: user rule target {value!r} is not valid: use 1-32 letters, "
            "digits, '_', '.' or '-', starting with a letter or '_'")
    return value


def rule(raw: dict, proto: str) -> dict:
    """A checked access rule ``{"id", "access_type", "access_to",
    "access_level"}``.

    :raises InvalidShareRequest: a bad type, target or level, or a type the
        protocol cannot enforce (NFS: ip; CIFS: ip and user).
    """
    kind = raw.get("access_type")
    level = raw.get("access_level") or "rw"
    if level not in LEVELS:
        raise InvalidShareRequest(f"local driver: access level {level!r} is not rw or ro")
    allowed = ("ip",) if proto == "NFS" else ("ip", "user")
    if kind not in allowed:
        raise InvalidShareRequest(
            f"local driver: {proto} shares take {' or '.join(allowed)} rules, not {kind!r}")
    target = ip_target(raw.get("access_to")) if kind == "ip" else user_target(
        raw.get("access_to"))
    return {"id": str(raw.get("id") or ""), "access_type": kind, "access_to": target,
            "access_level": level}


def config_token(value: str) -> str:
    """Last line of defence before a value is written into a Ganesha or
    Samba file: no character that could end a value, a line, a block or a
    section there."""
    if any(c in value for c in '\n\r"\';{}[]=#%$\\,\t\0') or value != value.strip():
        raise InvalidShareRequest(f"local driver: {value!r} cannot be written to a config file")
    return value
