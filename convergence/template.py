"""Stack templates: parse, validate, resolve (doc/convergence.rst, "Templates").

A template is YAML::

    resources:
      data:
        type: share
        properties: {size: 10, proto: NFS, backend: dummy}
      snap:
        type: snapshot
        properties: {share: {get_resource: data}}
        depends_on: [other]
    outputs:
      export: {get_attr: [data, export_locations]}

Everything is checked by :func:`parse` / :meth:`Template.from_dict` before a
caller writes anything; every problem raises one :class:`TemplateError` whose
message names the resource (and the property). The resource types, their
properties, how a change to each property is applied and the attributes
``get_attr`` may read are data (:data:`RESOURCE_TYPES`), not code.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import yaml
from sharemgr.common import vocab
from sharemgr.convergence import groups as grp
from sharemgr.convergence.keys import first_unknown


class TemplateError(ValueError):
    """The template is invalid; the message names the resource and property."""


class ResolutionError(TemplateError):
    """A property or output cannot be resolved from the data of the resources
    it references (missing data, or a value of the wrong type at run time)."""


# ---------------------------------------------------------------------------
# The resource type table.

IN_PLACE = "in_place"  # a change is applied to the existing physical resource
REPLACE = "replace"  # a change needs a new physical resource

STRING = "string"
INTEGER = "integer"
REF = "ref"  # the physical id of another resource (get_resource) or a literal id
ACCESS_RULES = "access_rules"  # a list of {access_type, access_to, access_level}



@dataclass(frozen=True)
class PropertySchema:
    type: str
    required: bool = False
    update: str = REPLACE
    allowed: tuple[str, ...] | None = None  # strings: case-insensitive, stored as listed
    minimum: int | None = None  # integers
    maximum: int | None = None  # integers
    max_length: int = 255  # strings: what their columns hold
    ref_types: tuple[str, ...] = ()  # REF: which resource types it may name


@dataclass(frozen=True)
class ResourceType:
    name: str
    properties: Mapping[str, PropertySchema]
    attributes: frozenset[str]


# A physical name is '<stack>-<resource>-<name property>' and must fit the
# 255 characters of a share's name: 60 + 1 + 128 + 1 + 64 = 254.
STACK_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,59}$")
NAME_PROPERTY_MAX = 64


def check_stack_name(name: str) -> None:
    """Raise TemplateError unless ``name`` can name a stack."""
    if not STACK_NAME_RE.match(name):
        raise TemplateError(f"stack name {name!r} is invalid: use letters, digits, '_', "
                            "'-', '.' (at most 60, starting with a letter)")


_p = PropertySchema  # short, for the table below


# Only share ``size`` (extend/shrink), ``access_rules`` and ``name`` change
# in place; any other
# change means a new physical resource and the clean-up of the old one.
RESOURCE_TYPES: Mapping[str, ResourceType] = {
    rt.name: rt
    for rt in (
        ResourceType(
            "share",
            {
                "size": _p(INTEGER, required=True, minimum=1, maximum=vocab.MAX_SHARE_SIZE_GB,
                           update=IN_PLACE),
                "proto": _p(STRING, required=True, allowed=vocab.PROTOCOLS),
                "name": _p(STRING, update=IN_PLACE, max_length=NAME_PROPERTY_MAX),
                "backend": _p(STRING),
                "snapshot": _p(REF, ref_types=("snapshot",)),
                "share_server": _p(REF, ref_types=("share_server",)),
                "share_group": _p(REF, ref_types=("share_group",)),
                "access_rules": _p(ACCESS_RULES, update=IN_PLACE),
            },
            frozenset({"id", "name", "size", "proto", "status", "host", "export_locations"}),
        ),
        ResourceType(
            "snapshot",
            {
                "share": _p(REF, required=True, ref_types=("share",)),
                "name": _p(STRING, update=IN_PLACE, max_length=NAME_PROPERTY_MAX),
            },
            frozenset({"id", "name", "size", "status", "share_id"}),
        ),
        ResourceType(
            "replica",
            {"share": _p(REF, required=True, ref_types=("share",))},
            frozenset(
                {"id", "status", "host", "replica_state", "export_locations", "share_id"}
            ),
        ),
        ResourceType(
            "share_server",
            {"backend": _p(STRING)},
            frozenset({"id", "status", "host", "backend_details"}),
        ),
        ResourceType(
            "share_group",
            {"name": _p(STRING, update=IN_PLACE, max_length=NAME_PROPERTY_MAX),
             "backend": _p(STRING)},
            frozenset({"id", "name", "status", "host"}),
        ),
        ResourceType(
            "group_snapshot",
            {
                "share_group": _p(REF, required=True, ref_types=("share_group",)),
                "name": _p(STRING, update=IN_PLACE, max_length=NAME_PROPERTY_MAX),
            },
            frozenset({"id", "name", "status", "share_group_id"}),
        ),
    )
}

TOP_LEVEL_KEYS = frozenset({"resources", "outputs", "description", "heat_template_version",
                            "timeout", "converge_interval", "parameters",
                            # Stored form only: the values the stack was given (-P, -e).
                            "parameter_values"})
MAX_CONVERGE_INTERVAL = 604800  # a week, in seconds
MAX_TIMEOUT_MINUTES = 525600  # a year: the same bound as the stack_timeout_minutes option
RESOURCE_KEYS = frozenset({"type", "properties", "depends_on", "description",
                           "deletion_policy"})
# Heat's deletion policies, any case (doc/convergence.rst, "Keeping what matters").
DELETE_POLICY = "delete"
RETAIN_POLICY = "retain"
DELETION_POLICIES = (DELETE_POLICY, RETAIN_POLICY)
GET_RESOURCE = "get_resource"
GET_ATTR = "get_attr"
FUNCTIONS = frozenset({GET_RESOURCE, GET_ATTR})
# Resource names end up in physical names and dummy-driver gate file names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


# ---------------------------------------------------------------------------
# Intrinsic functions.


@dataclass(frozen=True)
class GetResource:
    name: str


@dataclass(frozen=True)
class GetAttr:
    name: str
    attribute: str
    path: tuple[str | int, ...] = ()


def _function(value: object) -> tuple[str, object] | None:
    """(function name, argument) if ``value`` is an intrinsic function call."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key in FUNCTIONS:
            return key, arg
    return None


