"""The parts of an engine that ``ShareManagerService.start()`` makes."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def started(part: T | None) -> T:
    """A part of the engine that ``start()`` made (the periodic tasks, the
    stops and a backend that joins late read one only once it exists)."""
    if part is None:
        raise RuntimeError("share-manager is not started")
    return part
