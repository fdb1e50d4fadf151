"""The export blocks the cephfs driver writes for NFS-Ganesha (FSAL CEPH)."""

from __future__ import annotations

import pytest
from sharemgr.drivers.cephfs import nfs
from sharemgr.drivers.exceptions import ShareBackendException

KEY = "AQCjeApr7RQ/JhAAGVIammI3opSkHLYHrSeWEA=="


def _rule(rid, to, level="rw", kind="ip"):
    return {"id": rid, "access_type": kind, "access_to": to, "access_level": level}


def test_an_export_names_its_subvolume_id_key_and_clients():
    text, refused = nfs.render_export(
        "i1", "/volumes/g/i1/uuid", "cephfs", "ganesha-i1", KEY,
        [_rule("r1", "127.0.0.1"), _rule("r2", "10.0.0.0/8", "ro"), _rule("r3", "0.0.0.0/0")])
    assert refused == {}
    assert 'Path = "/volumes/g/i1/uuid";' in text
    assert 'Pseudo = "/shares/i1";' in text
    assert "Export_Id = @EXPORT_ID@;" in text
    assert (f'FSAL {{ Name = CEPH; Filesystem = "cephfs"; User_Id = "ganesha-i1"; '
            f'Secret_Access_Key = "{KEY}"; }}') in text
    assert "CLIENT { Clients = 127.0.0.1; Access_Type = RW; }" in text
    assert "CLIENT { Clients = 10.0.0.0/8; Access_Type = RO; }" in text
    # Ganesha cannot read a /0: its two halves admit the same clients.
    assert "CLIENT { Clients = 0.0.0.0/1, 128.0.0.0/1; Access_Type = RW; }" in text
    assert text.count("{") == text.count("}")


def test_rules_it_cannot_write_are_left_out_with_the_reason():
    text, refused = nfs.render_export(
        "i1", "/p", "cephfs", "ganesha-i1", KEY,
        [_rule("r1", "alice", kind="cephx"), _rule("r2", "127.0.0.1;}"),
         _rule("r3", "2001:db8::/100"), _rule("r4", "127.0.0.1")])
    assert set(refused) == {"r1", "r2", "r3"}
    assert "ip rules" in refused["r1"] and "cephfs driver" in refused["r3"]
    assert text.count("CLIENT") == 1


@pytest.mark.parametrize("key", ['a"b', "abc\n", "AQ==;}", ""])
def test_a_key_that_is_not_base64_is_never_written(key):
    with pytest.raises(ShareBackendException):
        nfs.render_export("i1", "/p", "cephfs", "ganesha-i1", key, [])


def test_the_managed_server_reads_and_watches_the_index(tmp_path):
    store = nfs.Store("cephfs.cephfs.meta", "g1")
    text = nfs.render_main("127.0.0.1", 2049, tmp_path, "/etc/ceph/ceph.conf", "manila", store)
    url = '"rados://cephfs.cephfs.meta/sharemgr/g1.nfs-index"'
    assert f"watch_url = {url};" in text and f"%url {url}" in text
    assert 'UserId = "manila";' in text