def _parse_function(where: str, fn: str, arg: object) -> GetResource | GetAttr:
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


def _references(where: str, value: object) -> Iterable[GetResource | GetAttr]:
    """Every function call inside ``value`` (nested lists and maps included)."""
    call = _function(value)
    if call is not None:
        yield _parse_function(where, *call)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _references(where, v)
    elif isinstance(value, list):
        for v in value:
            yield from _references(where, v)


# ---------------------------------------------------------------------------
# Parsed template.


@dataclass(frozen=True)
class ResourceDefinition:
    name: str
    type: str
    properties: Mapping[str, object]  # as written: may hold get_resource/get_attr
    depends_on: tuple[str, ...] = ()
    requires: frozenset[str] = frozenset()  # depends_on + every referenced resource
    # deletion_policy: retain: its physical resource outlives the stack's use of it.
    retain: bool = False

    @property
    def schema(self) -> ResourceType:
        return RESOURCE_TYPES[self.type]


@dataclass(frozen=True)
class Template:
    """A validated template. ``resources`` keeps the template's order."""

    resources: Mapping[str, ResourceDefinition]
    outputs: Mapping[str, object] = field(default_factory=dict)
    description: str | None = None
    timeout: float | None = None  # minutes, as Heat's timeout_mins; 0: none
    # Seconds between self-healing checks of the stack (daemon/heal.py); None: never.
    converge_interval: int | None = None
    # The ``parameters:`` section as written, and the values given for it
    # (-P, -e); ``get_param`` is already substituted in resources and outputs.
    parameter_declarations: Mapping[str, object] = field(default_factory=dict)
    parameter_values: Mapping[str, object] = field(default_factory=dict)
    # The resource groups as written; their members are in ``resources``
    # (convergence/groups.py).
    groups: Mapping[str, grp.GroupDefinition] = field(default_factory=dict)

    @functools.cached_property
    def members(self) -> Mapping[str, tuple[str, int]]:
        """Per member resource, its (group, index)."""
        return {m: (g.name, i) for g in self.groups.values() for i, m in enumerate(g.members)}

    @functools.cached_property
    def parameters(self) -> Mapping[str, object]:
        """Every parameter's value (given, else default), for ``stack show``
        (hidden ones masked)."""
        from sharemgr.convergence import parameters as params

        declared = params.declare(dict(self.parameter_declarations))
        return params.shown(declared, params.values(declared, self.parameter_values))

    @functools.cached_property
    def referenced_attributes(self) -> Mapping[str, frozenset[str]]:
        """Per resource, the attributes other resources' properties read
        with ``get_attr``: all that its SyncPoint data must carry to its
        successors (a resource nobody reads an attribute of passes on its
        ids alone, so a wide fan-in's point does not grow with every
        predecessor's attributes)."""
        wanted: dict[str, set[str]] = {}
        for d in self.resources.values():
            for ref in _references(d.name, dict(d.properties)):
                if isinstance(ref, GetAttr):
                    wanted.setdefault(ref.name, set()).add(ref.attribute)
        return {name: frozenset(attrs) for name, attrs in wanted.items()}

    @functools.cached_property
    def output_resources(self) -> frozenset[str]:
        """The resources the outputs read (``get_resource`` or ``get_attr``)."""
        return frozenset(ref.name for name, value in self.outputs.items()
                         for ref in _references(f"output {name!r}", value))

    @classmethod
    def empty(cls) -> Template:
        """The template a stack delete converges to."""
        return cls(resources={})

    @classmethod
    def from_dict(cls, data: object) -> Template:
        return _validate(data)

    def to_dict(self) -> dict[str, object]:
        """The JSON-able form stored in ``stack_templates`` (``from_dict`` reads it)."""
        resources: dict[str, dict[str, object]] = {}
        out: dict[str, object] = {"resources": resources}
        for d in self.resources.values():
            if d.name in self.members:  # stored as its group, in the first member's place
                group = self.members[d.name][0]
                resources.setdefault(group, self.groups[group].to_dict())
                continue
            r: dict[str, object] = {"type": d.type, "properties": dict(d.properties)}
            if d.depends_on:
                r["depends_on"] = list(d.depends_on)
            if d.retain:
                r["deletion_policy"] = RETAIN_POLICY
            resources[d.name] = r
        for g in self.groups.values():  # those of no member (count 0)
            resources.setdefault(g.name, g.to_dict())
        if self.outputs:
            out["outputs"] = dict(self.outputs)
        if self.description is not None:
            out["description"] = self.description
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.converge_interval is not None:
            out["converge_interval"] = self.converge_interval
        if self.parameter_declarations:
            out["parameters"] = dict(self.parameter_declarations)
            out["parameter_values"] = dict(self.parameter_values)
        return out

    def dependencies(self) -> dict[str, frozenset[str]]:
        """name -> names it requires (must exist before it)."""
        return {n: d.requires for n, d in self.resources.items()}

    def dependency_order(self) -> list[str]:
        """Names, each after everything it requires (template order breaks ties)."""
        return _toposort(self.dependencies())


