"""The dummy driver's manage and unmanage (drivers/dummy_manage.py) and the
``add-share`` command that puts a share no manager made on its backend (the
conformance kit's checks of them run in test_dummy.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from sharemgr.drivers import dummy_cli
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.dummy_state import BackendObject
from sharemgr.drivers.exceptions import InvalidShareRequest, ShareResourceNotFound
from sharemgr.drivers.testing import build_driver


def make(tmp_path, **options) -> DummyDriver:
    return build_driver(DummyDriver, tmp_path, setup=True, **options)


def share_dict(path: str | None = None, proto: str = "NFS") -> dict:
    return {"id": str(uuid.uuid4()), "share_id": str(uuid.uuid4()), "name": "taken",
            "size": 0, "share_proto": proto, "host": "kithost@kit",
            "export_locations": [{"path": path}] if path else []}


def objects(drv: DummyDriver) -> dict[str, BackendObject]:
    with drv.state.reading() as tx:
        return {o["id"]: o for o in tx.objects()}


def test_manage_rekeys_the_share_and_its_snapshots(tmp_path):
    drv = make(tmp_path)
    old = share_dict()
    old["size"] = 2
    path = drv.create_share(old)[0]["path"]
    drv.create_snapshot({"id": "snap-1", "share_instance_id": old["id"], "size": 2})
    drv.unmanage(old)  # nothing changes on the backend
    assert old["id"] in objects(drv)
    new = share_dict(path)
    answer = drv.manage_existing(new, {"k": "v"})
    assert answer["size"] == 2 and path in {loc["path"] for loc in answer["export_locations"]}
    objs = objects(drv)
    assert old["id"] not in objs
    assert (objs[new["id"]]["share_id"], objs[new["id"]]["name"]) == (new["share_id"], "taken")
    assert objs["snap-1"]["share_instance_id"] == new["id"]  # its snapshot follows
    # Asked again with the same ids (a crash after the first): the same answer.
    assert drv.manage_existing(new, {"k": "v"}) == answer
    assert drv.get_share_status(new)["size"] == 2


def test_manage_refuses_what_it_cannot_take(tmp_path):
    drv = make(tmp_path)
    path = drv.create_share({**share_dict(proto="CIFS"), "size": 1})[0]["path"]
    with pytest.raises(InvalidShareRequest, match="is a CIFS share, not NFS"):
        drv.manage_existing(share_dict(path), {})
    with pytest.raises(ShareResourceNotFound):
        drv.manage_existing(share_dict("nowhere:/x"), {})
    with pytest.raises(InvalidShareRequest, match="export path"):
        drv.manage_existing(share_dict(), {})
    with pytest.raises(ShareResourceNotFound):
        drv.manage_existing_snapshot({"id": "s", "provider_location": "nope",
                                      "share_instance_id": "x"}, {})


def test_a_snapshot_of_another_share_is_refused(tmp_path):
    drv = make(tmp_path)
    share = {**share_dict(), "size": 1}
    drv.create_share(share)
    drv.create_snapshot({"id": "snap-1", "share_instance_id": share["id"], "size": 1})
    with pytest.raises(InvalidShareRequest, match="is of share instance"):
        drv.manage_existing_snapshot({"id": "s2", "provider_location": "snap-1",
                                      "share_instance_id": "other"}, {})
    got = drv.manage_existing_snapshot({"id": "s2", "snapshot_id": "S", "provider_location":
                                        "snap-1", "share_instance_id": share["id"]}, {})
    assert got == {"size": 1, "provider_location": "snap-1"}
    assert objects(drv)["s2"]["details"]["provider_location"] == "snap-1"


def test_servers_are_managed_by_id_or_name_in_dhss_mode_only(tmp_path):
    drv = make(tmp_path / "dhss", driver_handles_share_servers=True)
    details = drv.setup_server({"id": "srv-1"})
    drv.unmanage_server(details)
    ident, managed = drv.manage_server({"id": "srv-2"}, details["server_name"], {})
    assert ident == details["server_name"] and managed == details
    assert "srv-1" not in objects(drv) and objects(drv)["srv-2"]["kind"] == "share_server"
    plain = make(tmp_path / "plain")
    with pytest.raises(InvalidShareRequest, match="does not handle share servers"):
        plain.manage_server({"id": "x"}, "srv-1", {})


def test_the_knobs_reach_the_manage_methods(tmp_path):
    drv = make(tmp_path, dummy_fail_methods=["unmanage.gone-"])
    with pytest.raises(Exception, match="unmanage of .* failed"):
        drv.unmanage({"id": "x", "name": "gone-1"})
    drv.unmanage({"id": "y", "name": "kept"})


def test_add_share_puts_an_unmanaged_share_on_the_backend(tmp_path, capsys):
    drv = make(tmp_path)
    state = drv.dummy_state_path
    assert dummy_cli.main(["--state-path", state, "add-share", "--size", "3", "--proto",
                           "cifs", "--name", "old"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["size"], made["name"], made["details"]["share_proto"]) == (3, "old", "CIFS")
    answer = drv.manage_existing(share_dict(made["export_locations"][0]["path"], "CIFS"), {})
    assert answer["size"] == 3
    assert dummy_cli.main(["--state-path", state, "add-share", "--size", "0",
                           "--proto", "NFS"]) == 2
    assert "positive" in capsys.readouterr().err
