"""The local driver when things go wrong: share-manager killed inside a
create and inside an extend, a reboot (no server, no mount), an export
removed out of band, and hostile values through sharectl. Needs root and
the packages (local_harness)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.functional import local_harness as lh
from tests.functional.harness import SETUPS, wait_until
from tests.functional.test_local_driver import _location, _rule

pytestmark = pytest.mark.functional


def _records(root: Path) -> dict[str, dict]:
    out = {}
    for path in (root / "records").glob("*.json"):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    return out


def _kill_when(engine, predicate, timeout: float = 60) -> None:
    """SIGKILL the engine as soon as ``predicate()`` holds (polled fast)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            engine.proc.send_signal(signal.SIGKILL)
            engine.proc.wait(30)
            return
        time.sleep(0.005)
    raise AssertionError("the moment to kill never came")


def _held_resize(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``resize2fs`` stops before an offline resize
    (one of an image file, not a /dev/loop device), says so in the file
    returned, and exits without resizing once its caller is gone: the
    engine can be killed at that moment whatever the machine's speed."""
    real = shutil.which("resize2fs", path=os.environ["PATH"] + ":/usr/sbin:/sbin")
    assert real, "resize2fs is missing"
    shims, reached = tmp_path / "shims", tmp_path / "resize-reached"
    shims.mkdir()
    shim = shims / "resize2fs"
    shim.write_text(
        "#!/bin/sh\n"
        f'case "$1" in /dev/*) exec {real} "$@";; esac\n'
        f"touch {reached}\n"
        'while kill -0 "$PPID" 2>/dev/null; do sleep 0.05; done\n'
        "exit 1\n")
    shim.chmod(0o755)
    return {"PATH": f"{shims}:{os.environ['PATH']}"}, reached


def _served(client, proto, loc) -> bool:
    return client.ls(proto, loc).returncode == 0


@pytest.mark.parametrize("setup", SETUPS)
def test_kills_inside_create_and_extend_then_a_reboot(local, request, tmp_path, setup):
    d, options = local(**lh.servers_for(request, setup))
    client = lh.Client(options)
    root = lh.local_root(d.state)
    # Without CAP_SYS_RESOURCE: the extend below takes the offline path on
    # any machine, so there is an unmounted moment to be killed in.
    engine = d.start(preexec_fn=lh.without_online_resize)
    kept = d.json("share", "create", "1", "--proto", "NFS", "--name", "kept",
                  "--backend", "local", "--wait")
    _rule(d, kept["id"], "--type", "ip", "--to", "127.0.0.1")
    cifs = d.json("share", "create", "1", "--proto", "CIFS", "--name", "kept-cifs",
                  "--backend", "local", "--wait")
    _rule(d, cifs["id"], "--type", "ip", "--to", "127.0.0.1")

    # Killed inside a create: as soon as the driver has recorded it.
    made = d.json("share", "create", "1", "--proto", "NFS", "--name", "crashed",
                  "--backend", "local")
    _kill_when(engine, lambda: made["instance_id"] in _records(root))
    held, reached = _held_resize(tmp_path)
    engine = d.start(preexec_fn=lh.without_online_resize, env=held)
    wait_until(lambda: d.json("share", "show", made["id"])["status"] in ("available", "error"),
               timeout=90, what="the killed create settled")
    settled = d.json("share", "show", made["id"])
    if settled["status"] == "available":  # the backend finished it: it is served
        _rule(d, made["id"], "--type", "ip", "--to", "127.0.0.1")
        assert _served(client, "NFS", _location(d, made["id"]))
    else:  # the backend does not serve it; deleting it cleans up
        d.sharectl("share", "delete", made["id"], "--wait")
        assert made["instance_id"] not in _records(root)

    # Killed inside an extend: the image is unmounted for the offline resize,
    # which the shim holds until the engine is gone.
    d.sharectl("share", "extend", kept["id"], "2")
    _kill_when(engine, reached.exists)
    assert _records(root)[kept["instance_id"]]["state"] == "resizing"
    engine = d.start()
    wait_until(lambda: d.json("share", "show", kept["id"])["status"] == "available",
               timeout=90, what="the killed extend settled")
    assert d.json("share", "show", kept["id"])["size"] in (1, 2)
    assert _served(client, "NFS", _location(d, kept["id"]))

    # A reboot: nothing mounted, no server running. A restart serves all again.
    engine.terminate()
    lh.simulate_reboot(root)
    assert lh.mounts_under(root) == [] and not any(lh.servers_running(root).values())
    assert not _served(client, "NFS", _location(d, kept["id"]))
    d.start()
    wait_until(lambda: _served(client, "NFS", _location(d, kept["id"])), timeout=60,
               what="the NFS share served after the reboot")
    assert _served(client, "CIFS", _location(d, cifs["id"]))
    assert d.json("share", "show", kept["id"])["status"] == "available"


def _remove_export(root: Path, inst: str) -> None:
    """What a careless administrator does: delete a share's export block
    from Ganesha's exports file and make Ganesha re-read it."""
    exports = root / "ganesha" / "exports.conf"
    text = exports.read_text()
    start = text.index("EXPORT {", 0)
    while f'Pseudo = "/shares/{inst}";' not in text[start:text.index("\n}", start)]:
        start = text.index("EXPORT {", start + 1)
    end = text.index("\n}", start) + 2
    exports.write_text(text[:start] + text[end:])
    lh.reload_ganesha(root)


STACK = """
resources:
  data:
    type: share
    properties: {size: 1, proto: NFS, backend: local}
"""


@pytest.mark.parametrize("setup", SETUPS)
def test_export_removed_out_of_band_is_drift(local, request, tmp_path, setup):
    d, options = local(**lh.servers_for(request, setup))
    root = lh.local_root(d.state)
    d.start()
    share = d.json("share", "create", "1", "--proto", "NFS", "--name", "drifty",
                   "--backend", "local", "--wait")
    template = tmp_path / "web.yaml"
    template.write_text(STACK)
    d.sharectl("stack", "create", "web", "-t", str(template), "--wait")
    assert d.json("stack", "check", "web")["status"] == "COMPLETE"
    made = d.json("stack", "resource", "list", "web")[0]["physical_id"]
    made_inst = d.json("share", "show", made)["instance_id"]

    _remove_export(root, share["instance_id"])
    found = d.json("reconcile", "drift")
    # Asked of the running Ganesha: not served, and served again (the
    # default policy of not_served is repair).
    kinds = {(i["kind"], i["instance_id"], i["action"]) for i in found}
    assert ("not_served", share["instance_id"], "repaired") in kinds, found
    assert d.json("reconcile", "drift") == []

    _remove_export(root, made_inst)
    out = d.sharectl("stack", "check", "web", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "stack web CHECK FAILED: drifted: data (not_served)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# Through sharectl, one of each kind (the unit tests feed the driver many
# more): a space, a quote, a newline, ';', a command substitution, a path
# out, and the ends of a Samba section and a Ganesha block.
HOSTILE = ['a b', 'x"y', "a;b\nc", "$(touch /tmp/pwned)", "../../etc", "]", "}"]


@pytest.mark.long(55)
def test_hostile_values_are_refused_or_harmless(local, tmp_path):
    d, options = local()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    d.start()
    good = d.json("share", "create", "1", "--proto", "CIFS", "--name", "good",
                  "--backend", "local", "--wait")
    _rule(d, good["id"], "--type", "ip", "--to", "127.0.0.1")
    victim = d.json("share", "create", "1", "--proto", "CIFS", "--name", "victim",
                    "--backend", "local", "--wait")
    nfs = d.json("share", "create", "1", "--proto", "NFS", "--name", "victim-nfs",
                 "--backend", "local", "--wait")
    assert client.ls("CIFS", _location(d, good["id"])).returncode == 0

    for value in HOSTILE:
        # A hostile share name: refused, or stored and never written anywhere.
        out = d.sharectl("share", "create", "1", "--proto", "NFS", "--name", value,
                         "--backend", "local", check=False)
        assert out.returncode in (0, 2), out
        for share, kind in ((victim, "user"), (nfs, "ip")):
            out = d.sharectl("access", "allow", share["id"], "--type", kind, "--to",
                             value, "--wait", check=False)
            # Refused at intake (2) or by the driver (1: the rule ends in error).
            assert out.returncode in (1, 2), (value, kind, out.stdout, out.stderr)
            assert "Traceback" not in out.stderr
    wait_until(lambda: _settled(d), timeout=120, interval=1, what="the creates settled")
    assert not Path("/tmp/pwned").exists()
    for conf in (root / "ganesha" / "exports.conf", root / "samba" / "shares.conf"):
        text = conf.read_text()
        for value in HOSTILE:
            if len(value) > 1:
                assert value not in text, (conf, value)
    # No other share's access changed: good still served, victims still refused.
    assert client.ls("CIFS", _location(d, good["id"])).returncode == 0
    assert client.ls("CIFS", _location(d, victim["id"])).returncode != 0
    assert client.ls("NFS", _location(d, nfs["id"])).returncode != 0


def _settled(d) -> bool:
    from sharemgr.common import vocab
    shares = d.json("share", "list")
    snaps = d.json("snapshot", "list")
    return not any(x["status"] in vocab.TRANSIENT_STATUSES for x in shares + snaps)


@pytest.mark.long(40)
def test_short_crash_chaos(local, tmp_path):
    """Random operations through sharectl while share-manager is SIGKILLed
    at random moments; then one engine settles everything, and the host
    agrees with the database: every available share is mounted and exported,
    nothing is mounted that no share claims; finally deleting everything
    leaves nothing behind."""
    import random
    rng = random.Random()
    seed = rng.randrange(10**6)
    rng.seed(seed)
    print(f"local chaos seed {seed}")
    d, options = local()
    root = lh.local_root(d.state)
    engine = d.start()
    names = iter(range(10**6))
    for _round in range(4):
        shares = [s for s in d.json("share", "list") if s["status"] == "available"]
        for _ in range(3):
            op = rng.choice(["create", "create", "extend", "snapshot", "allow", "delete"])
            if op == "create" or not shares:
                proto = rng.choice(["NFS", "CIFS"])
                d.sharectl("share", "create", "1", "--proto", proto, "--name",
                           f"chaos-{next(names)}", "--backend", "local", check=False)
                continue
            target = rng.choice(shares)
            shares.remove(target)
            if op == "extend":
                d.sharectl("share", "extend", target["id"], str(target["size"] + 1),
                           check=False)
            elif op == "snapshot":
                d.sharectl("snapshot", "create", target["id"], check=False)
            elif op == "allow":
                d.sharectl("access", "allow", target["id"], "--type", "ip", "--to",
                           f"127.0.0.{rng.randrange(1, 3)}", check=False)
            else:
                d.sharectl("share", "delete", target["id"], check=False)
        time.sleep(rng.uniform(0.2, 1.5))
        engine.proc.send_signal(signal.SIGKILL)
        engine.proc.wait(30)
        engine = d.start()
    wait_until(lambda: _settled(d), timeout=120, interval=1, what="everything settled")

    # The host agrees with the database.
    records = _records(root)
    shares = d.json("share", "list")
    for share in shares:
        inst = d.json("share", "show", share["id"])["instance_id"]
        if share["status"] == "available":
            assert records.get(inst, {}).get("state") == "available", (share, records.get(inst))
            assert str(root / "mnt" / inst) in lh.mounts_under(root), share
    live = {d.json("share", "show", s["id"])["instance_id"] for s in shares}
    for point in lh.mounts_under(root):
        assert Path(point).name in live, f"{point} is mounted but no share claims it"

    # Everything deleted: nothing left on the host.
    for snap in d.json("snapshot", "list"):
        d.sharectl("snapshot", "delete", snap["id"], "--wait", check=False)
    for share in d.json("share", "list"):
        if share["status"] != "available":
            d.sharectl("share", "reset-state", share["id"], "--state", "error", check=False)
        d.sharectl("share", "delete", share["id"], "--wait", check=False)
    wait_until(lambda: not d.json("share", "list"), timeout=120, interval=1,
               what="every share deleted")
    assert lh.mounts_under(root) == [] and lh.loops_under(root) == []
    assert not list((root / "images").iterdir())


def test_two_shares_holding_one_export_id_are_both_served_after_a_restart(local, tmp_path):
    """What the create race (fixed since) left on disk: two records with
    one NFS export id. NFS-Ganesha refused every exports file after it, and
    the release note said to mend one record by hand. The engine's start
    gives the second share a free id, and a client reads both again."""
    d, options = local()
    client = lh.Client(options)
    root = lh.local_root(d.state)
    engine = d.start()
    shares = [d.json("share", "create", "1", "--proto", "NFS", "--name", f"twin{n}",
                     "--backend", "local", "--wait") for n in (1, 2)]
    note = tmp_path / "note.txt"
    note.write_text("served\n")
    for share in shares:
        _rule(d, share["id"], "--type", "ip", "--to", "127.0.0.1")
        assert client.put("NFS", _location(d, share["id"]), note, "note.txt").returncode == 0
    assert engine.terminate() == 0
    first, second = (root / "records" / f"{s['instance_id']}.json" for s in shares)
    record = json.loads(second.read_text())
    record["export_id"] = json.loads(first.read_text())["export_id"]
    second.write_text(json.dumps(record))

    d.start()
    back = tmp_path / "back.txt"
    for share in shares:
        wait_until(lambda share=share: client.get("NFS", _location(d, share["id"]), "note.txt",
                                                  back).returncode == 0,
                   timeout=60, interval=1, what=f"share {share['name']} served again")
        assert back.read_text() == "served\n"
    held = {r["export_id"] for r in _records(root).values() if r.get("kind") == "share"}
    assert len(held) == 2
