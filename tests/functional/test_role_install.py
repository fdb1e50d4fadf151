"""The share_manager role as a production host meets it: it installs
sharemgr into a virtualenv from a source tree (with the runtime pins of
constraints.txt), writes ``[health]`` from its variables, and restarts a
running engine when the installed code changed — not when the same code is
installed again. Checked against ``meta/argument_specs.yml`` (a wrong type
stops the play with the variable's name). Needs ansible-core (a test extra)
and the package index pip installs from."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.functional.test_playbooks import PLAYBOOKS, REPO, ansible_env, ansible_playbook

pytestmark = pytest.mark.functional


def _role_vars(root: Path, src: Path) -> dict:
    return {
        "share_manager_install_method": "venv",
        "share_manager_repo": str(src),
        "share_manager_venv": str(root / "venv"),
        "share_manager_config_file": str(root / "sharemgr.conf"),
        "share_manager_state_path": str(root / "state"),
        "share_manager_log_file": str(root / "share-manager.log"),
        "share_manager_ctl_script": str(root / "share-manager-ctl"),
        "share_manager_pid_file": str(root / "share-manager.pid"),
        "share_manager_service_manager": "pidfile",
        "share_manager_host": "roleinstall",
        "share_manager_membership_timeout": 2,
        "share_manager_reconciliation_wait_seconds": 1,
        "share_manager_health_enabled": True,
        "share_manager_health_port": 0,
    }


@pytest.mark.long(45)
def test_the_role_installs_and_restarts_on_new_code_only(tmp_path):
    tool = ansible_playbook()
    root, src = tmp_path / "deployment", tmp_path / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                             check=True).stdout.split(b"\0")
    for name in filter(None, archive):  # the tree as committed or edited, no build output
        path = REPO / name.decode()
        if path.is_file():
            (src / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            (src / name.decode()).write_bytes(path.read_bytes())
    play = [{"name": "Install", "hosts": "localhost", "connection": "local",
             "gather_facts": False,
             "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
             "roles": [{"role": "share_manager", **_role_vars(root, src)}]}]
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(play))
    (tmp_path / "roles").symlink_to(PLAYBOOKS / "roles")
    env = ansible_env(tmp_path)

    def play_it(**extra) -> str:
        out = subprocess.run([tool, str(tmp_path / "site.yaml"), "-e", json.dumps(extra)],
                             capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=900)
        assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
        return out.stdout

    def pid() -> str:
        return (root / "share-manager.pid").read_text().strip()

    try:
        play_it()
        first = pid()
        config = (root / "sharemgr.conf").read_text()
        assert "[health]" in config and "enabled = true" in config and "port = 0" in config
        version = subprocess.run([str(root / "venv" / "bin" / "share-manager"), "--version"],
                                 capture_output=True, text=True, timeout=60)
        assert version.returncode == 0 and "share-manager" in version.stdout + version.stderr

        # The same tree again: reinstalled, nothing restarted.
        out = play_it()
        assert pid() == first, out[-3000:]

        # New code: the engine restarts on it.
        with (src / "daemon" / "service.py").open("a") as f:
            f.write("\n# a change of the code\n")
        out = play_it()
        assert pid() != first, out[-3000:]
        assert "RUNNING HANDLER [share_manager : Restart share-manager (pid file)]" in out

        # A variable of the wrong type stops the play, naming it.
        play[0]["roles"][0]["share_manager_health_port"] = "eighty"
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(play))
        bad = subprocess.run([tool, str(tmp_path / "bad.yaml")], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=300)
        assert bad.returncode != 0 and "share_manager_health_port" in bad.stdout + bad.stderr
        os.kill(int(pid()), 0)  # the engine the last good run started still runs
    finally:
        ctl = root / "share-manager-ctl"
        if ctl.exists():
            subprocess.run([str(ctl), "stop"], capture_output=True, timeout=120)
