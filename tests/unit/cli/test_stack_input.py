"""What ``sharectl stack create`` refuses before anything is written, as
the one-resource commands refuse it: a share server on a backend that does
not handle share servers."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def conf(sharectl_conf):
    return sharectl_conf("enabled_share_backends = plain,dhss\n[plain]\nshare_driver = dummy\n"
                         "[dhss]\nshare_driver = dummy\ndriver_handles_share_servers = true\n",
                         synced=True)


def test_a_share_server_on_a_backend_without_them_is_refused(conf, tmp_path, sharectl):
    """It was accepted, and the stack failed and rolled back once an
    engine ran the node."""
    template = tmp_path / "servers.yaml"
    template.write_text("resources:\n  srv: {type: share_server, properties: {backend: plain}}\n")
    code, _out, err = sharectl(conf, "stack", "create", "web", "-t", str(template))
    assert code == 2, err
    assert err.strip().endswith("resource 'srv': backend 'plain' does not handle share "
                                "servers (driver_handles_share_servers = False)"), err
    code, out, _err = sharectl(conf, "stack", "list", "-f", "json")
    assert code == 0 and json.loads(out) == []
    template.write_text("resources:\n  srv: {type: share_server, properties: {backend: dhss}}\n")
    code, _out, err = sharectl(conf, "stack", "create", "web", "-t", str(template))
    assert code == 0, err
