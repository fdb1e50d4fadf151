"""A JSON value, as a JSON column holds it: any of them, nested."""

JSONValue = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
