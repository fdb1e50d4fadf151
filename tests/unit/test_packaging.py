"""The built wheel holds every package folder of the tree; the sdist the
licence, sample config, docs and release notes; both commands tell their
version."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_FOLDERS = ("manager", "drivers", "reconcile", "db")


def _package_folders() -> set[str]:
    found = set()
    for top in TOP_FOLDERS:
        for folder, dirs, files in os.walk(ROOT / top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if any(f.endswith(".py") for f in files):
                rel = Path(folder).relative_to(ROOT).as_posix()
                found.add(rel)
    return found


def test_wheel_holds_every_package(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("sharemgr-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for folder in _package_folders():
        for py in (ROOT / folder).glob("*.py"):
            member = f"sharemgr/{folder}/{py.name}"
            if member not in names:
                missing.append(member)
    assert not missing, f"wheel lacks {sorted(missing)}"
    assert "sharemgr/db/migrations/script.py.mako" in names
    assert not any(n.startswith(("tests/", "setup.cfg", "sharemgr/__init__.py")) for n in names)
    # Console scripts and plugin entry points are declared.
    meta = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    for needle in ("share-manager", "sharectl", "sharemgr-dummy-backend",
                   "[sharemgr.share_drivers]", "[oslo.config.opts]"):
        assert needle in text
    sdist = tmp_path / "sdist"
    sdist.mkdir()
    _sdist_holds_the_sample_config_docs_and_release_notes(sdist)


def test_version_of_both_commands():
    """``--version`` needs no config file and names the installed release."""
    from sharemgr.common.version import version

    bin_dir = Path(sys.executable).parent
    for prog in ("share-manager", "sharectl"):
        out = subprocess.run([str(bin_dir / prog), "--version"], capture_output=True,
                             text=True, env={**os.environ, "SHAREMGR_CONFIG": ""})
        assert out.returncode == 0, out.stderr
        assert (out.stdout + out.stderr).strip() == f"{prog} {version()}"
        assert version() != "unknown"


def _sdist_holds_the_sample_config_docs_and_release_notes(tmp_path: Path) -> None:
    # Called by the wheel's test, not on its own: both builds write the
    # tree's egg-info, and two test workers must not build at once.
    out = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path),
         str(ROOT)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    import tarfile

    sdist = next(tmp_path.glob("sharemgr-*.tar.gz"))
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    notes = {p.relative_to(ROOT).as_posix() for p in (ROOT / "releasenotes/notes").glob("*")}
    docs = {p.relative_to(ROOT).as_posix() for p in (ROOT / "doc").glob("*.rst")}
    wanted = {"LICENSE", "README.rst", "etc/sharemgr.conf.sample", "constraints.txt",
              "constraints-dev.txt"}
    assert wanted | notes | docs <= names, sorted((wanted | notes | docs) - names)
