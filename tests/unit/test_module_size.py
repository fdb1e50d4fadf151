"""No module of the package is over 500 lines: a longer one does more than
one job, and is split into modules named for each (the tests' own bound,
600 lines, is in test_test_layout.py)."""

from __future__ import annotations

from tests.unit.test_test_layout import PACKAGES, ROOT

MAX_LINES = 500


def module_lines() -> dict[str, int]:
    """Lines of every Python file of the package folders, migrations included."""
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
            for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def test_no_package_module_is_over_500_lines():
    long = {path: n for path, n in module_lines().items() if n > MAX_LINES}
    assert long == {}, "over 500 lines: " + ", ".join(f"{p} ({n})" for p, n in long.items())


def test_the_count_sees_every_package():
    counted = module_lines()
    assert {path.split("/")[0] for path in counted} == set(PACKAGES)
    assert "drivers/base.py" in counted and "drivers/local/driver.py" in counted
