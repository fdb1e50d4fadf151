"""A type for values that are truly arbitrary JSON."""

from __future__ import annotations

JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
