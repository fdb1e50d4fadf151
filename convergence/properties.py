"""What a template's properties become: plain values, resolved from the data
of the resources they reference (``get_resource``, ``get_attr``) as a stack
node passes it on to its successors; and, between two sets of them, what an
update changes in place and what needs a new physical resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence.intrinsics import GetAttr, GetResource, call_of, parse_call
from sharemgr.convergence.resource_types import (
    IN_PLACE,
    REPLACE,
    RESOURCE_TYPES,
    ResolutionError,
    TemplateError,
    check_value,
)
from sharemgr.convergence.template import ResourceDefinition, Template


@dataclass(frozen=True)
class ResourceData:
    """What a resource tells the resources that reference it (this is what
    travels in SyncPoint input data): ``physical_id`` for get_resource and
    ``attributes`` for get_attr."""

    name: str
    resource_id: int | None = None  # the stack_resources row (maybe a replacement)
    physical_id: str | None = None
    attributes: Mapping[str, object] = field(default_factory=dict)

    def passed_on(self, template: Template | None) -> dict[str, JSONValue]:
        """:meth:`to_dict` with only the attributes ``template`` reads of
        this resource (:attr:`Template.referenced_attributes`); all of them
        without a template."""
        if template is None:
            return self.to_dict()
        wanted = template.referenced_attributes.get(self.name, frozenset())
        return {**self.to_dict(), "attributes": {k: v for k, v in self._json().items()
                                                 if k in wanted}}

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "name": self.name,
            "resource_id": self.resource_id,
            "physical_id": self.physical_id,
            "attributes": self._json(),
        }

    def _json(self) -> dict[str, JSONValue]:
        # What a row's columns hold (kinds.observe): JSON already.
        return cast("dict[str, JSONValue]", dict(self.attributes))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResourceData:
        # Not checked: what to_dict wrote, read back from a SyncPoint.
        return cls(
            name=data["name"],
            resource_id=data.get("resource_id"),
            physical_id=data.get("physical_id"),
            attributes=data.get("attributes") or {},
        )


def data_by_name(input_data: Mapping[str, object]) -> dict[str, ResourceData]:
    """SyncPoint input data ({sender key: ResourceData dict or None}) keyed
    by resource name, ready for :func:`resolve_properties`. Senders without
    data (clean-up nodes) are skipped."""
    out = {}
    for value in input_data.values():
        if isinstance(value, Mapping) and "name" in value:
            rd = ResourceData.from_dict(value)
            out[rd.name] = rd
    return out


def _resolve(where: str, value: object, resources: Mapping[str, ResourceData]) -> object:
    call = call_of(value)
    if call is not None:
        ref = parse_call(where, *call)
        rd = resources.get(ref.name)
        if rd is None:
            raise ResolutionError(f"{where}: no data for resource {ref.name!r}")
        if isinstance(ref, GetResource) or ref.attribute == "id":
            if rd.physical_id is None:
                raise ResolutionError(f"{where}: resource {ref.name!r} has no physical id yet")
            # Indexed by the path's steps whatever it is: a TypeError is the
            # ResolutionError below.
            result: Any = rd.physical_id
        elif ref.attribute in rd.attributes:
            result = rd.attributes[ref.attribute]
        else:
            raise ResolutionError(
                f"{where}: resource {ref.name!r} has no value for attribute {ref.attribute!r}"
            )
        for step in ref.path if isinstance(ref, GetAttr) else ():
            try:
                result = result[step]
            except (KeyError, IndexError, TypeError):
                raise ResolutionError(
                    f"{where}: get_attr path {step!r} not found in {ref.name}."
                    f"{getattr(ref, 'attribute', '')}"
                )
        return result
    if isinstance(value, dict):
        return {k: _resolve(where, v, resources) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(where, v, resources) for v in value]
    return value


def resolve_properties(
    defn: ResourceDefinition, resources: Mapping[str, ResourceData]
) -> dict[str, Any]:
    """The definition's properties as plain values: get_resource becomes the
    referenced physical id, get_attr the attribute's value. Values are
    checked against the schema again (a get_attr may yield anything) and
    strings with a fixed set of values take the listed spelling (``nfs`` ->
    ``NFS``), so comparing with stored properties is exact. Each value has
    its schema's type, which the plans rely on. A literal scalar is taken as
    written: ``template.validate`` checked it, and every template a
    traversal reads went through it."""
    out: dict[str, Any] = {}
    schema = RESOURCE_TYPES[defn.type]
    for prop, value in defn.properties.items():
        if value is None:
            continue
        ps = schema.properties[prop]
        if isinstance(value, (dict, list)):  # may hold a call: resolved, checked again
            where = f"resource {defn.name!r} property {prop!r}"
            resolved = _resolve(where, value, resources)
            try:
                check_value(where, ps, resolved)
            except TemplateError as exc:
                raise ResolutionError(str(exc))
        else:  # a literal, checked when the template was validated
            resolved = value
        # A schema with allowed values is a string's: check_value made it one.
        if ps.allowed is not None and isinstance(resolved, str):
            resolved = next(a for a in ps.allowed if a.upper() == resolved.upper())
        out[prop] = resolved
    return out


def resolve_outputs(template: Template, resources: Mapping[str, ResourceData]
                    ) -> dict[str, object]:
    """Output values; an output that cannot be resolved yet (its resource is
    missing or failed) maps to None rather than failing the whole lot."""
    out = {}
    for name, value in template.outputs.items():
        try:
            out[name] = _resolve(f"output {name!r}", value, resources)
        except ResolutionError:
            out[name] = None
    return out


@dataclass(frozen=True)
class PropertyDiff:
    """How to go from the properties a physical resource has to new ones."""

    changed: frozenset[str]  # every property whose value differs
    in_place: Mapping[str, Any]  # changes applied to the existing resource
    replace: bool  # True: some change needs a new physical resource

    @property
    def unchanged(self) -> bool:
        return not self.changed


def diff_properties(
    type_: str, old: Mapping[str, object], new: Mapping[str, Any]
) -> PropertyDiff:
    """Compare resolved properties (``old`` as stored on the resource row,
    ``new`` from :func:`resolve_properties`). A property left out counts as
    None, so removing one is a change too."""
    schema = RESOURCE_TYPES[type_]
    changed = frozenset(
        p for p in set(old) | set(new) if old.get(p) != new.get(p) and p in schema.properties
    )
    replace = any(schema.properties[p].update == REPLACE for p in changed)
    in_place = {p: new.get(p) for p in changed if schema.properties[p].update == IN_PLACE}
    return PropertyDiff(changed=changed, in_place=in_place, replace=replace)
