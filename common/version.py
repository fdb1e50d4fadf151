"""The installed sharemgr's version, for ``--version`` and the metrics."""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("sharemgr")
    except PackageNotFoundError:
        return "unknown"
