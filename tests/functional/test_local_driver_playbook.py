"""The share_manager role deploys a ``local`` backend on this machine: it
checks root, installs the packages (already there: no change), writes the
config and starts share-manager, which starts its own servers; a share is
then written and read with the real NFS client. Needs root and the packages
(local_harness) and ansible-core (a test extra)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.functional import local_harness as lh
from tests.functional.harness import BIN, Deployment
from tests.functional.test_playbooks import PLAYBOOKS, ansible_env, ansible_playbook

pytestmark = pytest.mark.functional


def test_role_deploys_a_local_backend(tmp_path):
    lh.require_local()
    playbook_tool = ansible_playbook()
    root = tmp_path / "deployment"
    options = lh.backend_options()
    role_vars = {
        "share_manager_install_method": "existing",
        "share_manager_bin_dir": str(BIN),
        "share_manager_config_file": str(root / "sharemgr.conf"),
        "share_manager_state_path": str(root / "state"),
        "share_manager_log_file": str(root / "share-manager.log"),
        "share_manager_ctl_script": str(root / "share-manager-ctl"),
        "share_manager_pid_file": str(root / "share-manager.pid"),
        "share_manager_host": "localrole",
        "share_manager_membership_timeout": 2,
        "share_manager_reconciliation_wait_seconds": 2,
        "share_manager_backends": {"local": options},
    }
    play = [{"name": "A local backend", "hosts": "localhost", "connection": "local",
             "gather_facts": False,
             "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
             "roles": [{"role": "share_manager", **role_vars}]}]
    (tmp_path / "local.yaml").write_text(yaml.safe_dump(play))
    (tmp_path / "roles").symlink_to(PLAYBOOKS / "roles")
    env = ansible_env(tmp_path)

    def play_it(state: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [playbook_tool, str(tmp_path / "local.yaml"), "-e",
             json.dumps({"share_manager_state": state})],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)

    try:
        out = play_it("started")
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
        assert "Install the packages of the local driver" in out.stdout
        d = Deployment.__new__(Deployment)  # sharectl against the role's config file
        d.config = root / "sharemgr.conf"
        share = d.json("share", "create", "1", "--proto", "NFS", "--name", "role",
                       "--backend", "local", "--wait")
        d.json("access", "allow", share["id"], "--type", "ip", "--to", "127.0.0.1", "--wait")
        location = d.json("share", "show", share["id"])["export_locations"][0]["path"]
        client = lh.Client(options)
        note = tmp_path / "note.txt"
        note.write_text("deployed by ansible\n")
        assert client.put("NFS", location, note, "note.txt").returncode == 0
        back = tmp_path / "back.txt"
        assert client.get("NFS", location, "note.txt", back).returncode == 0
        assert back.read_text() == "deployed by ansible\n"
        assert all(lh.servers_running(lh.local_root(root / "state")).values())
        out = play_it("stopped")
        assert out.returncode == 0, out.stdout[-4000:]
    finally:
        ctl = root / "share-manager-ctl"
        if ctl.exists():
            subprocess.run([str(ctl), "stop"], capture_output=True, timeout=120)
        lh.cleanup(lh.local_root(root / "state"))
