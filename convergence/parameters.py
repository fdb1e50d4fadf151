"""Template parameters (Heat's ``parameters:`` section and ``get_param``).

A template declares its parameters::

    parameters:
      size: {type: number, default: 1, constraints: [{range: {min: 1, max: 100}}]}
      proto: {type: string, constraints: [{allowed_values: [NFS, CIFS]}]}
      secret: {type: string, hidden: true}

and uses them where a property or output value goes: ``{get_param: size}``
or, for a ``comma_delimited_list`` or ``json`` parameter, ``{get_param:
[name, index or key, ...]}``. Parameters are substituted when the template
is parsed (:func:`substitute`), so the engine's nodes only ever see plain
values; the stored template keeps the declarations and the values given
(``parameter_values``), so an update without ``-P`` can keep them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

STRING = "string"
NUMBER = "number"
BOOLEAN = "boolean"
LIST = "comma_delimited_list"
JSON = "json"
TYPES = (STRING, NUMBER, BOOLEAN, LIST, JSON)
KEYS = frozenset({"type", "default", "description", "hidden", "constraints", "label"})
CONSTRAINTS = frozenset({"range", "length", "allowed_values", "allowed_pattern"})
GET_PARAM = "get_param"
MASK = "******"


class ParameterError(ValueError):
    """A declaration or a value is invalid; the message names the parameter."""


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    default: object = None
    has_default: bool = False
    description: str | None = None
    hidden: bool = False
    constraints: tuple[Mapping[str, object], ...] = ()

    def coerce(self, value: object) -> object:
        """``value`` (a -P string or a YAML value) as this parameter's type,
        checked against its constraints; ParameterError naming it if not."""
        where = f"parameter {self.name!r}"
        out: object
        if self.type == STRING:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ParameterError(f"{where}: must be a string, got {value!r}")
            out = str(value)
        elif self.type == NUMBER:
            out = _number(where, value)
        elif self.type == BOOLEAN:
            out = _boolean(where, value)
        elif self.type == LIST:
            if isinstance(value, str):
                out = [v.strip() for v in value.split(",")] if value else []
            elif isinstance(value, list):
                out = [str(v) for v in value]
            else:
                raise ParameterError(f"{where}: must be a comma-separated list, got {value!r}")
        else:  # JSON
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise ParameterError(f"{where}: not valid JSON: {exc}")
            if not isinstance(value, (dict, list)):
                raise ParameterError(f"{where}: must be a JSON map or list, got {value!r}")
            out = value
        for c in self.constraints:
            _check_constraint(where, c, out)
        return out


def _number(where: str, value: object) -> int | float:
    if isinstance(value, bool):
        raise ParameterError(f"{where}: must be a number, got {value!r}")
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    raise ParameterError(f"{where}: must be a number, got {value!r}")


def _boolean(where: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "t", "yes", "y", "on", "1"):
        return True
    if text in ("false", "f", "no", "n", "off", "0"):
        return False
    raise ParameterError(f"{where}: must be a boolean (true or false), got {value!r}")


def _check_constraint(where: str, c: Mapping[str, object], value: object) -> None:
    (kind, arg), = c.items()
    if kind == "range":
        assert isinstance(arg, dict)
        lo, hi = arg.get("min"), arg.get("max")
        if not isinstance(value, (int, float)):
            return
        if lo is not None and value < lo:
            raise ParameterError(f"{where}: must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise ParameterError(f"{where}: must be at most {hi}, got {value}")
    elif kind == "length":
        assert isinstance(arg, dict)
        lo, hi = arg.get("min"), arg.get("max")
        size = len(value) if isinstance(value, (str, list, dict)) else 0
        if lo is not None and size < lo:
            raise ParameterError(f"{where}: length must be at least {lo}, got {size}")
        if hi is not None and size > hi:
            raise ParameterError(f"{where}: length must be at most {hi}, got {size}")
    elif kind == "allowed_values":
        assert isinstance(arg, list)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item not in arg and str(item) not in [str(a) for a in arg]:
                raise ParameterError(f"{where}: must be one of "
                                     f"{', '.join(map(str, arg))}, got {item!r}")
    elif kind == "allowed_pattern":
        assert isinstance(arg, str)
        if isinstance(value, str) and not re.fullmatch(arg, value):
            raise ParameterError(f"{where}: must match the pattern {arg!r}, got {value!r}")


def declare(raw: object) -> dict[str, Parameter]:
    """The template's ``parameters:`` section, checked."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ParameterError("'parameters' must be a mapping of parameter names")
    out = {}
    for name, spec in raw.items():
        where = f"parameter {name!r}"
        if not isinstance(name, str) or not name:
            raise ParameterError(f"{where}: a parameter name must be a non-empty string")
        if not isinstance(spec, dict):
            raise ParameterError(f"{where}: must be a mapping with a 'type'")
        unknown = sorted(set(map(str, spec)) - KEYS)
        if unknown:
            raise ParameterError(f"{where}: unknown key {unknown[0]!r}")
        type_ = spec.get("type")
        if type_ not in TYPES:
            raise ParameterError(f"{where}: type must be one of {', '.join(TYPES)}, "
                                 f"got {type_!r}")
        constraints = spec.get("constraints") or []
        if not isinstance(constraints, list):
            raise ParameterError(f"{where}: 'constraints' must be a list")
        checked = []
        for c in constraints:
            _check_declared_constraint(where, c)
            checked.append({k: v for k, v in c.items() if k in CONSTRAINTS})
        hidden = spec.get("hidden", False)
        if not isinstance(hidden, bool):
            raise ParameterError(f"{where}: 'hidden' must be true or false")
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            raise ParameterError(f"{where}: 'description' must be a string")
        p = Parameter(name, str(type_), spec.get("default"), "default" in spec, description,
                      hidden, tuple(checked))
        if p.has_default and p.default is not None:
            p.coerce(p.default)  # a default that breaks its own constraints
        out[name] = p
    return out


