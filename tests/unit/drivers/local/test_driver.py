"""The local driver without root: validation, configuration rendering,
fencing tokens, command errors and stats. The real backend is exercised in
tests/functional/test_local_driver*.py."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from pathlib import Path

import pytest
from sharemgr.drivers.exceptions import (
    FencedCall,
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
    ShareShrinkingPossibleDataLoss,
)
from sharemgr.drivers.local import commands, ganesha, samba, validation
from sharemgr.drivers.local.driver import LocalDriver
from sharemgr.drivers.local.exports import _cifs_share
from sharemgr.drivers.local.fencing import FenceStore
from sharemgr.drivers.testing import build_driver

HOSTILE = [
    "", " ", "a b", 'a"b', "a'b", "a\nb", "a;b", "$(reboot)", "`id`", "../etc", "a/b",
    "]", "[global]", "}", "a{b", "a=b", "a#b", "a%b", "a\\b", "a,b", "\0", "-rf", ".", "..",
    "x" * 65,
]


def _driver(tmp_path: Path) -> LocalDriver:
    driver = build_driver("local", tmp_path, local_nfs_port=12049, local_smb_port=1445)
    assert isinstance(driver, LocalDriver)  # through its entry point, as share-manager loads it
    return driver


# Validation --------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_are_refused(value):
    with pytest.raises(InvalidShareRequest, match="is not valid"):
        validation.object_id(value)


@pytest.mark.parametrize("value", ["0b3d3793-482b-40d2-bbf9-37ac765b37b5", "kit-share-1", "A_b-9"])
def test_ordinary_ids_pass(value):
    assert validation.object_id(value) == value


@pytest.mark.parametrize("value", HOSTILE + ["10.0.0.300", "10.0.0.1/24", "10.0.0.0/33",
                                             " 10.0.0.1", "10.0.0.1 ", "10.0.0.1\n"])
def test_hostile_ip_targets_are_refused(value):
    with pytest.raises(InvalidShareRequest):
        validation.ip_target(value)


@pytest.mark.parametrize("value,normal", [("127.0.0.1", "127.0.0.1"),
                                          ("10.0.0.0/24", "10.0.0.0/24"),
                                          ("::1", "::1"), ("fd00::/8", "fd00::/8")])
def test_ip_targets_pass_normalised(value, normal):
    assert validation.ip_target(value) == normal


@pytest.mark.parametrize("value", HOSTILE + ["root$", "1abc", "x" * 33, "a:b", "a@b"])
def test_hostile_user_targets_are_refused(value):
    with pytest.raises(InvalidShareRequest):
        validation.user_target(value)


def test_rule_types_by_protocol():
    ip_rule = {"id": "r", "access_type": "ip", "access_to": "10.0.0.1", "access_level": "ro"}
    user_rule = {"id": "u", "access_type": "user", "access_to": "alice", "access_level": "rw"}
    assert validation.rule(ip_rule, "NFS")["access_level"] == "ro"
    assert validation.rule(user_rule, "CIFS")["access_to"] == "alice"
    with pytest.raises(InvalidShareRequest, match="NFS shares take ip rules"):
        validation.rule(user_rule, "NFS")
    with pytest.raises(InvalidShareRequest, match="access level"):
        validation.rule({**ip_rule, "access_level": "all"}, "NFS")
    with pytest.raises(InvalidShareRequest):
        validation.rule({**ip_rule, "access_type": "cert"}, "CIFS")


@pytest.mark.parametrize("value", ['"', "\n", ";", "}", "]", "$x", "%I", "a b "])
def test_config_token_refuses_what_could_break_a_file(value):
    with pytest.raises(InvalidShareRequest):
        validation.config_token(value)


# Rendering ------------------------------------------------------------------------


def test_ganesha_exports_render_one_client_block_per_rule(tmp_path):
    text = ganesha.render_exports([ganesha.NfsExport(
        "s1", 7, tmp_path / "mnt" / "s1", (("10.0.0.0/24", "rw"), ("10.0.1.5", "ro")))])
    assert "Export_Id = 7;" in text
    assert f'Path = "{tmp_path}/mnt/s1";' in text and 'Pseudo = "/shares/s1";' in text
    assert "CLIENT { Clients = 10.0.0.0/24; Access_Type = RW; }" in text
    assert "CLIENT { Clients = 10.0.1.5; Access_Type = RO; }" in text
    # The export's own access is none: a client no block names is refused.
    assert "  Access_Type = None;" in text
    exports = tmp_path / "exports.conf"
    exports.write_text(text)
    assert ganesha.exported_ids(exports) == {"s1"}


def test_ganesha_render_refuses_a_hostile_client():
    with pytest.raises(InvalidShareRequest):
        ganesha.render_exports([ganesha.NfsExport("s1", 1, Path("/m"), (("1.2.3.4; }", "rw"),))])


def test_ganesha_main_config(tmp_path):
    text = ganesha.render_main("127.0.0.1", 12049, tmp_path / "e.conf", tmp_path / "rec")
    assert "NFS_Port = 12049;" in text and "Bind_addr = 127.0.0.1;" in text
    assert f'%include "{tmp_path}/e.conf"' in text and "Graceless = true" in text


def test_samba_shares_render_the_rules(tmp_path):
    ip_ro = _cifs_share("s1", tmp_path, [
        {"id": "1", "access_type": "ip", "access_to": "10.0.0.1", "access_level": "ro"}])
    users = _cifs_share("s2", tmp_path, [
        {"id": "2", "access_type": "user", "access_to": "alice", "access_level": "rw"},
        {"id": "3", "access_type": "user", "access_to": "bob", "access_level": "ro"}])
    closed = _cifs_share("s3", tmp_path, [])
    text = samba.render_shares([ip_ro, users, closed])
    s1 = text.split("[s1]")[1].split("[s2]")[0]
    assert "hosts allow = 10.0.0.1" in s1 and "hosts deny = ALL" in s1
    assert "read only = yes" in s1 and "guest only = yes" in s1
    s2 = text.split("[s2]")[1].split("[s3]")[0]
    assert "valid users = alice bob" in s2 and "read list = bob" in s2
    assert "read only = no" in s2 and "guest ok = no" in s2 and "hosts allow" not in s2
    s3 = text.split("[s3]")[1]
    assert "available = no" in s3 and "hosts deny = ALL" in s3
    shares = tmp_path / "shares.conf"
    shares.write_text(text)
    assert samba.shared_names(shares) == {"s1", "s2", "s3"}


def test_samba_render_refuses_a_hostile_user(tmp_path):
    with pytest.raises(InvalidShareRequest):
        samba.render_shares([samba.CifsShare("s1", tmp_path, users=("a]\n[x",))])


def _ip(ident, to, level="rw", kind="ip"):
    return {"id": ident, "access_type": kind, "access_to": to, "access_level": level}


def test_cifs_rules_samba_cannot_hold_together_refuse_the_newer():
    """Samba has one 'read only' for every address and one 'hosts allow'
    for every account: an ip rule at another level than an older ip rule,
    and ip beside user rules, are refused, the newer of the two."""
    ro_then_rw = [_ip("1", "10.0.0.1", "ro"), _ip("2", "10.0.0.2", "rw")]
    assert list(validation.unservable(ro_then_rw, "CIFS")) == ["2"]
    assert validation.unservable(ro_then_rw[:1], "CIFS") == {}
    ip_then_user = [_ip("1", "127.0.0.1"), _ip("2", "daemon", kind="user"),
                    _ip("3", "10.0.0.0/24")]
    refused = validation.unservable(ip_then_user, "CIFS")
    assert list(refused) == ["2"] and "only the user rules' accounts" in refused["2"]
    user_then_ip = [_ip("1", "daemon", "ro", "user"), _ip("2", "127.0.0.1")]
    assert list(validation.unservable(user_then_ip, "CIFS")) == ["2"]
    users = [_ip("1", "daemon", "rw", "user"), _ip("2", "bin", "ro", "user")]
    assert validation.unservable(users, "CIFS") == {}  # 'read list' holds levels per user
    assert validation.unservable(ro_then_rw, "NFS") == {}  # a CLIENT block per rule
    # A record of an older version holding both kinds serves the older kind.
    record = {"id": "s1", "proto": "CIFS", "rules": ip_then_user}
    assert [r["id"] for r in validation.servable(record)] == ["1", "3"]


def test_update_access_errors_the_newer_of_two_rules_that_clash(tmp_path, monkeypatch):
    """Two allows at once both pass intake; the driver still never serves
    an ip and a user rule together: the newer ends error with the reason,
    the older is served."""
    driver = _driver(tmp_path)
    driver.fence.setup()
    driver.records.setup()
    driver.records.put({"id": "s1", "kind": "share", "proto": "CIFS", "state": "available",
                        "size": 1, "export_id": 1, "rules": []})
    driver.images.mkdir(parents=True, exist_ok=True)
    driver._image("s1").touch()
    published = []
    monkeypatch.setattr(driver.exports, "publish", lambda: published.append(1) or {})
    errors = driver.update_access({"id": "s1", "fence_token": 1},
                                  [_ip("r1", "127.0.0.1"), _ip("r2", "daemon", kind="user")],
                                  [], [])
    assert list(errors or {}) == ["r2"] and errors["r2"]["state"] == "error"
    assert "cannot stand beside ip rules" in errors["r2"]["reason"]
    record = driver.records.get("s1")
    assert [r["id"] for r in validation.servable(record)] == ["r1"] and published == [1]


def test_two_creates_at_once_never_share_an_export_id(tmp_path, monkeypatch):
    """A create chose a free export id and wrote its record later, outside
    the backend's lock: two creates at once (a short crash chaos run) both
    took id 2, and NFS-Ganesha, holding 2 for one share's path, refused
    every exports file after (the backend never came up). The second
    create's choice now waits for the first one's record."""
    import threading

    driver = _driver(tmp_path)
    driver.fence.setup()
    driver.records.setup()
    first_writing, go_on = threading.Event(), threading.Event()
    put = driver.records.put

    def slow_put(record):
        if record["id"] == "a":  # the first create, paused as it writes
            first_writing.set()
            go_on.wait(10)
        put(record)

    monkeypatch.setattr(driver.records, "put", slow_put)
    first = threading.Thread(target=driver.exports.put_new, args=({"id": "a", "kind": "share"},))
    first.start()
    assert first_writing.wait(10)
    second = threading.Thread(target=driver.exports.put_new,
                              args=({"id": "b", "kind": "share"},))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waits for the first's record
    go_on.set()
    first.join(10)
    second.join(10)
    assert sorted(r["export_id"] for r in driver.records.all("share")) == [1, 2]


def test_ganesha_writes_the_narrowest_client_first():
    """Ganesha admits a client by the first CLIENT that names it: an
    address's rule comes before a network's, whatever the order of the rules."""
    exp = ganesha.NfsExport("s1", 1, Path("/m"), (("10.0.0.0/8", "ro"), ("0.0.0.0/0", "rw"),
                                                   ("10.0.0.5", "rw"), ("10.0.0.0/24", "ro"),
                                                   ("2001:db8::/64", "rw"), ("::1", "ro")),
                            ("a", "b", "c", "d", "e", "f"))
    rendered = ganesha.render([exp])
    order = [rendered.rule_lines[n] for n in sorted(rendered.rule_lines)]
    assert order == ["c", "f", "d", "a", "b", "e"]
    lines = rendered.text.splitlines()
    assert "10.0.0.5; Access_Type = RW" in lines[min(rendered.rule_lines) - 1]


def test_samba_main_config_keeps_its_own_folders(tmp_path):
    text = samba.render_main(tmp_path, "127.0.0.1", 1445, tmp_path / "shares.conf", "SHMX")
    for folder in samba.FOLDERS:
        assert str(tmp_path / folder) in text
    lock = samba.runtime_dir(tmp_path) / "lock" / "msg.sock" / "4194304"
    assert len(str(lock)) < 100 and f"lock directory = {lock.parent.parent}" in text
    assert "smb ports = 1445" in text and f"include = {tmp_path}/shares.conf" in text


# Commands ---------------------------------------------------------------------------


def test_a_failing_command_names_itself_its_code_and_last_stderr_line():
    with pytest.raises(commands.CommandFailed) as info:
        commands.run(["sh", "-c", "echo first >&2; echo 'the last' >&2; exit 3"])
    assert isinstance(info.value, ShareBackendException)
    text = str(info.value)
    assert "sh -c" in text and "exited 3" in text and text.endswith("the last")


def test_a_missing_command_is_a_driver_error():
    with pytest.raises(commands.CommandFailed, match="did not run"):
        commands.run(["no-such-program-sharemgr"])


def test_shrink_refusal_is_a_backend_exception():
    assert issubclass(ShareShrinkingPossibleDataLoss, ShareBackendException)


# Fencing --------------------------------------------------------------------------


def test_fence_store_keeps_the_highest_token(tmp_path):
    store = FenceStore(tmp_path)
    store.setup()
    with store.guard({"id": "a", "fence_token": 5}, "share"):
        pass
    with store.guard({"id": "a", "fence_token": 5}, "share"):
        pass  # equal: accepted
    with pytest.raises(FencedCall, match="older than 5"):
        with store.guard({"id": "a", "fence_token": 4}, "share"):
            pytest.fail("a stale call ran")
    with store.guard({"id": "a", "fence_token": None}, "share"):
        pass  # unfenced: accepted, nothing recorded
    with store.guard({"id": "a"}, "share"):
        pass
    assert store.highest("a") == 5
    with store.guard({"id": "a", "fence_token": 9}, "share"):
        pass
    assert FenceStore(tmp_path).highest("a") == 9  # durable: a new store reads it
    assert store.highest("b") is None


def test_fence_store_refuses_a_token_that_is_not_an_int(tmp_path):
    store = FenceStore(tmp_path)
    store.setup()
    for bad in ("5", 5.0, True):
        with pytest.raises(FencedCall):
            with store.guard({"id": "a", "fence_token": bad}, "share"):
                pass


def _hold(root: str, started, release) -> None:
    store = FenceStore(Path(root))
    with store.guard({"id": "a", "fence_token": 1}, "share"):
        started.set()
        release.wait(10)


def test_fence_lock_excludes_another_process(tmp_path):
    store = FenceStore(tmp_path)
    store.setup()
    ctx = multiprocessing.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path), started, release))
    proc.start()
    try:
        assert started.wait(10)
        import fcntl
        import os
        fd = os.open(tmp_path / "locks" / "a.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        release.set()
        proc.join(10)


def test_driver_refuses_stale_tokens_before_changing_anything(tmp_path):
    driver = _driver(tmp_path)
    assert LocalDriver.honours_fencing is True
    sid = str(uuid.uuid4())
    driver.fence.setup()
    driver.records.setup()
    # A status read of an id the backend has no object for records the token.
    with pytest.raises(ShareResourceNotFound):
        driver.get_share_status({"id": sid, "fence_token": 7})
    assert driver.fence.highest(sid) == 7
    share = {"id": sid, "size": 1, "share_proto": "NFS", "fence_token": 6}
    for call in (lambda: driver.create_share(share),
                 lambda: driver.delete_share(share),
                 lambda: driver.extend_share(share, 2),
                 lambda: driver.shrink_share(share, 1),
                 lambda: driver.update_access(share, [], [], []),
                 lambda: driver.get_share_status(share),
                 lambda: driver.get_snapshot_status({"id": sid, "fence_token": 6})):
        with pytest.raises(FencedCall):
            call()
    assert not driver.images.exists() or not any(driver.images.iterdir())
    assert driver.records.all() == []
    # The batch form leaves a fenced id out (asked again one by one).
    assert driver.get_share_statuses([(share, None)]) == {}
    # A delete of what was never made, with a newer token: accepted, idempotent.
    driver.delete_share({**share, "fence_token": 8})
    driver.delete_share({**share, "fence_token": 8})
    assert driver.fence.highest(sid) == 8


@pytest.mark.parametrize("bad", ["../x", "a b", "$(id)", "x;y", "]", "}"])
def test_driver_refuses_hostile_ids_before_changing_anything(tmp_path, bad):
    driver = _driver(tmp_path)
    driver.fence.setup()
    with pytest.raises(InvalidShareRequest):
        driver.create_share({"id": bad, "size": 1, "share_proto": "NFS"})
    with pytest.raises(InvalidShareRequest):
        driver.delete_share({"id": bad})
    assert not any((tmp_path / "state").rglob("*.img"))
    assert not (driver.root / "x").exists()


def test_create_share_refuses_bad_protocol_and_size(tmp_path):
    driver = _driver(tmp_path)
    driver.fence.setup()
    driver.records.setup()
    with pytest.raises(InvalidShareRequest, match="protocol"):
        driver.create_share({"id": "s1", "size": 1, "share_proto": "CEPHFS"})
    with pytest.raises(InvalidShareRequest, match="size"):
        driver.create_share({"id": "s1", "size": 0, "share_proto": "NFS"})
    assert driver.records.all() == []


def test_stats_state_thin_provisioning_and_no_replication(tmp_path):
    stats = _driver(tmp_path).get_share_stats()
    assert stats["replication_type"] is None and stats["snapshot_support"] is True
    pool = stats["pools"][0]
    assert pool["thin_provisioning"] is True and pool["total_capacity_gb"] > 0
    assert stats["driver_handles_share_servers"] is False


def test_a_failed_create_removes_what_it_made(tmp_path, monkeypatch):
    """mkfs fails after the image file exists: the image, the record and
    the export are gone, and the error names the command."""
    from sharemgr.drivers.local import images

    driver = build_driver("local", tmp_path, local_manage_servers=False)
    for folder in (driver.images, driver.snapshots, driver.mounts):
        folder.mkdir(parents=True)
    driver.records.setup()
    driver.fence.setup()
    driver.ganesha.setup()
    driver.samba.setup()

    def failing_create(image: Path, size_bytes: int) -> None:
        image.write_bytes(b"\0" * 1024)
        commands.run(["sh", "-c", "echo 'mkfs.ext4: no space' >&2; exit 1"])

    monkeypatch.setattr(images, "create", failing_create)
    with pytest.raises(commands.CommandFailed, match="exited 1: mkfs.ext4: no space"):
        driver.create_share({"id": "s1", "size": 1, "share_proto": "NFS", "fence_token": 3})
    assert list(driver.images.iterdir()) == [] and driver.records.all() == []
    assert "s1" not in ganesha.exported_ids(driver.ganesha.exports_file)
    with pytest.raises(ShareResourceNotFound):
        driver.get_share_status({"id": "s1"})
    driver.delete_share({"id": "s1", "fence_token": 3})  # idempotent


def test_functional_tests_skip_without_root_but_fail_under_ci(monkeypatch):
    """The local driver's functional tests skip with the reason when this
    is not root (or the packages are missing), and fail under CI=true."""
    from tests.functional import local_harness

    monkeypatch.setattr(local_harness.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(local_harness, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="not root"):
        local_harness.require_local()
    monkeypatch.setattr(local_harness, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI=true: they are required"):
        local_harness.require_local()


# What the running Ganesha serves, from its D-Bus replies ---------------------------

# Replies of ganesha 4.3 (busctl --json=short), captured: export 1 lets in
# 127.0.0.1 read-write and 10.0.0.0/8 read-only; export 0 is the pseudo root.
SHOW_EXPORTS = [[1795797131, 752825350], [
    [1, "/srv/mnt/s1", [["NFSv40", False]], [0, 0]],
    [0, "/", [["NFSv40", False]], [0, 0]]]]
DISPLAY_EXPORT = [1, "/srv/mnt/s1", "/srv/mnt/s1", "", [
    ["127.0.0.1/32", 0, 0, 255, 1, 4294967294, 4294967294, 0, 53490146, 480],
    ["10.0.0.0/8", 0, 0, 255, 1, 4294967294, 4294967294, 0, 53489826, 480]]]


def test_ganesha_served_reads_its_export_list_and_clients(monkeypatch):
    calls = []

    def call(address, dest, path, interface, method, signature="", *args):
        calls.append((address, method, args))
        return SHOW_EXPORTS if method == "ShowExports" else DISPLAY_EXPORT

    monkeypatch.setattr(ganesha.bus, "call", call)
    assert ganesha.served("unix:path=/x", Path("/srv/mnt/s1")) == {
        ("127.0.0.1/32", "rw"), ("10.0.0.0/8", "ro")}
    assert calls[-1] == ("unix:path=/x", "DisplayExport", ("1",))
    assert ganesha.served("unix:path=/x", Path("/srv/mnt/s2")) is None


def test_stats_count_in_share_units_and_the_room_the_shares_can_have(tmp_path):
    """Total is the free space and what the (sparse) images take of it, not
    the filesystem's size: with the ratio at 1.0 every share fits in it."""
    drv = build_driver("local", tmp_path, local_size_unit_mib=16)
    drv.images.mkdir(parents=True)
    image = drv.images / "s1.img"
    with open(image, "wb") as f:
        f.truncate(10 * 16 * 1024 * 1024)  # ten units, sparse
        f.write(os.urandom(16 * 1024 * 1024))  # one written
        f.flush()
        os.fsync(f.fileno())
    drv.records.setup()
    drv.records.put({"id": "s1", "kind": "share", "size": 10, "state": "available"})
    pool = drv.get_share_stats()["pools"][0]
    assert pool["provisioned_capacity_gb"] == 10
    assert 0.9 <= pool["total_capacity_gb"] - pool["free_capacity_gb"] <= 1.2, pool


