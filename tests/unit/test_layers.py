"""The package map holds: every import points down the layers of
``.importlinter`` (doc/design.rst explains them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_imports_point_down_the_layers():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
