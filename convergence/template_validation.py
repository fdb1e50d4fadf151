"""Checking a template's data before a caller writes anything: every
problem raises one :class:`TemplateError` whose message names the resource
(and the property); what passes becomes a :class:`Template`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.convergence import groups as grp
from sharemgr.convergence import parameters as params
from sharemgr.convergence.dependency_order import toposort
from sharemgr.convergence.intrinsics import (
    GET_RESOURCE,
    GetAttr,
    GetResource,
    call_of,
    parse_call,
    references,
    refuse_unknown_call,
    refuse_unknown_calls,
)
from sharemgr.convergence.keys import first_unknown
from sharemgr.convergence.resource_types import (
    DELETE_POLICY,
    DELETION_POLICIES,
    MAX_CONVERGE_INTERVAL,
    MAX_TIMEOUT_MINUTES,
    NAME_RE,
    REF,
    RESOURCE_KEYS,
    RESOURCE_TYPES,
    RETAIN_POLICY,
    TOP_LEVEL_KEYS,
    TemplateError,
    check_value,
)
from sharemgr.convergence.template_model import ResourceDefinition, Template


def validate(data: object, given: Mapping[str, object] | None = None,
             stored: bool = False) -> Template:
    """The template ``data`` describes; ``stored``: as ``stack_templates``
    holds it, whose outputs a release before their check may have stored
    with a function this language lacks (shown as written, as then)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TemplateError("a template must be a mapping with a 'resources' section")
    if (bad := first_unknown(data, TOP_LEVEL_KEYS)) is not None:
        raise TemplateError(
            f"unknown top-level section {bad!r} "
            f"(allowed: {', '.join(sorted(TOP_LEVEL_KEYS - {'parameter_values'}))})"
        )
    declarations, given = _parameters(data, given)
    if declarations or given:  # else a get_param left is refused as undeclared
        data = _substituted(data, declarations, given)
    raw_resources = data.get("resources") or {}
    if not isinstance(raw_resources, dict):
        raise TemplateError("'resources' must be a mapping of resource names")
    for name in raw_resources:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise TemplateError(
                f"resource name {name!r} is invalid: use letters, digits, '_', '-', '.' "
                "(at most 128, starting with a letter or digit)"
            )
    raw_outputs = data.get("outputs") or {}
    if not isinstance(raw_outputs, dict):
        raise TemplateError("'outputs' must be a mapping of output names")
    try:
        raw_resources, raw_outputs, groups, members = grp.expand(
            raw_resources, raw_outputs, RESOURCE_TYPES,
            {n: t.attributes for n, t in RESOURCE_TYPES.items()}, NAME_RE)
    except grp.GroupError as exc:
        raise TemplateError(str(exc))
    # Shapes and types first, so a property may reference a resource that
    # comes later in the template and still be checked against its type.
    for name, raw in raw_resources.items():
        _check_shape(name, raw, _member_label(members, name))
    resources = {n: _validate_resource(n, r, raw_resources, _member_label(members, n))
                 for n, r in raw_resources.items()}
    _check_retained_parents(resources)
    resources = _snapshots_after_their_shares(resources)

    outputs = {}
    for name, value in raw_outputs.items():
        # Heat's form {value: ..., description: ...} and the short form both work.
        if isinstance(value, dict) and "value" in value and set(value) <= {"value", "description"}:
            value = value["value"]
        if not stored:
            refuse_unknown_calls(f"output {name!r}", value)
        for ref in references(f"output {name!r}", value):
            _check_reference(f"output {name!r}", ref, resources)
        outputs[str(name)] = value

    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise TemplateError("'description' must be a string")

    timeout = data.get("timeout")
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float))
                                or not 0 <= timeout <= MAX_TIMEOUT_MINUTES):
        raise TemplateError(f"'timeout' must be a number of minutes from 0 to "
                            f"{MAX_TIMEOUT_MINUTES}, got {timeout!r}")

    interval = data.get("converge_interval")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)
                                 or not 1 <= interval <= MAX_CONVERGE_INTERVAL):
        raise TemplateError(f"'converge_interval' must be a whole number of seconds from 1 "
                            f"to {MAX_CONVERGE_INTERVAL}, got {interval!r}")

    toposort({n: d.requires for n, d in resources.items()})  # raises on a cycle
    return Template(resources=resources, outputs=outputs, description=description,
                    timeout=timeout, converge_interval=interval,
                    parameter_declarations=declarations, parameter_values=dict(given),
                    groups=groups)


