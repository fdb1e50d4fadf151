"""A JSON value, as a JSON column or a driver's free-form answer holds it:
any of them, nested. For values that are truly arbitrary JSON."""

from __future__ import annotations

JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
