"""What ``sharectl stack create`` refuses before anything is written, as
the one-resource commands refuse it: a share server on a backend that does
not handle share servers."""

from __future__ import annotations

import json
import logging

import pytest
from sharemgr.cli import app
from sharemgr.db import migration
from sharemgr.db.engine import Database


@pytest.fixture
def conf(tmp_path):
    root = logging.getLogger()  # cliff adds a console handler per run: taken off after
    handlers = list(root.handlers)
    path = tmp_path / "sharemgr.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nenabled_share_backends = plain,dhss\n"
                    "[plain]\nshare_driver = dummy\n"
                    "[dhss]\nshare_driver = dummy\ndriver_handles_share_servers = true\n")
    db = Database(f"sqlite:///{tmp_path}/sharemgr.sqlite")
    migration.upgrade(db)
    db.dispose()
    yield path
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)


def _sharectl(conf, capsys, *args):
    code = app.main(["--config-file", str(conf), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_share_server_on_a_backend_without_them_is_refused(conf, tmp_path, capsys):
    """It was accepted, and the stack failed and rolled back once an
    engine ran the node."""
    template = tmp_path / "servers.yaml"
    template.write_text("resources:\n  srv: {type: share_server, properties: {backend: plain}}\n")
    code, _out, err = _sharectl(conf, capsys, "stack", "create", "web", "-t", str(template))
    assert code == 2, err
    assert err.strip().endswith("resource 'srv': backend 'plain' does not handle share "
                                "servers (driver_handles_share_servers = False)"), err
    code, out, _err = _sharectl(conf, capsys, "stack", "list", "-f", "json")
    assert code == 0 and json.loads(out) == []
    template.write_text("resources:\n  srv: {type: share_server, properties: {backend: dhss}}\n")
    code, _out, err = _sharectl(conf, capsys, "stack", "create", "web", "-t", str(template))
    assert code == 0, err
