"""``sharectl status``'s engine count: an engine that died without
stopping (killed, or cut off from the coordination backend) is not
counted among those running."""

from __future__ import annotations

import json
import logging

import pytest
from sharemgr.cli import app
from sharemgr.db import migration, services
from sharemgr.db.engine import Database


@pytest.fixture
def conf(tmp_path):
    root = logging.getLogger()  # cliff adds a console handler per run: taken off after
    handlers = list(root.handlers)
    path = tmp_path / "sharemgr.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nhost = hostA\n"
                    "enabled_share_backends = dummy\n[dummy]\nshare_driver = dummy\n")
    db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    migration.upgrade(db)
    # Two engines that never stopped and are in no coordination group: as
    # after a SIGKILL, once their membership expired.
    for n in (1, 2):
        services.service_register(db, "hostA", "share-manager", f"hostA.dead{n}")
    db.dispose()
    yield path
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)


def test_dead_engines_are_not_counted_as_running(conf, capsys):
    assert app.main(["--config-file", str(conf), "status", "-f", "json"]) == 0
    engines = json.loads(capsys.readouterr().out)["engines"]
    assert (engines["alive"], engines["not_alive"], engines["running"]) == (0, 2, 2)
    assert app.main(["--config-file", str(conf), "status"]) == 0
    table = capsys.readouterr().out
    # Was "0 alive of 2 running".
    assert "0 alive, 2 not alive (killed or cut off, not stopped)" in table, table
    assert "running" not in table.split("backends")[0], table
