"""The ansible playbooks: every playbook passes ``ansible-playbook
--syntax-check`` (the lint step), and the functional reconciliation playbook
passes against real share-manager processes — and fails, naming each resource
left in its transient status, when startup reconciliation is disabled in its
config."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import IN_CI
from tests.functional import forks

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
RECONCILIATION = PLAYBOOKS / "functional-reconciliation.yaml"
# The commands of the virtualenv the tests run in: sharectl, share-manager,
# sharemgr-dummy-backend and ansible-playbook (ansible-core is a test extra).
BIN = Path(sys.executable).parent
RUN_TIMEOUT = 1200


def ansible_playbook() -> str:
    path = BIN / "ansible-playbook"
    if path.exists():
        return str(path)
    found = shutil.which("ansible-playbook")
    if found:
        return found
    msg = "ansible-playbook is not installed (ansible-core is in the test extras)"
    if IN_CI:
        pytest.fail(msg + " (CI=true)")
    pytest.skip(msg)


def ansible_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a run: this venv first on PATH, ansible's own files
    under tmp_path, and no ansible.cfg of the user or the current folder."""
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ANSIBLE_") and k != "SHAREMGR_CONFIG"}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        ANSIBLE_CONFIG=str(cfg),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
    )
    return env


@pytest.mark.parametrize("playbook", sorted(p.name for p in PLAYBOOKS.glob("*.yaml")))
def test_syntax_check(playbook, tmp_path):
    out = subprocess.run(
        [ansible_playbook(), "--syntax-check", str(PLAYBOOKS / playbook)],
        capture_output=True, text=True, env=ansible_env(tmp_path), timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_playbooks_found():
    assert RECONCILIATION.exists()
    assert (PLAYBOOKS / "roles" / "share_manager" / "tasks" / "main.yaml").exists()


class Run:
    """One ansible-playbook run of the reconciliation playbook, in the background."""

    def __init__(self, tmp_path: Path, name: str, extra: dict, *args: str) -> None:
        self.root = tmp_path / name
        self.root.mkdir()
        self.log = self.root / "ansible.out"
        # sharectl through the worker's fork server: the playbook runs it
        # about 60 times a run (tests/functional/forks.py).
        bin_dir = forks.commands(self.root / "bin")
        vars_ = {"sm_root": str(self.root / "deployment"), "sm_bin_dir": str(bin_dir), **extra}
        self.proc = subprocess.Popen(
            [ansible_playbook(), str(RECONCILIATION), "-e", json.dumps(vars_), *args],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
            env=ansible_env(self.root), cwd=self.root, start_new_session=True,
        )

    def wait(self) -> tuple[int | None, str]:  # None: killed at RUN_TIMEOUT
        try:
            rc = self.proc.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)
            rc = None
        return rc, self.log.read_text(errors="replace")

    def cleanup(self) -> None:
        """Stop what the run left running (it stops share-manager itself
        unless it was killed)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)
        for name in ("share-manager-ctl", "share-manager-ctl-2"):
            ctl = self.root / "deployment" / name
            if ctl.exists():
                subprocess.run([str(ctl), "stop"], capture_output=True, timeout=120,
                               env={**os.environ, "STOP_TIMEOUT": "30"})


def scenario() -> tuple[list[dict], dict[str, str]]:
    """The playbook's cases and, for the crashes, the status each leaves."""
    play = yaml.safe_load(RECONCILIATION.read_text())[0]
    transient = {c["name"]: c["transient"] for c in play["vars"]["sm_crashes"]}
    return play["vars"]["sm_cases"], transient


def evidence(run: Run, name: str) -> str:
    """What a failure needs to be explained after the run's folder is gone:
    the resource's rows (deleted ones too) and its requests from the run's
    SQLite database, and the log of share-manager's final start."""
    state = run.root / "deployment"
    lines = []
    db = state / "state" / "sharemgr.sqlite"
    if db.exists():
        con = sqlite3.connect(db)
        try:
            for table in ("shares", "share_snapshots", "share_backups", "share_servers",
                          "share_groups", "share_group_snapshots"):
                cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
                if "name" not in cols:
                    continue
                for row in con.execute(f"SELECT * FROM {table} WHERE name = ?", (name,)):
                    record = dict(zip(cols, row, strict=True))
                    lines.append(f"{table}: {record}")
                    lines += [f"request: {r}" for r in con.execute(
                        "SELECT * FROM requests WHERE resource_id = ?", (record["id"],))]
        finally:
            con.close()
    log = state / "share-manager.log"
    if log.exists():
        lines.append(log.read_text(errors="replace").split("share-manager starting:")[-1][-4000:])
    return "\n".join(lines)


@pytest.mark.long(210)
def test_reconciliation_playbook(tmp_path, pg_url, redis_url):
    """The playbook passes, on SQLite with one engine and on PostgreSQL +
    Redis with two engines of the host started together (each resource
    settled once); with startup reconciliation disabled in its config it
    fails, naming every resource, its expected and its actual status. The
    runs go on at the same time, each with a deployment of its own."""
    runs = {
        "enabled": Run(tmp_path, "enabled", {}),
        "disabled": Run(tmp_path, "disabled",
                        {"sm_reconciliation_enabled": False, "sm_settle_bound": 10}),
        # The stack play starts from an empty deployment by wiping the state
        # folder, which empties SQLite, not a server: this run is the first play.
        "two-engines": Run(tmp_path, "two-engines",
                           {"sm_engines": 2, "sm_database_connection": pg_url,
                            "sm_coordination_url": redis_url},
                           "--tags", "reconciliation"),
    }
    try:
        results = {name: run.wait() for name, run in runs.items()}
    finally:
        for run in runs.values():
            run.cleanup()

    rc, out = results["enabled"]
    assert rc == 0, f"the playbook failed (exit {rc}):\n{out[-6000:]}"
    assert "TASK [Every resource reached its expected status]" in out
    assert re.search(r"localhost\s+: ok=\d+ .*failed=0", out), out[-3000:]

    rc, out = results["two-engines"]
    assert rc == 0, f"the two-engine run failed (exit {rc}):\n{out[-6000:]}"
    assert re.search(r"resources settled once; the final start's passes ran on\s+2 engine", out), \
        out[-3000:]

    rc, out = results["disabled"]
    assert rc not in (0, None), (
        f"the playbook did not fail without reconciliation (exit {rc}):\n{out[-6000:]}")
    cases, crash_transient = scenario()
    unsettled = [c for c in cases if "reset" in c or c.get("crash")]
    assert unsettled
    for case in unsettled:
        actual = case.get("reset") or crash_transient[case["name"]]
        pattern = (rf"{re.escape(case['noun'])} {re.escape(case['name'])} \([0-9a-f-]{{36}}\)"
                   rf"[^\n]*: expected {case['expect']}[^\n]*, actual {actual}\b")
        assert re.search(pattern, out), (
            f"no readable failure for {case['noun']} {case['name']} "
            f"(expected {case['expect']}, actual {actual}):\n{out[-6000:]}\n"
            + evidence(runs["disabled"], case["name"]))
    # The resources nobody touched are fine either way.
    for case in cases:
        if case not in unsettled:
            assert f"{case['noun']} {case['name']} (" not in out
