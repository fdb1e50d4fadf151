"""``sharectl status``'s engine count: an engine that died without
stopping (killed, or cut off from the coordination backend) is not
counted among those running."""

from __future__ import annotations

import json

import pytest
from sharemgr.db import services
from sharemgr.db.engine import Database


@pytest.fixture
def conf(sharectl_conf, tmp_path):
    path = sharectl_conf("host = hostA\nenabled_share_backends = dummy\n"
                         "[dummy]\nshare_driver = dummy\n", synced=True)
    db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    # Two engines that never stopped and are in no coordination group: as
    # after a SIGKILL, once their membership expired.
    for n in (1, 2):
        services.service_register(db, "hostA", "share-manager", f"hostA.dead{n}")
    db.dispose()
    return path


def test_dead_engines_are_not_counted_as_running(conf, sharectl):
    code, out, _err = sharectl(conf, "status", "-f", "json")
    engines = json.loads(out)["engines"]
    assert code == 0 and (engines["alive"], engines["not_alive"], engines["running"]) == (0, 2, 2)
    code, table, _err = sharectl(conf, "status")
    assert code == 0
    # Was "0 alive of 2 running".
    assert "0 alive, 2 not alive (killed or cut off, not stopped)" in table, table
    assert "running" not in table.split("backends")[0], table
