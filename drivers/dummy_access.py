"""The dummy backend's exports: the rules an object's export allows, kept in
its details (``sharemgr-dummy-backend list`` shows them)."""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.dummy_state import AppliedRule, BackendObject, Tx

# What the dummy backend can export each protocol to, as a real one would
# (NFS by address, CIFS by user or address, CephFS by cephx identity): a
# rule of another type is refused, the others applied.
ACCESS_TYPES_BY_PROTO = {"NFS": ("ip",), "CIFS": ("user", "ip"), "CEPHFS": ("cephx",),
                         "GLUSTERFS": ("ip", "cert"), "HDFS": ("user",), "MAPRFS": ("user",)}


def apply_rules(tx: Tx, obj: BackendObject, share: Mapping[str, object],
                access_rules: list[base.AccessRule]) -> dict[str, base.RuleError]:
    """Make ``obj``'s export allow exactly the rules of ``access_rules`` its
    protocol can serve; the others are refused (by rule id)."""
    details = obj["details"].copy()
    allowed = ACCESS_TYPES_BY_PROTO.get(
        str(details.get("share_proto") or share.get("share_proto") or "").upper(),
        ("ip", "user", "cert"))
    applied: list[AppliedRule] = []
    refused: dict[str, base.RuleError] = {}
    for rule in access_rules:
        if rule["access_type"] in allowed:
            applied.append({"id": rule["id"], "access_type": rule["access_type"],
                            "access_to": rule["access_to"],
                            "access_level": rule["access_level"]})
        else:
            refused[rule["id"]] = {"state": vocab.ACCESS_ERROR}
    details["access_rules"] = sorted(applied, key=lambda r: (r["access_type"], r["access_to"]))
    tx.update(obj["id"], details=details)
    return refused
