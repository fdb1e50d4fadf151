"""The one validator per access type that intake and drivers share
(drivers/access_rules.py): stored forms, refusals, declared limits."""

from __future__ import annotations

import pytest
from sharemgr.drivers import access_rules
from sharemgr.drivers.access_rules import RuleRefused, check

LOCAL_CIFS = {"ip": {}, "user": {"pattern": "[A-Za-z_][A-Za-z0-9_.-]{0,31}",
                                 "hint": "Samba accounts"}}


@pytest.mark.parametrize("given, stored", [
    ("10.0.0.1/32", "10.0.0.1"), ("2001:DB8::1", "2001:db8::1"),
    ("::ffff:10.0.0.1", "10.0.0.1"), ("::ffff:10.0.0.0/120", "10.0.0.0/24"),
    ("0.0.0.0/0", "0.0.0.0/0"), ("::/0", "::/0"), ("10.0.0.0/255.255.255.0", "10.0.0.0/24"),
    (" 10.0.0.1 ", "10.0.0.1"),
])
def test_ip_stored_forms(given, stored):
    assert check("ip", given).access_to == stored


@pytest.mark.parametrize("given, words", [
    ("fe80::1%lo", "scoped address"), ("fe80::1%25eth0", "scoped address"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("::ffff:0.0.0.0", "unspecified"),
    ("10.0.0.1\n", "control character"), ("10.0.0.1\x00", "control character"),
    ("\t10.0.0.1", "control character"), ("010.0.0.1", "invalid IP"),
    ("10.0.0.0/8 10.0.0.1", "invalid IP"), ("*", "invalid IP"), ("host.example", "invalid IP"),
    ("1" * 300, "of 300 characters"),
])
def test_ip_refusals(given, words):
    with pytest.raises(RuleRefused, match=words):
        check("ip", given)


def test_declared_limits_narrow_and_name_the_backend():
    nfs = {"ip": {"ipv6_max_prefix": 99}}
    assert check("ip", "2001:db8::/99", limits=nfs).access_to == "2001:db8::/99"
    assert check("ip", "2001:db8::1", limits=nfs).access_to == "2001:db8::1"  # a host is fine
    with pytest.raises(RuleRefused, match="b@l NFS: IPv6 networks may have a prefix of at "
                                          "most /99 here, not /100"):
        check("ip", "2001:db8::/100", limits=nfs, where="b@l NFS")
    with pytest.raises(RuleRefused, match="b@l NFS take ip rules, not user"):
        check("user", "alice", limits=nfs, where="b@l NFS")
    assert check("user", "bin", limits=LOCAL_CIFS).access_to == "bin"
    for bad in ("@wheel", "a" * 33, "DOMAIN\\bob", "é"):
        with pytest.raises(RuleRefused, match="Samba accounts"):
            check("user", bad, limits=LOCAL_CIFS)
    with pytest.raises(RuleRefused, match="at least 4"):
        check("user", "bin", limits=access_rules.MANILA_LIMITS)


def test_for_protocol_reads_a_report_defensively():
    assert access_rules.for_protocol({"NFS": {"ip": {}}}, "nfs") == {"ip": {}}
    assert access_rules.for_protocol({"NFS": "junk"}, "NFS") is None
    assert access_rules.for_protocol(None, "NFS") is None


@pytest.mark.parametrize("value", ["a b", 'x"y', "a;b", "$(touch /x)", "}", "a,b"])
def test_users_outside_the_general_set_are_refused(value):
    with pytest.raises(RuleRefused, match="invalid user"):
        check("user", value)


@pytest.mark.parametrize("value", ["alice", "svc-backup_2", "a" * 64])
def test_cephx_ids_are_taken(value):
    assert check("cephx", value) == ("cephx", value, "rw")


@pytest.mark.parametrize("value", ["client.alice", "a.b", "a" * 65, "al ice", "bob/x"])
def test_cephx_ids_ceph_would_misread_are_refused(value):
    with pytest.raises(RuleRefused, match="cephx id"):
        check("cephx", value)


def test_a_cephfs_backend_takes_only_cephx_rules():
    limits = access_rules.for_protocol({"CEPHFS": {"cephx": {}}}, "cephfs")
    assert check("cephx", "alice", "ro", limits).access_level == "ro"
    with pytest.raises(RuleRefused, match="take cephx rules, not ip"):
        check("ip", "10.0.0.1", "rw", limits, where="backend h@cephfs, CEPHFS shares")


def test_set_limits_refuse_the_newer_of_two_rules_that_clash():
    """``alone`` and ``one_level`` judge a share's rules together, oldest
    first: the rule that would clash with one kept is refused, with the
    backend's reason and the rule it clashes with."""
    limits = {"ip": {"alone": "no mixing", "one_level": "one level"}, "user": {}}
    rule = access_rules.Rule
    rules = [("r1", rule("ip", "10.0.0.1", "rw")), ("r2", rule("user", "alice", "rw")),
             ("r3", rule("ip", "10.0.0.2", "ro")), ("r4", rule("ip", "10.0.0.3", "rw"))]
    refused = access_rules.conflicts(rules, limits)
    assert list(refused) == ["r2", "r3"]
    assert refused["r2"] == ("user rules cannot stand beside ip rules on one share (no mixing): "
                             "ip 10.0.0.1 (rw, r1)")
    assert refused["r3"] == ("ip rules of one share all have one access level (one level): "
                             "ip 10.0.0.1 (rw, r1)")
    # Declared on either side; nothing declared, nothing refused.
    assert list(access_rules.conflicts(rules[1::-1], limits)) == ["r1"]
    assert access_rules.conflicts(rules, {"ip": {}, "user": {}}) == {}
    assert access_rules.conflicts(rules, None) == {}


def test_a_name_too_long_is_cut_and_counted_once():
    with pytest.raises(RuleRefused) as refused:
        check("cert", "a" * 65)
    assert str(refused.value) == (f"certificate common name {'a' * 40!r}... is 65 characters "
                                  "long; at most 64")
