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
here (each ``import X as X``, the form a strict type checker reads as a
re-export), so ``from sharemgr.convergence.template import ...`` stays the
one import a caller needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.convergence import template_yaml
from sharemgr.convergence.intrinsics import GetAttr as GetAttr
from sharemgr.convergence.intrinsics import GetResource as GetResource
from sharemgr.convergence.resource_types import ACCESS_RULES as ACCESS_RULES
from sharemgr.convergence.resource_types import IN_PLACE as IN_PLACE
from sharemgr.convergence.resource_types import INTEGER as INTEGER
from sharemgr.convergence.resource_types import MAX_CONVERGE_INTERVAL as MAX_CONVERGE_INTERVAL
from sharemgr.convergence.resource_types import MAX_TIMEOUT_MINUTES as MAX_TIMEOUT_MINUTES
from sharemgr.convergence.resource_types import NAME_PROPERTY_MAX as NAME_PROPERTY_MAX
from sharemgr.convergence.resource_types import REF as REF
from sharemgr.convergence.resource_types import REPLACE as REPLACE
from sharemgr.convergence.resource_types import RESOURCE_TYPES as RESOURCE_TYPES
from sharemgr.convergence.resource_types import STRING as STRING
from sharemgr.convergence.resource_types import PropertySchema as PropertySchema
from sharemgr.convergence.resource_types import ResolutionError as ResolutionError
from sharemgr.convergence.resource_types import ResourceType as ResourceType
from sharemgr.convergence.resource_types import TemplateError as TemplateError
from sharemgr.convergence.resource_types import check_stack_name as check_stack_name
from sharemgr.convergence.template_model import ResourceDefinition as ResourceDefinition
from sharemgr.convergence.template_model import Template as Template
from sharemgr.convergence.template_validation import validate


def template_from_dict(data: object) -> Template:
    """The template stored in ``stack_templates`` (``Template.to_dict``),
    validated again. Raises :class:`TemplateError`."""
    return validate(data, stored=True)


def parse(text: str | bytes, parameters: Mapping[str, object] | None = None) -> Template:
    """Parse and validate a YAML template, ``parameters`` (name: value, from
    -P and -e) substituted for its ``get_param`` calls. Raises
    :class:`TemplateError`."""
    data = template_yaml.load(text)
    if data is None:  # an empty file, or nothing but comments: a mistake, as Heat says
        raise TemplateError("the template is empty (a stack of no resources says "
                            "'resources: {}')")
    return validate(data, parameters)