def parse(text: str | bytes, parameters: Mapping[str, object] | None = None) -> Template:
    """Parse and validate a YAML template, ``parameters`` (name: value, from
    -P and -e) substituted for its ``get_param`` calls. Raises
    :class:`TemplateError`."""
    try:
        try:
            data = yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 - SafeLoader's kind
        except yaml.YAMLError:
            data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise TemplateError(f"malformed YAML{where}: {exc.problem or exc}")
    except yaml.YAMLError as exc:
        raise TemplateError(f"malformed YAML: {exc}")
    return _validate(data, parameters)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML keeps the last one
    silently, which would make two resources of the same name one."""


class _FastStrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same on libyaml's parser, where PyYAML has it: the pure-Python
    one is eight times slower (a 1,000-resource template: 0.65 s of CPU
    against 0.08 s). A template it refuses is parsed again by
    ``_StrictLoader``, whose messages name the place of the error as users
    have seen it."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


for _loader in (_StrictLoader, _FastStrictLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _validate(data: object, given: Mapping[str, object] | None = None) -> Template:
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
    if declarations or given:
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

    outputs = {}
    for name, value in raw_outputs.items():
        # Heat's form {value: ..., description: ...} and the short form both work.
        if isinstance(value, dict) and "value" in value and set(value) <= {"value", "description"}:
            value = value["value"]
        for ref in _references(f"output {name!r}", value):
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

    _toposort({n: d.requires for n, d in resources.items()})  # raises on a cycle
    return Template(resources=resources, outputs=outputs, description=description,
                    timeout=timeout, converge_interval=interval,
                    parameter_declarations=declarations, parameter_values=dict(given),
                    groups=groups)


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
    from sharemgr.convergence import parameters as params

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


def _validate_resource(name: str, raw: dict, all_raw: Mapping[str, Mapping[str, object]],
                       where: str | None = None) -> ResourceDefinition:
    where = where or f"resource {name!r}"
    type_ = raw["type"]
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
        call = _function(value)
        if call is None:
            _check_value(pwhere, ps, value)
            continue
        ref = _parse_function(pwhere, *call)
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
        for ref in _references(f"resource {d.name!r}", dict(d.properties)):
            parent = resources.get(ref.name)
            if parent is not None and not parent.retain:
                raise TemplateError(
                    f"resource {d.name!r} has deletion_policy retain but {ref.name!r}, "
                    f"which it references, does not: deleting {ref.name!r} would fail "
                    f"while {d.name!r} is kept")


def _check_value(where: str, ps: PropertySchema, value: object) -> None:
    """Type and range of a literal value (also used on resolved values)."""
    if ps.type == INTEGER:
        # bool is an int in Python; "size: true" is still a mistake.
        if not isinstance(value, int) or isinstance(value, bool):
            raise TemplateError(f"{where}: must be an integer, got {value!r}")
        if ps.minimum is not None and value < ps.minimum:
            raise TemplateError(f"{where}: must be at least {ps.minimum}, got {value}")
        if ps.maximum is not None and value > ps.maximum:
            raise TemplateError(f"{where}: must be at most {ps.maximum}, got {value}")
    elif ps.type == ACCESS_RULES:
        # Imported here: it needs the database modules, which checking a
        # template on the command line does not.
        from sharemgr.manager import access

        try:
            access.check_list(value)
        except access.Refused as exc:
            raise TemplateError(f"{where}: {exc}")
    else:  # STRING and REF (a literal physical id)
        if not isinstance(value, str) or not value:
            raise TemplateError(f"{where}: must be a non-empty string, got {value!r}")
        if len(value) > ps.max_length:
            raise TemplateError(f"{where}: at most {ps.max_length} characters, got "
                                f"{len(value)}")
        if ps.allowed is not None and value.upper() not in {a.upper() for a in ps.allowed}:
            raise TemplateError(
                f"{where}: must be one of {', '.join(ps.allowed)}, got {value!r}"
            )


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


def _toposort(requires: Mapping[str, Iterable[str]]) -> list[str]:
    """Kahn's algorithm, O(n + e). On a cycle, name the resources in it."""
    indegree = {n: 0 for n in requires}
    dependants: dict[str, list[str]] = {n: [] for n in requires}
    for n, reqs in requires.items():
        for r in reqs:
            indegree[n] += 1
            dependants[r].append(n)
    ready = [n for n in requires if indegree[n] == 0]
    ready.reverse()  # pop() from the end keeps the template's order
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for d in reversed(dependants[n]):
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
    if len(order) != len(requires):
        cycle = _find_cycle(requires, indegree)
        raise TemplateError(
            f"resource {cycle[0]!r}: dependency cycle: "
            + " requires ".join(repr(n) for n in cycle)
        )
    return order


def _find_cycle(requires: Mapping[str, Iterable[str]], indegree: Mapping[str, int]) -> list[str]:
    """One cycle among the nodes Kahn's algorithm could not order: every such
    node has a requirement that is also unordered, so walking requirements
    must come back to a node already on the path."""
    left = {n for n, d in indegree.items() if d > 0}
    start = min(left)
    path, index = [start], {start: 0}
    while True:
        nxt = min(r for r in requires[path[-1]] if r in left)
        if nxt in index:
            return path[index[nxt]:] + [nxt]  # each element requires the next
        index[nxt] = len(path)
        path.append(nxt)


def physical_name(stack_name: str, resource_name: str, suffix: str | None = None) -> str:
    """``<stack>-<resource>-<short random suffix>``, as Heat names physical
    resources, so an object on the backend tells which stack made it."""
    return f"{stack_name}-{resource_name}-{suffix or secrets.token_hex(4)}"
