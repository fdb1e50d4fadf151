"""The dummy driver's driver-assisted migration (drivers/dummy_migration.py)
between two dummy backends of one state folder, and the contract's default
(drivers/migration_methods.py): incompatible, so a driver that implements
nothing is never asked to migrate."""

from __future__ import annotations

import pytest
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.dummy import DummyDriver
from sharemgr.drivers.exceptions import FencedCall, ShareBackendException
from sharemgr.drivers.testing import build_driver

from tests.unit.drivers.test_dummy import share_dict


def _pair(tmp_path):
    drivers = {}
    for name in ("alpha", "beta"):
        drivers[name] = build_driver(DummyDriver, tmp_path / name, backend=name, setup=True,
                                     dummy_state_path=str(tmp_path / "dummy" / name),
                                     dummy_honours_fencing=True)
    return drivers["alpha"], drivers["beta"]


def _objects(driver) -> dict[str, dict]:
    with driver.state.reading() as tx:
        return {o["id"]: o for o in tx.objects()}


def test_a_share_moves_to_the_other_backend_and_every_step_is_idempotent(tmp_path):
    alpha, beta = _pair(tmp_path)
    src = {**share_dict("data"), "host": "hostA@alpha", "fence_token": 1}
    alpha.create_share(src)
    dest = {**share_dict("data"), "id": "dest-1", "host": "hostB@beta#p1", "fence_token": 1}
    args = (src, dest, [], {})
    compat = alpha.migration_check_compatibility(src, dest)
    assert compat["compatible"] and compat["writable"] and not compat["preserve_snapshots"]
    alpha.migration_start(*args)
    alpha.migration_start(*args)  # started already: nothing more
    made = _objects(beta)["dest-1"]
    assert (made["status"], made["details"]["pool"]) == ("migrating_to", "p1")
    with pytest.raises(ShareBackendException, match="not done"):
        alpha.migration_complete(*args)
    assert alpha.migration_continue(*args) is False
    assert alpha.migration_get_progress(*args) == {"total_progress": "50"}
    assert alpha.migration_continue(*args) is True
    answer = alpha.migration_complete(*args)
    assert answer["export_locations"][0]["path"] == "hostB.beta.dummy:/shares/dest-1"
    assert alpha.migration_complete(*args) == answer  # once done, the same answer
    assert src["id"] not in _objects(alpha)
    assert _objects(beta)["dest-1"]["status"] == "available"
    alpha.migration_cancel(*args)  # too late to cancel: the share stays
    assert "dest-1" in _objects(beta)


def test_cancel_removes_the_destination_and_an_older_token_is_fenced(tmp_path):
    alpha, beta = _pair(tmp_path)
    src = {**share_dict("data"), "host": "hostA@alpha", "fence_token": 3}
    alpha.create_share(src)
    dest = {**share_dict("data"), "id": "dest-2", "host": "hostA@beta", "fence_token": 3}
    alpha.migration_start(src, dest, [], {})
    with pytest.raises(FencedCall):  # a call of an earlier holder
        alpha.migration_continue({**src, "fence_token": 2}, dest, [], {})
    alpha.migration_cancel(src, dest, [], {})
    alpha.migration_cancel(src, dest, [], {})
    assert "dest-2" not in _objects(beta) and src["id"] in _objects(alpha)


def test_an_unreachable_destination_is_incompatible(tmp_path):
    alpha, _beta = _pair(tmp_path)
    src = {**share_dict("data"), "host": "hostA@alpha"}
    alpha.create_share(src)
    far = {**share_dict("data"), "id": "dest-3", "host": "hostA@gamma"}
    assert alpha.migration_check_compatibility(src, far)["compatible"] is False
    with pytest.raises(ShareBackendException, match="cannot reach"):
        alpha.migration_start(src, far, [], {})


def test_the_contract_answers_incompatible_by_default():
    class Plain(ShareDriver):
        pass

    compat = ShareDriver.migration_check_compatibility(Plain.__new__(Plain), {}, {})
    assert compat == {"compatible": False, "writable": False, "nondisruptive": False,
                      "preserve_metadata": False, "preserve_snapshots": False}


def test_a_share_lends_a_folder_of_files_that_its_delete_removes(tmp_path):
    """Host-assisted migration: the dummy's shares have files only when the
    engine asks for them; a share it does not hold lends nothing, an older
    token is fenced."""
    from sharemgr.drivers.exceptions import ShareResourceNotFound

    alpha, _beta = _pair(tmp_path)
    src = {**share_dict("data"), "host": "hostA@alpha", "fence_token": 2}
    alpha.create_share(src)
    folder = alpha.migration_data_path(src)
    assert folder == str(tmp_path / "dummy" / "alpha" / "data" / src["id"])
    (tmp_path / "dummy" / "alpha" / "data" / src["id"] / "f").write_text("x")
    assert alpha.migration_data_path(src) == folder  # the same, files kept
    with pytest.raises(FencedCall):
        alpha.migration_data_path({**src, "fence_token": 1})
    with pytest.raises(ShareResourceNotFound):
        alpha.migration_data_path({**share_dict("other"), "fence_token": 1})
    alpha.delete_share(src)
    assert not (tmp_path / "dummy" / "alpha" / "data" / src["id"]).exists()
