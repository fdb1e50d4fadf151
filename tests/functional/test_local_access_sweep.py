"""Hostile input for ``sharectl access allow`` on the local driver, every
access type on NFS and CIFS: each input either works, a real client proving
it, or exits 2 with one line and nothing written; and no input changes the
service of another share (a client of a witness share reads throughout).

One daemon; NFS and CIFS are tried at the same time (their shares and
exporters are apart). Inputs that would let this host's client in
(127.0.0.1 is in them) are tried one by one on a share with no other rule:
the client gets in while the rule stands and not after its deny. The others
go, in groups and in parallel, to a share whose one rule lets the client
in: it must keep reading with all of them in force (NFS-Ganesha drops an
export whose CLIENT it cannot read), and the exporters' files must hold
each accepted rule. NUL cannot travel in an argument vector: the unit tests
check it (tests/unit/drivers/test_access_rules.py). Needs root and the
packages."""

from __future__ import annotations

import ipaddress
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.functional import local_harness as lh
from tests.functional.test_local_driver import _location, _rule

pytestmark = pytest.mark.functional

HERE = ipaddress.ip_address("127.0.0.1")
SECRET = "secret"

HOSTILE = [
    "", " ", "a b", 'x"y', "x'y", "a;b", "a\nb", "127.0.0.1\nCLIENT {", "\t",
    "$(touch /tmp/sharemgr-pwned)", "`id`", "a|b", "../../etc", "}", "{", "]", "=", "#",
    "%include /etc/passwd", "\\", "a,b", "*", "ALL", "@netgroup", "-", "--", "x" * 300,
    "9" * 5000, "é", "用户", "１２７.０.０.１", "\u202e127.0.0.1", "\U0001f600",
]
IP = [
    # IPv4 forms
    "127.0.0.1", " 127.0.0.1 ", "127.0.0.1/32", "127.0.0.0/8", "0.0.0.0/0", "0.0.0.0/1",
    "::ffff:127.0.0.1", "127.000.0.1", "127.1", "0x7f.0.0.1", "127.0.0.1/24", "127.0.0.0/33",
    "127.0.0.0/-1", "127.0.0.0/", "/8", "127.0.0.0/08", "10.0.0.0/255.0.0.0", "0.0.0.0",
    "255.255.255.255", "10.0.0.1-10.0.0.9", "10.0.0.*", "10.0.0.0/8 10.0.0.1",
    "127.0.0.1, 10.0.0.1", "127.0.0.1;}", "10.0.0.0/8}", "127.0.0.1/ 8",
    # IPv6 forms, scopes
    "::1", "::", "::/0", "2001:DB8::1", "2001:db8::/32", "2001:db8::/99", "2001:db8::/100",
    "2001:db8::/127", "2001:db8::1/128", "fe80::1%lo", "fe80::1%25lo", "fe80::%eth0/64",
    "[::1]", "1:2:3:4:5:6:7:8:9", "::ffff:10.0.0.0/104", "ff02::1", "2001:db8::/129",
    # hostnames and wildcards
    "localhost", "host.example.com", "*.example.com", "example", "LOCAL",
]
# Every IPv4 prefix, as a network and as an address with host bits (on NFS:
# Samba reads every prefix; NFS-Ganesha is the one with gaps).
PREFIXES = [str(ipaddress.ip_network(f"10.20.30.40/{n}", strict=False)) for n in range(33)]
PREFIXES += [f"10.20.30.40/{n}" for n in range(0, 33, 4)]
USERS = ["bin", "daemon", "_svc", "a.b-c", "a" * 32, "a" * 33, "@wheel", "DOMAIN\\bob",
         "bob@REALM", "root$", "1abc", ".x", "bob bob", "nobody"]
CERTS = ["client.example.com", "cn=x", "c" * 64, "c" * 65]


def _parses(value: str) -> bool:
    try:
        return bool(ipaddress.ip_network(value.strip(" "), strict=False))
    except ValueError:
        return False