def _snapshots_after_their_shares(resources: dict[str, ResourceDefinition]
                                  ) -> dict[str, ResourceDefinition]:
    """A group snapshot of a group the template makes requires the
    template's shares of that group (Heat adds such implicit dependencies):
    it is taken of them, once they are made, and deleted before them (a
    share a group snapshot holds is not deleted)."""
    in_group: dict[str, set[str]] = {}
    for name, defn in resources.items():
        group = _resource_named(defn.properties.get("share_group"))
        if defn.type == vocab.SHARE and group is not None:
            in_group.setdefault(group, set()).add(name)
    for name, defn in list(resources.items()):
        group = _resource_named(defn.properties.get("share_group"))
        if defn.type == vocab.GROUP_SNAPSHOT and group in in_group:
            resources[name] = dataclasses.replace(
                defn, requires=defn.requires | frozenset(in_group[group]))
    return resources


def _resource_named(value: object) -> str | None:
    """The resource ``{get_resource: NAME}`` names; None for anything else."""
    call = call_of(value)
    return call[1] if call is not None and call[0] == GET_RESOURCE \
        and isinstance(call[1], str) else None


def _member_label(members: Mapping[str, tuple[str, int]], name: str) -> str | None:
    """How messages name a group's member: its group and index."""
    if name not in members:
        return None
    group, index = members[name]
    return f"group {group!r} member {index}"


def _parameters(data: Mapping[str, object], given: Mapping[str, object] | None
                ) -> tuple[dict[str, object], Mapping[str, object]]:
    """The declarations as written and the values given: ``given`` (-P,
    -e), else the stored form's ``parameter_values``."""
    raw = data.get("parameters")
    declarations = dict(raw) if isinstance(raw, dict) else {}
    if raw is not None and not isinstance(raw, dict):
        raise TemplateError("'parameters' must be a mapping of parameter names")
    if given is None:
        stored = data.get("parameter_values") or {}
        given = dict(stored) if isinstance(stored, dict) else {}
    return declarations, given


def _substituted(data: Mapping[str, object], declarations: Mapping[str, object],
                 given: Mapping[str, object]) -> dict[str, object]:
    """``data`` with every get_param replaced by its value: the engine's
    nodes see plain values only."""
    try:
        declared = params.declare(dict(declarations))
        resolved = params.values(declared, given)
        out = dict(data)
        raw_resources = data.get("resources")
        if isinstance(raw_resources, dict):
            out["resources"] = {
                name: params.substitute(f"resource {name!r}", r, resolved)
                for name, r in raw_resources.items()}
        raw_outputs = data.get("outputs")
        if isinstance(raw_outputs, dict):
            out["outputs"] = {name: params.substitute(f"output {name!r}", v, resolved)
                              for name, v in raw_outputs.items()}
        return out
    except params.ParameterError as exc:
        raise TemplateError(str(exc))


def _check_shape(name: str, raw: object, where: str | None = None) -> None:
    where = where or f"resource {name!r}"
    if not isinstance(raw, dict):
        raise TemplateError(f"{where}: must be a mapping with 'type' and 'properties'")
    if (bad := first_unknown(raw, RESOURCE_KEYS)) is not None:
        raise TemplateError(f"{where}: unknown key {bad!r}")
    type_ = raw.get("type")
    if not isinstance(type_, str) or type_ not in RESOURCE_TYPES:
        raise TemplateError(
            f"{where}: unknown type {type_!r} (known: {', '.join(sorted(RESOURCE_TYPES))})"
        )


