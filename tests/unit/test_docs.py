"""The documentation builds: doc/ as a Sphinx site with warnings as errors
(what ``tox -e docs`` runs), and README.rst as valid reStructuredText."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docutils.core
import docutils.utils

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_build_without_warnings(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "dummy",
         str(ROOT / "doc"), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_readme_is_valid_restructuredtext():
    text = (ROOT / "README.rst").read_text()
    # Halt on warnings (level 2): a broken table or list is an error.
    docutils.core.publish_doctree(text, settings_overrides={
        "halt_level": docutils.utils.Reporter.WARNING_LEVEL, "report_level": 5})