def _covers(value: str, proto: str) -> bool:
    """Whether an ip input, if taken, lets this host's client in."""
    try:
        net = ipaddress.ip_network(value.strip(" "), strict=False)
    except ValueError:
        return False
    if isinstance(net, ipaddress.IPv6Network) and net.network_address.ipv4_mapped:
        net = ipaddress.ip_network(f"{net.network_address.ipv4_mapped}/{net.prefixlen - 96}",
                                   strict=False) if net.prefixlen >= 96 else net
    return HERE in net


@pytest.mark.long(120)
def test_hostile_access_allow(local, tmp_path):
    d, options = local()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    d.start()
    smb_conf = str(root / "samba" / "smb.conf")
    for account in ("bin", "daemon"):
        out = lh.run("pdbedit", "-s", smb_conf, "-a", "-t", "-u", account,
                     input_text=f"{SECRET}\n{SECRET}\n")
        assert out.returncode == 0, out.stderr

    def create(proto, name, *rule):
        sid = d.json("share", "create", "1", "--proto", proto, "--name", name,
                     "--backend", "local", "--wait")["id"]
        if rule:
            _rule(d, sid, *rule)
        return sid, _location(d, sid)

    here = ("--type", "ip", "--to", "127.0.0.1")
    witness = {"NFS": create("NFS", "witness-nfs", *here),
               "CIFS": create("CIFS", "witness-cifs", *here)}
    alone = {"NFS": create("NFS", "alone-nfs"), "CIFS": create("CIFS", "alone-cifs")}
    # A CIFS share takes ip or user rules, not both: one crowd of each.
    crowd = {"NFS": create("NFS", "crowd-nfs", *here), "CIFS": create("CIFS", "crowd-cifs", *here),
             "CIFS-users": create("CIFS", "crowd-users", "--type", "user", "--to", "daemon")}
    crowd_user = {"NFS": None, "CIFS": None, "CIFS-users": f"daemon%{SECRET}"}

    def witnesses_read():
        for proto, (_, loc) in witness.items():
            assert client.ls(proto, loc).returncode == 0, f"the {proto} witness lost service"

    def allow(sid, kind, value, wait=True):
        # '--to=VALUE': a value starting with '-' is still a value.
        args = ["access", "allow", sid, "--type", kind, f"--to={value}", "-f", "json"]
        return d.sharectl(*args, *(["--wait"] if wait else []), check=False)

    def judged_refused(out, value):
        assert out.returncode == 2, (value, out.returncode, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sharectl: error:"), (value, out.stderr)
        assert not out.stdout

    witnesses_read()
    accepted: dict[str, list[str]] = {"NFS": [], "CIFS": [], "CIFS-users": []}

    # Inputs that would let the client in: one by one, alone on their share;
    # NFS and CIFS at the same time (their shares and exporters are apart).
    def one_by_one(proto):
        sid, loc = alone[proto]
        # Refusals are the same on both protocols: CIFS gets the forms it may take.
        values = IP + PREFIXES if proto == "NFS" else [v for v in IP if _parses(v)]
        tries = [("ip", v, None) for v in dict.fromkeys(values) if _covers(v, proto)]
        if proto == "CIFS":
            tries += [("user", u, f"{u}%{SECRET}") for u in ("bin", "daemon")]
        # Shut out before the first try; after that, each try's deny shows it
        # (a refused try changed nothing).
        assert all(client.ls(proto, loc, user=u).returncode != 0
                   for u in dict.fromkeys(u for _k, _v, u in tries)), proto
        for kind, value, user in tries:
            out = allow(sid, kind, value)
            if out.returncode == 2:
                judged_refused(out, value)
                assert d.json("access", "list", sid) == []
                continue
            assert out.returncode == 0, (proto, value, out.stdout, out.stderr)
            rule = json.loads(out.stdout)  # the rule as it is once applied (--wait)
            assert rule["state"] == "active", (proto, value, rule)
            assert client.ls(proto, loc, user=user).returncode == 0, (proto, value)
            d.sharectl("access", "deny", sid, rule["id"], "--wait")
            assert client.ls(proto, loc, user=user).returncode != 0, (proto, value)
        witnesses_read()

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(one_by_one, proto) for proto in ("NFS", "CIFS")]:
            done.result()

    # Everything else, in groups, in parallel, onto the crowded shares.
    # Each value goes where it tells something: every ip form and hostile
    # value to NFS (whose exporter is the pickier one), the ip forms that
    # parse at all to CIFS (Samba reads them otherwise), names to CIFS's
    # user crowd, the only one that takes them; NFS and certificates are
    # refused by type, and names on the ip crowd for standing beside ip rules.
    groups = {
        "NFS": [[("ip", v) for v in dict.fromkeys(IP + PREFIXES) if not _covers(v, "NFS")],
                [("user", u) for u in USERS[:3]] + [("cert", c) for c in CERTS],
                [("ip", h) for h in HOSTILE]],
        "CIFS": [[("ip", v) for v in IP if _parses(v) and not _covers(v, "CIFS")],
                 [("user", u) for u in USERS[:3]]],
        "CIFS-users": [[("user", u) for u in USERS if u not in ("bin", "daemon")]
                       + [("cert", c) for c in CERTS[:2]],
                       [("user", h) for h in HOSTILE]],
    }
    def crowded(keys):
        with ThreadPoolExecutor(3) as pool:
            for key in keys:
                proto = key.split("-")[0]
                sid, loc = crowd[key]
                base = len(d.json("access", "list", sid))
                for group in groups[key]:
                    outs = list(pool.map(lambda kv, sid=sid: allow(sid, *kv, wait=False), group))
                    for (_kind, value), out in zip(group, outs, strict=True):
                        if out.returncode == 2 and "already has rule" not in out.stderr:
                            judged_refused(out, value)
                        else:
                            assert out.returncode in (0, 2), (proto, value, out.stderr)
                            if out.returncode == 0:
                                accepted[key].append(value)
                    # Every rule taken is applied, and the share still serves.
                    _wait_active(d, sid)
                    rules = d.json("access", "list", sid)
                    assert {r["state"] for r in rules} == {"active"}, rules
                    assert len(rules) == base + len(accepted[key]), (rules, accepted[key])
                    assert client.ls(proto, loc, user=crowd_user[key]).returncode == 0, key
                    witnesses_read()
                _written(root, proto, loc, [r["access_to"] for r in rules])

    # The NFS crowd beside the two CIFS ones (one after the other: one smb.conf).
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(crowded, keys)
                     for keys in (["NFS"], ["CIFS", "CIFS-users"])]:
            done.result()

    # What got in is what the validator takes: spot checks on the outcome.
    assert "2001:db8::/100" not in accepted["NFS"] and "2001:db8::/100" in accepted["CIFS"]
    names = {"ALL", "EXCEPT"}  # plain words: valid account names, harmless in Samba's lists
    assert not any(v in accepted[p] for p in accepted for v in HOSTILE if v not in names)
    assert set(accepted["CIFS"]) & set(USERS) == set()  # names beside ip rules
    assert set(accepted["CIFS-users"]) & set(USERS) == {"_svc", "a.b-c", "a" * 32, "nobody"}
    witnesses_read()


def _wait_active(d, sid):
    from tests.functional.harness import wait_until

    wait_until(lambda: all(r["state"] in ("active", "error")
                           for r in d.json("access", "list", sid)),
               timeout=120, interval=0.5, what="the rules applied")


def _written(root, proto, location, targets):
    """The exporter's file holds every rule of the share."""
    name = location.replace("\\", "/").rsplit("/", 1)[-1]  # the share instance's id
    if proto == "NFS":
        text = (root / "ganesha" / "exports.conf").read_text()
        block = text[text.index(f'Pseudo = "/shares/{name}"'):]
        block = block[:block.index("\n}")]
        assert block.count("CLIENT {") == len(targets), block
        for t in targets:
            assert f"Clients = {t};" in block or t.endswith("/0"), (t, block)
    else:
        text = (root / "samba" / "shares.conf").read_text()
        section = text[text.index(f"[{name}]"):]
        for t in targets:
            assert t in section, (t, section)
