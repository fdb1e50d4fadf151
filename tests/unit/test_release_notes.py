"""The release notes: every note is valid, and reno groups them by release tag."""
from __future__ import annotations

import shutil
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RENO = str(Path(sys.executable).parent / "reno")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                   cwd=repo, check=True, capture_output=True)


def _headings(report: str) -> list[str]:
    # A version's heading is the line above a row of '=' as long as it.
    lines = report.splitlines()
    return [a for a, b in pairwise(lines) if b and set(b) == {"="} and len(b) == len(a)]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="reno reads the notes from git")
def test_every_note_in_the_tree_passes_reno_lint() -> None:
    out = subprocess.run([RENO, "lint"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_note_gives_a_section_twice() -> None:
    """reno reads a note with PyYAML, which keeps the last of two
    ``fixes:`` and drops the first without a word; so does ``reno lint``."""
    from sharemgr.convergence import template_yaml

    for note in sorted((ROOT / "releasenotes" / "notes").glob("*.yaml")):
        template_yaml.load(note.read_text())  # raises on a key given twice


def test_notes_are_grouped_under_the_release_that_first_carried_them(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    notes = repo / "releasenotes" / "notes"
    notes.mkdir(parents=True)
    shutil.copy(ROOT / "releasenotes" / "config.yaml", repo / "releasenotes" / "config.yaml")
    _git(repo, "init", "-q")
    (notes / "first-0123456789abcdef.yaml").write_text("---\nfeatures:\n  - First thing.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    _git(repo, "tag", "-a", "0.1.0", "-m", "sharemgr 0.1.0")
    (notes / "second-fedcba9876543210.yaml").write_text("---\nfixes:\n  - Second thing.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "two")

    def report() -> str:
        out = subprocess.run([RENO, "report"], cwd=repo, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    text = report()
    assert _headings(text) == ["Release Notes", "Unreleased", "0.1.0"]
    unreleased, released = text.split("\nUnreleased\n", 1)[1].split("\n0.1.0\n", 1)
    assert "Second thing." in unreleased and "First thing." not in unreleased
    assert "First thing." in released and "Second thing." not in released

    # Cutting the next release moves what was unreleased under its version.
    _git(repo, "tag", "-a", "0.2.0", "-m", "sharemgr 0.2.0")
    assert _headings(report()) == ["Release Notes", "0.2.0", "0.1.0"]
