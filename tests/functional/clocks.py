"""Engines with a wall clock of their own: PyPI's libfaketime (its bundled
library; Debian's 0.9.10 hangs Python's timed waits), the wall clock only
(monotonic clocks untouched, so timed waits still work). A test skips
without it, or fails under CI=true (``make test`` installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import IN_CI


def _preload() -> dict[str, str]:
    try:
        import libfaketime
    except ImportError:
        if IN_CI:
            pytest.fail("libfaketime is not installed (make test installs it)")
        pytest.skip("libfaketime is not installed (make test installs it)")
    _, env = libfaketime.get_reload_information()
    return {**env, "DONT_FAKE_MONOTONIC": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def shifted_clock(offset: str) -> dict[str, str]:
    """The environment that runs a program with its wall clock ``offset``
    (libfaketime's form: ``+120s``) from the machine's."""
    return {**_preload(), "FAKETIME": offset}


def faked_clock(offset_file: Path) -> dict[str, str]:
    """The same, the offset read from ``offset_file`` (``+0s``, ``-120s``),
    again at most a second after it changes."""
    env = _preload()
    env.pop("FAKETIME_NO_CACHE", None)
    return {**env, "FAKETIME_TIMESTAMP_FILE": str(offset_file), "FAKETIME_CACHE_DURATION": "1"}