def _validate_resource(name: str, raw: dict[str, object],
                       all_raw: Mapping[str, Mapping[str, object]],
                       where: str | None = None) -> ResourceDefinition:
    where = where or f"resource {name!r}"
    type_ = str(raw["type"])  # a known type's name: _check_shape checked it
    schema = RESOURCE_TYPES[type_]
    props = raw.get("properties") or {}
    if not isinstance(props, dict):
        raise TemplateError(f"{where}: 'properties' must be a mapping")

    requires: set[str] = set()
    for prop, value in props.items():
        pwhere = f"{where} property {prop!r}"
        if prop not in schema.properties:
            raise TemplateError(
                f"{pwhere}: unknown property of type {type_} "
                f"(known: {', '.join(sorted(schema.properties))})"
            )
        if value is None:
            continue  # an explicit null is the same as leaving it out
        ps = schema.properties[prop]
        call = call_of(value)
        if call is None:
            refuse_unknown_call(pwhere, value)
            check_value(pwhere, ps, value)
            continue
        ref = parse_call(pwhere, *call)
        _check_reference(pwhere, ref, all_raw)
        if ps.type == REF:
            if isinstance(ref, GetAttr) and (ref.attribute != "id" or ref.path):
                raise TemplateError(
                    f"{pwhere}: needs the id of a {'/'.join(ps.ref_types)} "
                    f"({{get_resource: NAME}}), not attribute {ref.attribute!r}"
                )
            target = all_raw[ref.name].get("type")
            if target not in ps.ref_types:
                raise TemplateError(
                    f"{pwhere}: must reference a {' or '.join(ps.ref_types)}, "
                    f"but {ref.name!r} is a {target}"
                )
        elif isinstance(ref, GetResource):
            raise TemplateError(f"{pwhere}: get_resource gives an id, but this is a {ps.type}")
        requires.add(ref.name)

    for prop, ps in schema.properties.items():
        if ps.required and props.get(prop) is None:
            raise TemplateError(f"{where}: missing required property {prop!r}")

    depends_on = raw.get("depends_on") or []
    if isinstance(depends_on, str):
        depends_on = [depends_on]
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise TemplateError(f"{where}: 'depends_on' must be a list of resource names")
    for dep in depends_on:
        if dep not in all_raw:
            raise TemplateError(f"{where}: depends_on names unknown resource {dep!r}")
        if dep == name:
            raise TemplateError(f"{where}: depends_on names the resource itself")
    requires.update(depends_on)
    return ResourceDefinition(
        name=name,
        type=type_,
        properties=dict(props),
        depends_on=tuple(depends_on),
        requires=frozenset(requires),
        retain=_deletion_policy(where, raw.get("deletion_policy")) == RETAIN_POLICY,
    )


def _deletion_policy(where: str, value: object) -> str:
    """Heat's ``Delete``/``Retain``, in any case; absent: delete."""
    if value is None:
        return DELETE_POLICY
    if not isinstance(value, str) or value.lower() not in DELETION_POLICIES:
        raise TemplateError(f"{where}: 'deletion_policy' must be Retain or Delete, got {value!r}")
    return value.lower()


def _check_retained_parents(resources: Mapping[str, ResourceDefinition]) -> None:
    """A retained resource may only reference retained resources: the
    snapshot kept while its share is deleted makes the share's delete fail
    (a share with snapshots, a group with shares cannot be deleted)."""
    for d in resources.values():
        if not d.retain:
            continue
        for ref in references(f"resource {d.name!r}", dict(d.properties)):
            parent = resources.get(ref.name)
            if parent is not None and not parent.retain:
                raise TemplateError(
                    f"resource {d.name!r} has deletion_policy retain but {ref.name!r}, "
                    f"which it references, does not: deleting {ref.name!r} would fail "
                    f"while {d.name!r} is kept")


def _check_reference(where: str, ref: GetResource | GetAttr,
                     resources: Mapping[str, ResourceDefinition | Mapping[str, object]]) -> None:
    if ref.name not in resources:
        raise TemplateError(f"{where}: references unknown resource {ref.name!r}")
    if isinstance(ref, GetAttr):
        target = resources[ref.name]
        # A raw resource's type is a known type's name: _check_shape saw to it.
        type_ = target.type if isinstance(target, ResourceDefinition) else str(target.get("type"))
        attrs = RESOURCE_TYPES[type_].attributes
        if ref.attribute not in attrs:
            raise TemplateError(
                f"{where}: resource {ref.name!r} ({type_}) has no attribute "
                f"{ref.attribute!r} (known: {', '.join(sorted(attrs))})"
            )


