"""The type checker on every package: mypy, configured in pyproject.toml,
reports no error in sharemgr, and none of its modules is exempted."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "db", "drivers", "manager", "reconcile", "convergence", "cli", "daemon")
# A module beside the packages with one wrong type, so the run shows it can fail.
PROBE = ("from sharemgr.db import models\n\n\n"
         "def name(row: models.Share) -> int:\n    return row.name\n")


def tree(base: Path) -> Path:
    """A directory holding ``sharemgr/<folder>`` links to the source folders:
    the names the installed package gives them, which the imports use."""
    pkg = base / "sharemgr"
    pkg.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    (pkg / "typecheck_probe.py").write_text(PROBE)
    return base


def test_mypy_finds_the_probe_s_error_and_none_in_sharemgr(tmp_path: Path) -> None:
    error = _only_error(ROOT / "pyproject.toml", tree(tmp_path / "src"), "sharemgr", tmp_path)
    assert error.startswith("sharemgr/typecheck_probe.py:5: error: Incompatible return")


def _only_error(config: Path, cwd: Path, package: str, tmp_path: Path) -> str:
    """mypy on ``package`` fails with exactly one error (the probe's): it."""
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config),
         "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "-p", package],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "MYPY_FORCE_COLOR": "0"})
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert len(errors) == 1, "\n".join(errors[:60])
    return errors[0]


# The tests at mypy's default strictness (a test function without
# annotations is not checked; an annotated helper is), beside the package.
TESTS_CONFIG = """[mypy]
python_version = 3.11
namespace_packages = True
explicit_package_bases = True
ignore_missing_imports = True
"""
TESTS_PROBE = "def count(names: list[str]) -> int:\n    return names\n"


def test_mypy_finds_the_probe_s_error_and_none_in_the_tests(tmp_path: Path) -> None:
    base = tree(tmp_path / "src")
    tests = base / "tests"
    tests.mkdir()
    for entry in (ROOT / "tests").iterdir():
        if entry.name != "__pycache__":
            (tests / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (tests / "typecheck_probe.py").write_text(TESTS_PROBE)
    config = tmp_path / "mypy.ini"
    config.write_text(TESTS_CONFIG)
    error = _only_error(config, base, "tests", tmp_path)
    assert error.startswith("tests/typecheck_probe.py:2: error: Incompatible return")


def test_no_module_of_sharemgr_is_exempted() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    exempted = [o["module"] for o in config.get("overrides", [])
                if o.get("ignore_errors") and "sharemgr" in str(o["module"])]
    assert exempted == []


# ``Any`` is for values that are truly arbitrary: its uses (the word, in the
# project's Python: the package, its tests, benchmarks and examples) stay
# under this bound, which only goes down. doc/design.rst, "Types a checker
# reads", says where the rest are.
ANY_BOUND = 125
SOURCES = (*PACKAGES, "tests", "benchmarks", "examples")


def _any_uses(path: Path) -> int:
    """The name ``Any`` in a module's code (not in its comments or strings)."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return sum(1 for t in tokens if t.type == tokenize.NAME and t.string == "Any")


def test_any_stays_under_its_bound() -> None:
    uses = {str(path.relative_to(ROOT)): _any_uses(path)
            for folder in SOURCES for path in (ROOT / folder).rglob("*.py")}
    total = sum(uses.values())
    most = sorted(uses.items(), key=lambda kv: -kv[1])[:10]
    assert total <= ANY_BOUND, f"{total} uses of Any; the most in {most}"
