"""The resource types a stack template may use (doc/convergence.rst,
"Templates"): their properties, how a change to each is applied, the
attributes ``get_attr`` may read, and the checks of a literal value against
them. Data, not code: :data:`RESOURCE_TYPES`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sharemgr.common import vocab


class TemplateError(ValueError):
    """The template is invalid; the message names the resource and property."""


class ResolutionError(TemplateError):
    """A property or output cannot be resolved from the data of the resources
    it references (missing data, or a value of the wrong type at run time)."""


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
# Resource names end up in physical names and dummy-driver gate file names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_value(where: str, ps: PropertySchema, value: object) -> None:
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
        from sharemgr.manager.plans import Refused

        try:
            access.check_list(value)
        except Refused as exc:
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


