"""The package map holds: every import points down the layers of
``.importlinter``, and no package's modules import each other in a cycle
(``.importlinter-cycles``); doc/design.rst explains both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", [".importlinter", ".importlinter-cycles"])
def test_import_contracts_hold(config):
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / config), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