@pytest.mark.parametrize("value,problem", [
    ("relative/path", "must be an absolute path"),
    ("/srv/my shares", "cannot hold ' '"),
    ('/srv/"x"', "cannot hold '\"'"),
    ("/srv/a;b", "cannot hold ';'"),
    ("/srv/a&b", "cannot hold '&'"),
    ("/srv/sharemgr-local_1.d", None),
])
def test_paths_the_servers_files_can_hold(value, problem):
    from sharemgr.drivers.local.options import ServerPath, path_problem

    found = path_problem(value)
    assert (found is None) if problem is None else (problem in found), found
    if problem:
        with pytest.raises(ValueError, match="absolute|cannot hold"):
            ServerPath()(value)


def test_a_default_state_path_with_a_space_is_refused_at_construction(tmp_path):
    from sharemgr.drivers.loader import DriverOptionError

    with pytest.raises(DriverOptionError, match=r"'/.*my shares/state/local/kit' \(the "
                       r"default, under state_path\): cannot hold ' '.*; set local_state_path"):
        build_driver("local", tmp_path / "my shares")


def test_served_clients_compare_as_networks():
    from sharemgr.drivers.local.serving import collapsed

    halves = {("0.0.0.0/1", "rw"), ("128.0.0.0/1", "rw"), ("10.0.0.1/32", "ro")}
    assert collapsed(halves) == collapsed({("0.0.0.0/0", "rw"), ("10.0.0.1/32", "ro")})
    assert collapsed({("10.0.0.0/24", "rw")}) != collapsed({("10.0.0.0/24", "ro")})
    assert collapsed({("::/1", "rw"), ("8000::/1", "rw")}) == {("::/0", "rw")}


def test_records_holding_one_export_id_are_given_one_each(tmp_path, monkeypatch, caplog):
    """Records a release before the lock above wrote may hold one export id
    for two shares: NFS-Ganesha then refused every exports file, until an
    admin changed one by hand. The next publish gives the second a free id."""
    driver = _driver(tmp_path)
    driver.fence.setup()
    driver.records.setup()
    for oid, export_id in (("a", 1), ("b", 2), ("c", 1), ("d", 2)):
        driver.records.put({"id": oid, "kind": "share", "proto": "NFS", "export_id": export_id,
                            "rules": [], "state": "creating"})
    monkeypatch.setattr(driver.exports.ganesha, "write_exports", lambda nfs: {})
    monkeypatch.setattr(driver.exports.samba, "write_shares", lambda cifs: None)
    with caplog.at_level("WARNING"):
        driver.exports.publish()
    held = {r["id"]: r["export_id"] for r in driver.records.all("share")}
    assert held == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert "shares a and c held NFS export id 1: c now has export id 3" in caplog.text
    driver.exports.publish()  # mended: nothing moves again
    assert {r["id"]: r["export_id"] for r in driver.records.all("share")} == held