def _check_declared_constraint(where: str, c: object) -> None:
    if not isinstance(c, dict):
        raise ParameterError(f"{where}: each constraint must be a mapping")
    kinds = [k for k in c if k in CONSTRAINTS]
    extra = set(c) - CONSTRAINTS - {"description"}
    if len(kinds) != 1 or extra:
        raise ParameterError(f"{where}: a constraint is one of "
                             f"{', '.join(sorted(CONSTRAINTS))}, got {c!r}")
    kind, arg = kinds[0], c[kinds[0]]
    if kind in ("range", "length"):
        if not isinstance(arg, dict) or not arg or set(arg) - {"min", "max"} or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in arg.values()):
            raise ParameterError(f"{where}: {kind} takes {{min: N, max: N}}, got {arg!r}")
    elif kind == "allowed_values":
        if not isinstance(arg, list) or not arg:
            raise ParameterError(f"{where}: allowed_values takes a non-empty list")
    else:
        try:
            re.compile(str(arg))
        except re.error as exc:
            raise ParameterError(f"{where}: allowed_pattern is not a valid pattern: {exc}")
        if not isinstance(arg, str):
            raise ParameterError(f"{where}: allowed_pattern takes a string")


def values(params: Mapping[str, Parameter], given: Mapping[str, object]) -> dict[str, object]:
    """Every parameter's value: the given one, else its default. A given
    name the template does not declare, or a parameter with neither, is
    refused naming it."""
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise ParameterError(f"parameter {unknown[0]!r} is not declared by the template "
                             f"(declared: {', '.join(sorted(params)) or 'none'})")
    out: dict[str, object] = {}
    for name, p in params.items():
        if name in given:
            out[name] = p.coerce(given[name])
        elif p.has_default:
            out[name] = None if p.default is None else p.coerce(p.default)
        else:
            raise ParameterError(f"parameter {name!r}: no value given and no default "
                                 f"(use -P {name}=VALUE)")
    return out


def substitute(where: str, value: object, resolved: Mapping[str, object]) -> object:
    """``value`` with every ``get_param`` replaced by the parameter's value."""
    if isinstance(value, dict) and len(value) == 1 and GET_PARAM in value:
        arg = value[GET_PARAM]
        path: list[object] = list(arg) if isinstance(arg, list) else [arg]
        if not path or not isinstance(path[0], str):
            raise ParameterError(f"{where}: get_param takes NAME or [NAME, key or index...], "
                                 f"got {arg!r}")
        name = path[0]
        if name not in resolved:
            raise ParameterError(f"{where}: get_param names undeclared parameter {name!r}")
        out = resolved[name]
        for step in path[1:]:
            try:
                out = out[step]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                raise ParameterError(f"{where}: get_param: parameter {name!r} has no "
                                     f"element {step!r}")
        return out
    if isinstance(value, dict):
        return {k: substitute(where, v, resolved) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(where, v, resolved) for v in value]
    return value


def shown(params: Mapping[str, Parameter], resolved: Mapping[str, object]
          ) -> dict[str, object]:
    """What ``stack show`` lists: each value, hidden ones masked."""
    return {n: MASK if params[n].hidden else resolved.get(n) for n in params}


@dataclass(frozen=True)
class Environment:
    """An environment file's values: ``defaults`` (``parameter_defaults``:
    for the parameters a template declares, others ignored, as in Heat,
    so one file serves several templates) and ``parameters`` (refused
    where the template does not declare them)."""

    defaults: dict[str, object]
    parameters: dict[str, object]


def read_environment(text: str | bytes) -> Environment:
    """An environment file (``parameter_defaults`` and ``parameters``, both
    maps of name: value)."""
    from sharemgr.convergence import template_yaml
    from sharemgr.convergence.resource_types import TemplateError

    try:  # as a template is read: one line naming where, duplicate keys refused
        data = template_yaml.load(text)
    except TemplateError as exc:
        raise ParameterError(str(exc))
    if data is None:
        return Environment({}, {})
    if not isinstance(data, dict):
        raise ParameterError("an environment must be a mapping with 'parameters' and/or "
                             "'parameter_defaults'")
    unknown = sorted(set(map(str, data)) - {"parameters", "parameter_defaults"})
    if unknown:
        raise ParameterError(f"unknown environment section {unknown[0]!r} "
                             "(allowed: parameter_defaults, parameters)")
    out: list[dict[str, object]] = []
    for section in ("parameter_defaults", "parameters"):
        part = data.get(section) or {}
        if not isinstance(part, dict):
            raise ParameterError(f"environment {section!r} must be a mapping")
        out.append({str(k): v for k, v in part.items()})
    return Environment(*out)


def given_values(environments: list[Environment], declared: Collection[str] | None
                 ) -> dict[str, object]:
    """The values the environments give a template declaring ``declared``
    (None: not known, every default kept): every file's defaults of a
    declared parameter, then every file's parameters (a later file wins in
    each; a parameter beats any default)."""
    out: dict[str, object] = {}
    for env in environments:
        out.update({k: v for k, v in env.defaults.items()
                    if declared is None or k in declared})
    for env in environments:
        out.update(env.parameters)
    return out


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``-P name=value`` options (the last of one name wins)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ParameterError(f"-P {item!r}: expected NAME=VALUE")
        out[name] = value
    return out
