"""Resource groups (Heat's ResourceGroup; doc/convergence.rst, "Resource
groups").

A group is written as a resource of type ``resource_group``::

    resources:
      shares:
        type: resource_group
        properties:
          count: 3
          resource_def:
            type: share
            properties: {size: 1, proto: NFS, name: "data-%index%"}

and is expanded when the template is parsed (:func:`expand`) into plain
member resources named ``GROUP.INDEX`` (``shares.0`` ... ``shares.2``),
``%index%`` in the member's properties replaced by its index. The engine,
the graph, ``decide``, settling, recovery and the preview see members only:
scaling up adds resources, scaling down removes the highest indexes, the
members left alone are unchanged resources. References to the group are
rewritten into references to its members (:func:`expand`): a group has no
physical resource, so no row, of its own.

The stored template (``Template.to_dict``) keeps the group as written
(:meth:`GroupDefinition.to_dict`) and the other resources' references in
their rewritten form (``{get_attr: [shares.1, id]}``), which parses to the
same expansion: a traversal resumed after a crash reads the same members.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sharemgr.convergence.keys import first_unknown

GROUP_TYPE = "resource_group"
GROUP_KEYS = frozenset({"type", "properties", "depends_on", "description"})
GROUP_PROPERTIES = frozenset({"count", "resource_def"})
# deletion_policy is passed on to each member as written: the member's own
# validation says whether it is known.
RESOURCE_DEF_KEYS = frozenset({"type", "properties", "deletion_policy"})
INDEX_VAR = "%index%"
# Heat's default max_resources_per_stack; also keeps a member's name short.
MAX_COUNT = 1000
MEMBER_ATTR = "resource."  # {get_attr: [GROUP, resource.N, ATTR]}: member N's
REFS = "refs"  # the members' physical ids, in index order
REFS_MAP = "refs_map"  # {"N": physical id}
_MEMBER_RE = re.compile(r"^(?P<group>.+)\.(?P<index>[0-9]+)$")


class GroupError(ValueError):
    """The group, or a reference to it, is invalid (template.py makes it a
    TemplateError)."""


def member_name(group: str, index: int) -> str:
    return f"{group}.{index}"


@dataclass(frozen=True)
class GroupDefinition:
    """A group as written (``get_param`` already substituted)."""

    name: str
    count: int
    resource_def: Mapping[str, object]
    depends_on: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(member_name(self.name, i) for i in range(self.count))

    @property
    def member_type(self) -> str:
        return str(self.resource_def["type"])

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "type": GROUP_TYPE,
            "properties": {"count": self.count, "resource_def": dict(self.resource_def)}}
        if self.depends_on:
            out["depends_on"] = list(self.depends_on)
        return out

    def member(self, index: int) -> dict[str, object]:
        """Member ``index`` as a raw resource (the group's depends_on still
        naming groups: :func:`expand` rewrites it with the rest)."""
        raw: dict[str, object] = {
            "type": self.resource_def["type"],
            "properties": _indexed(self.resource_def.get("properties") or {}, index)}
        if "deletion_policy" in self.resource_def:
            raw["deletion_policy"] = self.resource_def["deletion_policy"]
        if self.depends_on:
            raw["depends_on"] = list(self.depends_on)
        return raw


def _indexed(value: object, index: int) -> object:
    """``value`` with ``%index%`` replaced in every string in it."""
    if isinstance(value, str):
        return value.replace(INDEX_VAR, str(index))
    if isinstance(value, dict):
        return {k: _indexed(v, index) for k, v in value.items()}
    if isinstance(value, list):
        return [_indexed(v, index) for v in value]
    return value


def is_group(raw: object) -> bool:
    return isinstance(raw, dict) and raw.get("type") == GROUP_TYPE


def member_of(name: str, groups: Mapping[str, GroupDefinition]) -> tuple[str, int] | None:
    """(group, index) if ``name`` has the form of a member of one of ``groups``."""
    m = _MEMBER_RE.match(name)
    if m and m["group"] in groups:
        return m["group"], int(m["index"])
    return None


def _group(name: str, raw: dict[str, object], names: Mapping[str, object],
           known_types: Mapping[str, object], name_re: re.Pattern[str]) -> GroupDefinition:
    where = f"group {name!r}"
    if (bad := first_unknown(raw, GROUP_KEYS)) is not None:
        hint = " (put it in resource_def)" if bad == "deletion_policy" else ""
        raise GroupError(f"{where}: unknown key {bad!r}{hint}")
    props = raw.get("properties")
    if not isinstance(props, dict):
        raise GroupError(f"{where}: 'properties' must be a mapping with 'count' and "
                         "'resource_def'")
    if (bad := first_unknown(props, GROUP_PROPERTIES)) is not None:
        raise GroupError(f"{where}: unknown property {bad!r} "
                         f"(known: {', '.join(sorted(GROUP_PROPERTIES))})")
    count = props.get("count")
    if isinstance(count, float) and count.is_integer():
        count = int(count)  # a number parameter given as 3.0
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_COUNT:
        raise GroupError(f"{where} property 'count': must be an integer from 0 to "
                         f"{MAX_COUNT}, got {count!r}")
    rdef = props.get("resource_def")
    if not isinstance(rdef, dict):
        raise GroupError(f"{where} property 'resource_def': must be a mapping with "
                         "'type' and 'properties'")
    if (bad := first_unknown(rdef, RESOURCE_DEF_KEYS)) is not None:
        raise GroupError(f"{where} property 'resource_def': unknown key {bad!r} "
                         f"(allowed: {', '.join(sorted(RESOURCE_DEF_KEYS))})")
    type_ = rdef.get("type")
    if type_ == GROUP_TYPE:
        raise GroupError(f"{where} property 'resource_def': a group of groups is not "
                         "supported")
    if not isinstance(type_, str) or type_ not in known_types:
        raise GroupError(f"{where} property 'resource_def': unknown type {type_!r} "
                         f"(known: {', '.join(sorted(known_types))})")
    if count and not name_re.match(member_name(name, count - 1)):
        raise GroupError(f"{where}: the name is too long for {count} members (a member's "
                         f"name, {member_name(name, count - 1)!r}, is at most 128 characters)")
    depends_on = raw.get("depends_on") or []
    if isinstance(depends_on, str):
        depends_on = [depends_on]
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise GroupError(f"{where}: 'depends_on' must be a list of resource names")
    for dep in depends_on:
        if dep == name:
            raise GroupError(f"{where}: depends_on names the group itself")
        if dep not in names:
            raise GroupError(f"{where}: depends_on names unknown resource {dep!r}")
    return GroupDefinition(name, count, dict(rdef), tuple(depends_on))


def expand(raw_resources: Mapping[str, Any], raw_outputs: Mapping[str, object],
           known_types: Mapping[str, object], attributes: Mapping[str, frozenset[str]],
           name_re: re.Pattern[str]
           ) -> tuple[dict[str, Any], dict[str, object], dict[str, GroupDefinition],
                      dict[str, tuple[str, int]]]:
    """The resources with each group replaced by its members (in its place,
    index order), references to groups rewritten (below) in every
    resource's properties and depends_on and in the outputs; the groups;
    and, per member name, its (group, index).

    Rewriting, Heat's shapes: ``{get_attr: [G, resource.N, ATTR, ...]}`` ->
    ``{get_attr: [G.N, ATTR, ...]}``; ``{get_attr: [G, ATTR, ...]}`` -> the
    list of every member's; ``{get_attr: [G, refs]}`` -> the list of
    ``{get_resource: G.N}`` (``[G, refs, N]``: member N's); ``refs_map``
    -> ``{"N": {get_resource: G.N}}``; ``depends_on: [G]`` -> every
    member. A property takes one value: the list forms are for outputs.
    """
    groups = {n: _group(n, r, raw_resources, known_types, name_re)
              for n, r in raw_resources.items() if is_group(r)}
    if not groups:
        return dict(raw_resources), dict(raw_outputs), {}, {}
    for name in raw_resources:
        owner = member_of(name, groups)
        if owner is not None:
            raise GroupError(f"resource {name!r}: the name is reserved for member {owner[1]} "
                             f"of group {owner[0]!r} (members are named GROUP.INDEX): "
                             "rename the resource")
    members: dict[str, tuple[str, int]] = {}
    out: dict[str, Any] = {}
    for name, raw in raw_resources.items():
        if name not in groups:
            out[name] = raw
            continue
        g = groups[name]
        for i, m in enumerate(g.members):
            out[m] = g.member(i)
            members[m] = (name, i)
    rw = _Rewriter(groups, attributes)
    for name, raw in out.items():
        if not isinstance(raw, dict):
            continue  # template.py refuses its shape
        where = (f"group {members[name][0]!r} member {members[name][1]}" if name in members
                 else f"resource {name!r}")
        new = dict(raw)
        props = raw.get("properties")
        if isinstance(props, dict):
            new["properties"] = {p: rw.rewrite(f"{where} property {p!r}", v, single=True)
                                 for p, v in props.items()}
        deps = raw.get("depends_on")
        if isinstance(deps, str):
            deps = [deps]
        if isinstance(deps, list):
            new["depends_on"] = [m for d in deps for m in
                                 (groups[d].members if d in groups else (d,))]
        out[name] = new
    outputs = {n: rw.rewrite(f"output {n!r}", v, single=False) for n, v in raw_outputs.items()}
    return out, outputs, groups, members


class _Rewriter:
    def __init__(self, groups: Mapping[str, GroupDefinition],
                 attributes: Mapping[str, frozenset[str]]) -> None:
        self.groups = groups
        self.attributes = attributes

    def rewrite(self, where: str, value: object, single: bool) -> object:
        if isinstance(value, dict) and len(value) == 1:
            ((fn, arg),) = value.items()
            if fn == "get_resource" and isinstance(arg, str):
                return self._get_resource(where, arg)
            if fn == "get_attr" and isinstance(arg, list) and arg and isinstance(arg[0], str):
                return self._get_attr(where, arg, single)
        if isinstance(value, dict):
            return {k: self.rewrite(where, v, single) for k, v in value.items()}
        if isinstance(value, list):
            return [self.rewrite(where, v, single) for v in value]
        return value

    def _check_member(self, where: str, name: str) -> None:
        owner = member_of(name, self.groups)
        if owner is not None and owner[1] >= self.groups[owner[0]].count:
            g = self.groups[owner[0]]
            raise GroupError(f"{where}: group {g.name!r} has no member {owner[1]} "
                             f"(count {g.count})")

    def _get_resource(self, where: str, name: str) -> object:
        if name in self.groups:
            raise GroupError(
                f"{where}: get_resource names group {name!r}, which has no id of its own: "
                f"use {{get_attr: [{name}, resource.N, id]}} (one member's) or "
                f"{{get_attr: [{name}, refs]}} (all of them, in an output)")
        self._check_member(where, name)
        return {"get_resource": name}

    def _get_attr(self, where: str, arg: list[object], single: bool) -> object:
        name = arg[0]
        assert isinstance(name, str)  # rewrite() passes only such
        if name not in self.groups:
            self._check_member(where, name)
            return {"get_attr": list(arg)}
        g = self.groups[name]
        attr = arg[1] if len(arg) > 1 else None
        path = list(arg[2:])
        if not isinstance(attr, str):
            raise GroupError(f"{where}: get_attr of group {name!r} takes [{name}, ATTRIBUTE], "
                             f"[{name}, resource.N, ATTRIBUTE] or [{name}, refs], got {arg!r}")
        if attr.startswith(MEMBER_ATTR):
            index = attr[len(MEMBER_ATTR):]
            if not index.isdigit():
                raise GroupError(f"{where}: get_attr of group {name!r}: {attr!r} is not "
                                 "resource.N with N a member's index")
            if int(index) >= g.count:
                raise GroupError(f"{where}: group {name!r} has no member {int(index)} "
                                 f"(count {g.count})")
            if not path:
                raise GroupError(f"{where}: get_attr of group {name!r}: name the member's "
                                 f"attribute: [{name}, {attr}, ATTRIBUTE]")
            return {"get_attr": [member_name(name, int(index)), *path]}
        if attr in (REFS, REFS_MAP):
            refs: list[object] = [{"get_resource": m} for m in g.members]
            whole: object = refs if attr == REFS else \
                {str(i): r for i, r in enumerate(refs)}
            if not path:
                if single:
                    raise self._list_in_property(where, name, attr)
                return whole
            step = path[0]
            key = str(step) if attr == REFS_MAP else step
            if len(path) > 1 or (attr == REFS and (isinstance(step, bool)
                                 or not isinstance(step, int))):
                raise GroupError(f"{where}: get_attr [{name}, {attr}, ...] takes one "
                                 f"{'index' if attr == REFS else 'key'}, got {path!r}")
            try:
                if attr == REFS and isinstance(step, int) and not 0 <= step < g.count:
                    raise IndexError(step)
                return whole[key]  # type: ignore[index]
            except (KeyError, IndexError):
                raise GroupError(f"{where}: group {name!r} has no member {step!r} "
                                 f"(count {g.count})")
        known = self.attributes[g.member_type]
        if attr not in known:
            raise GroupError(
                f"{where}: group {name!r} ({g.member_type} members) has no attribute "
                f"{attr!r} (known: {', '.join(sorted(known | {REFS, REFS_MAP}))}, "
                "resource.N)")
        if single:
            raise self._list_in_property(where, name, attr)
        return [{"get_attr": [m, attr, *path]} for m in g.members]

    @staticmethod
    def _list_in_property(where: str, name: str, attr: str) -> GroupError:
        return GroupError(f"{where}: {{get_attr: [{name}, {attr}]}} gives one value per "
                          f"member; a property takes one member's: "
                          f"{{get_attr: [{name}, resource.N, ...]}}")
