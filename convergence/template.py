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

This module holds the entry points, :func:`parse` and
:func:`template_from_dict`. The work is in its neighbours:
``template_model.py`` (the parsed form, :class:`Template`),
``resource_types.py`` (the schema), ``template_yaml.py`` (reading YAML),
``template_validation.py`` (checking everything before a caller writes
anything), ``intrinsics.py`` (``get_resource``/``get_attr``) and
``dependency_order.py``. The names callers use from those are re-exported
here, so ``from sharemgr.convergence.template import ...`` stays the one
import a caller needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.convergence import template_yaml
from sharemgr.convergence.intrinsics import GetAttr, GetResource
from sharemgr.convergence.resource_types import (
    ACCESS_RULES,
    IN_PLACE,
    INTEGER,
    MAX_CONVERGE_INTERVAL,
    MAX_TIMEOUT_MINUTES,
    NAME_PROPERTY_MAX,
    REF,
    REPLACE,
    RESOURCE_TYPES,
    STRING,
    PropertySchema,
    ResolutionError,
    ResourceType,
    TemplateError,
    check_stack_name,
)
from sharemgr.convergence.template_model import ResourceDefinition, Template
from sharemgr.convergence.template_validation import validate

__all__ = [
    "ACCESS_RULES", "IN_PLACE", "INTEGER", "MAX_CONVERGE_INTERVAL", "MAX_TIMEOUT_MINUTES",
    "NAME_PROPERTY_MAX", "REF", "REPLACE", "RESOURCE_TYPES", "STRING",
    "GetAttr", "GetResource", "PropertySchema", "ResolutionError", "ResourceDefinition",
    "ResourceType", "Template", "TemplateError",
    "check_stack_name", "parse", "template_from_dict",
]


def template_from_dict(data: object) -> Template:
    """The template stored in ``stack_templates`` (``Template.to_dict``),
    validated again. Raises :class:`TemplateError`."""
    return validate(data)


def parse(text: str | bytes, parameters: Mapping[str, object] | None = None) -> Template:
    """Parse and validate a YAML template, ``parameters`` (name: value, from
    -P and -e) substituted for its ``get_param`` calls. Raises
    :class:`TemplateError`."""
    return validate(template_yaml.load(text), parameters)

