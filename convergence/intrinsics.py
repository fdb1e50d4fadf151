"""A template's intrinsic functions, ``get_resource`` and ``get_attr``:
recognising a call, parsing its argument, and finding every call inside a
value."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sharemgr.convergence.resource_types import TemplateError

GET_RESOURCE = "get_resource"
GET_ATTR = "get_attr"
FUNCTIONS = frozenset({GET_RESOURCE, GET_ATTR})


@dataclass(frozen=True)
class GetResource:
    name: str


@dataclass(frozen=True)
class GetAttr:
    name: str
    attribute: str
    path: tuple[str | int, ...] = ()


# Heat's functions this template language does not have: a call of one,
# or of any other ``get_…``, is said to be one (not a value of a wrong type).
HEAT_ONLY = frozenset({
    "get_file", "list_join", "str_replace", "str_replace_strict", "str_replace_vstrict",
    "repeat", "digest", "resource_facade", "str_split", "map_merge", "map_replace", "yaql",
    "equals", "if", "not", "and", "or", "filter", "make_url", "contains", "list_concat",
    "list_concat_unique"})


def refuse_unknown_call(where: str, value: object) -> None:
    """Raise TemplateError if ``value`` calls a function this language lacks,
    or a ``get_param`` substitution left (so not declared: with none
    declared, substitution does not run)."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "get_param":
            name = arg[0] if isinstance(arg, list) and arg else arg
            raise TemplateError(f"{where}: get_param names undeclared parameter {name!r}")
        if isinstance(key, str) and key not in FUNCTIONS and (
                key in HEAT_ONLY or key.startswith("get_")):
            raise TemplateError(f"{where}: unknown function {key!r} (a template may call "
                                "get_param, get_resource and get_attr)")


def refuse_unknown_calls(where: str, value: object) -> None:
    """``refuse_unknown_call`` on ``value`` and everything inside it."""
    refuse_unknown_call(where, value)
    children = value.values() if isinstance(value, dict) else \
        value if isinstance(value, list) else ()
    for child in children:
        refuse_unknown_calls(where, child)


def call_of(value: object) -> tuple[str, object] | None:
    """(function name, argument) if ``value`` is an intrinsic function call."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key in FUNCTIONS:
            return key, arg
    return None


def parse_call(where: str, fn: str, arg: object) -> GetResource | GetAttr:
    if fn == GET_RESOURCE:
        if not isinstance(arg, str):
            raise TemplateError(f"{where}: get_resource takes a resource name, got {arg!r}")
        return GetResource(arg)
    if (
        not isinstance(arg, list)
        or len(arg) < 2
        or not all(isinstance(a, str) for a in arg[:2])
        or not all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in arg[2:])
    ):
        raise TemplateError(
            f"{where}: get_attr takes [RESOURCE, ATTRIBUTE, key or index...], got {arg!r}"
        )
    return GetAttr(arg[0], arg[1], tuple(arg[2:]))


def references(where: str, value: object) -> Iterable[GetResource | GetAttr]:
    """Every function call inside ``value`` (nested lists and maps included)."""
    call = call_of(value)
    if call is not None:
        yield parse_call(where, *call)
    elif isinstance(value, dict):
        for v in value.values():
            yield from references(where, v)
    elif isinstance(value, list):
        for v in value:
            yield from references(where, v)

