"""The parsed form of a stack template: :class:`Template` and its
:class:`ResourceDefinition` entries, as validation builds them and
``stack_templates`` stores them (``template.py`` holds the entry points)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from sharemgr.common.jsontypes import JSONValue
from sharemgr.convergence import groups as grp
from sharemgr.convergence import parameters as params
from sharemgr.convergence.dependency_order import toposort
from sharemgr.convergence.intrinsics import GetAttr, references
from sharemgr.convergence.resource_types import RESOURCE_TYPES, RETAIN_POLICY, ResourceType


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
            for ref in references(d.name, dict(d.properties)):
                if isinstance(ref, GetAttr):
                    wanted.setdefault(ref.name, set()).add(ref.attribute)
        return {name: frozenset(attrs) for name, attrs in wanted.items()}

    @functools.cached_property
    def output_resources(self) -> frozenset[str]:
        """The resources the outputs read (``get_resource`` or ``get_attr``)."""
        return frozenset(ref.name for name, value in self.outputs.items()
                         for ref in references(f"output {name!r}", value))

    @classmethod
    def empty(cls) -> Template:
        """The template a stack delete converges to."""
        return cls(resources={})

    def to_dict(self) -> dict[str, JSONValue]:
        """The JSON-able form stored in ``stack_templates``
        (``template.template_from_dict`` reads it)."""
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
        # Values a template was loaded from (YAML or JSON) or validated into.
        return cast("dict[str, JSONValue]", out)

    def dependencies(self) -> dict[str, frozenset[str]]:
        """name -> names it requires (must exist before it)."""
        return {n: d.requires for n, d in self.resources.items()}

    def dependency_order(self) -> list[str]:
        """Names, each after everything it requires (template order breaks ties)."""
        return toposort(self.dependencies())
