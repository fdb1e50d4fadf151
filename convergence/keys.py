"""Unknown keys in a template's mappings: which one a refusal names."""

from __future__ import annotations

from collections.abc import Collection, Iterable


def first_unknown(given: Iterable[object], allowed: Collection[str]) -> str | None:
    """The first (in sorted order) of ``given``'s keys that ``allowed`` does
    not hold: the one a refusal names; None if all are allowed."""
    unknown = sorted(set(map(str, given)) - set(allowed))
    return unknown[0] if unknown else None
