"""Starting stack traversals and describing stacks: what ``sharectl stack``
does, kept apart from the command line so tests and tools can call it.

Starting writes nothing unless everything is valid: the template is parsed
and checked first (``TemplateError``), a create inserts the stack row and
prepares its traversal in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sharemgr.common import vocab
from sharemgr.convergence import lifecycle, prepare
from sharemgr.convergence import physical as phys
from sharemgr.convergence.graph import Node, resource_ids_in
from sharemgr.convergence.properties import ResourceData, resolve_outputs
from sharemgr.convergence.template import (
    REF,
    RESOURCE_TYPES,
    Template,
    TemplateError,
    check_stack_name,
    parse,
    template_from_dict,
)
from sharemgr.db import models, stacks, sync_points
from sharemgr.db.engine import Database


def load_template(text: str | bytes, backends: Iterable[str],
                  parameters: Mapping[str, object] | None = None) -> Template:
    """Parse and validate, ``parameters`` substituted (convergence/parameters.py);
    a literal ``backend`` must be one of ``backends`` (the enabled ones), like
    ``sharectl share create --backend``."""
    template = parse(text, parameters)
    known = list(backends)
    for name, defn in template.resources.items():
        backend = defn.properties.get("backend")
        if isinstance(backend, str) and backend not in known:
            raise TemplateError(
                f"resource {name!r} property 'backend': unknown backend {backend!r}; "
                f"enabled backends: {', '.join(known) or 'none'}"
            )
    return template


def check_references(db: Database, template: Template) -> None:
    """A literal id given for a reference (a share's ``share_server``, a
    snapshot's ``share`` …) must name a live resource of its type, as
    ``sharectl snapshot create`` requires of its share: refused here,
    before anything is written, as Heat's constraints refuse an unknown
    volume. A reference to another of the template's resources is checked
    as its node runs (the resource may be made by then)."""
    for name, defn in template.resources.items():
        schema = RESOURCE_TYPES[defn.type].properties
        for prop, value in defn.properties.items():
            ref = schema.get(prop)
            if ref is None or ref.type != REF or not isinstance(value, str):
                continue
            if not any(phys.observe(db, t, value).host for t in ref.ref_types):
                what = " or ".join(t.replace("_", " ") for t in ref.ref_types)
                raise TemplateError(f"resource {name!r} property {prop!r}: no {what} with "
                                    f"id {value!r}")


def check_servers(template: Template, dhss: Mapping[str, bool]) -> None:
    """A share server goes only on a backend that handles share servers:
    ``dhss`` says which of the enabled backends do (in their order: the
    first is where one without a ``backend`` goes), as ``sharectl
    share-server create`` refuses. Refused here, before anything is written;
    a ``backend`` given by a function is checked as its node runs."""
    for name, defn in template.resources.items():
        if defn.type != vocab.SHARE_SERVER:
            continue
        backend = defn.properties.get("backend", next(iter(dhss), None))
        if isinstance(backend, str) and dhss.get(backend) is False:
            raise TemplateError(f"resource {name!r}: backend {backend!r} does not handle share "
                                "servers (driver_handles_share_servers = False)")


def timeout_for(template: Template | None, given: float | None, default: float) -> int:
    """The timeout of a CREATE or UPDATE in seconds (0: none), from minutes:
    ``--timeout``, else the template's ``timeout``, else the
    ``stack_timeout_minutes`` option. Minutes may have decimals (a test's
    ``0.05`` is three seconds); a timeout is at least one second."""
    if given is None:
        given = template.timeout if template is not None and template.timeout is not None \
            else default
    return 0 if not given else max(1, round(given * 60))


def create(db: Database, name: str, template: Template,
           disable_rollback: bool = False, timeout_seconds: int | None = None) -> prepare.Traversal:
    """A new stack and its CREATE traversal, together or not at all."""
    check_stack_name(name)
    return lifecycle.create_stack(db, name, template, disable_rollback, timeout_seconds)


# A DELETE's tries against traversals that keep starting first (a stack
# updated by several clients at once).
DELETE_TRIES = 5


def start(
    db: Database,
    name_or_id: str,
    action: str,
    template: Template | None = None,
    timeout_seconds: int | None = None,
    guard: prepare.Guard | None = None,
) -> prepare.Traversal:
    """UPDATE (to ``template``), DELETE or ROLLBACK an existing stack
    (``timeout_seconds`` None keeps the stack's timeout; ``guard``: see
    ``prepare.prepare_traversal_tx``). Raises StackNotFound,
    InvalidStackAction, TraversalLost (another traversal started first:
    nothing written), and what ``guard`` raises (nothing written).

    A DELETE that lost to another traversal reads the stack again and
    tries again (``DELETE_TRIES`` in all): what it does depends on no
    traversal, so the one that came first changes nothing of it. An UPDATE
    or a ROLLBACK was asked of the stack as its caller saw it, and is
    refused."""
    tries = DELETE_TRIES if action == vocab.STACK_DELETE else 1
    while True:
        stack = stacks.stack_lookup(db, name_or_id)
        try:
            return lifecycle.prepare_traversal(db, stack, action, template, timeout_seconds,
                                               guard)
        except prepare.TraversalLost:
            tries -= 1
            if not tries:
                raise


# Describing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    done: int
    total: int

    def __str__(self) -> str:
        return f"{self.done}/{self.total}"


def progress(db: Database, stack: models.Stack) -> Progress:
    """Resources of the current traversal that are done: a resource the
    template keeps when its update node has reported, one being removed when
    its clean-up node has (a node has reported once its key is in a
    SyncPoint's input data), and one whose node the preparation settled (it
    has no point). A completed traversal counts all of them, a failed one
    those whose rows ended their work in it."""
    if stack.status != vocab.STACK_IN_PROGRESS or not stack.current_traversal:
        # The resources of the graph's nodes, without building the graph.
        ids = resource_ids_in(stack.current_deps)
        # A check is no traversal and runs only after one that completed
        # (reconcile/stack_check.py): its FAILED says what drifted, not how
        # far the traversal got.
        whole = stack.status == vocab.STACK_COMPLETE or stack.action == vocab.STACK_CHECK
        if whole or stack.status != vocab.STACK_FAILED:
            return Progress(len(ids) if whole else 0, len(ids))
        # Failed: its SyncPoints are gone; the rows say which ended their work.
        deleting = stack.action == vocab.STACK_DELETE
        done = sum(1 for r in stacks.resource_list(db, stack.id)
                   if r.id in ids and r.status == vocab.STACK_COMPLETE
                   and r.action != vocab.STACK_INIT
                   and (r.action == vocab.STACK_DELETE) == deleting)
        return Progress(done, len(ids))
    graph = prepare.load_traversal_graph(stack)
    resources = graph.resource_ids()
    reported: set[str] = set()
    pointed: set[tuple[str, bool]] = set()
    for key, input_data in sync_points.reports_for_traversal(
            db, stack.id, stack.current_traversal).items():
        reported.update(input_data)
        pointed.add(key)
    nodes = [Node(rid, (rid, True) in graph) for rid in resources]
    done = sum(1 for n in nodes
               if n.key in reported or (str(n.resource_id), n.is_update) not in pointed)
    return Progress(done, len(resources))


def current_rows(db: Database, stack: models.Stack, template: Template | None = None
                 ) -> dict[str, models.StackResource]:
    """Name -> the row that embodies each resource of the stack's template
    (``template``: that template, if the caller has it already)."""
    if stack.template_id is None:
        return {}
    if template is None:
        template = stored_template(db, stack)
    rows = [r for r in stacks.resource_list(db, stack.id)
            if not (r.action == vocab.STACK_DELETE and r.status == vocab.STACK_COMPLETE)]
    chosen, _ = prepare.choose_rows(rows, template, stack.template_id, stack.template_id)
    return chosen


def stored_template(db: Database, stack: models.Stack) -> Template:
    """The stack's current template (empty if it has none)."""
    if stack.template_id is None:
        return Template.empty()
    return template_from_dict(stacks.template_get(db, stack.template_id) or {})


def outputs(db: Database, stack: models.Stack, template: Template | None = None
            ) -> dict[str, object]:
    """The template's outputs from the resources as they are now (an output
    whose resource is missing or failed is None); ``template``: the stack's
    stored one, if the caller has it already."""
    if stack.template_id is None:
        return {}
    if template is None:
        template = stored_template(db, stack)
    if not template.outputs:
        return {}
    data = {}
    for name, row in current_rows(db, stack, template).items():
        if name not in template.output_resources:
            continue  # only the resources an output reads are looked at
        observed = phys.observe(db, row.type, row.physical_id)
        if observed.state != phys.GONE:
            data[name] = ResourceData(name, row.id, row.physical_id, observed.attributes)
    return resolve_outputs(template, data)


def show(db: Database, stack: models.Stack, template: Template | None = None
         ) -> dict[str, object]:
    """``stack show``'s fields; ``template``: the stack's stored one, if the
    caller has it already."""
    # Parsed once: at 10,000 resources a parse is a tenth of a second or more.
    if template is None:
        template = stored_template(db, stack)
    return {
        "id": stack.id,
        "name": stack.name,
        "action": stack.action,
        "status": stack.status,
        "status_reason": stack.status_reason,
        "disable_rollback": stack.disable_rollback,
        "timeout_minutes": None if not stack.timeout_seconds
        else float(f"{stack.timeout_seconds / 60:g}"),
        "resources": stacks.resource_name_count(db, stack.id),
        "progress": str(progress(db, stack)),
        "parameters": template.parameters,
        **_groups(template),
        "outputs": outputs(db, stack, template),
        "current_traversal": stack.current_traversal,
        "template_id": stack.template_id,
        "created_at": stack.created_at,
        "updated_at": stack.updated_at,
    }


def _groups(template: Template) -> dict[str, object]:
    """``stack show``'s ``groups`` (each group's count), if the template has any:
    the members are resource rows of their own (``GROUP.INDEX``), a group is none."""
    if not template.groups:
        return {}
    return {"groups": {g.name: g.count for g in template.groups.values()}}


def resource_rows(db: Database, stack: models.Stack) -> list[dict[str, object]]:
    return [
        {"id": r.id, "name": r.name, "type": r.type, "physical_id": r.physical_id,
         "action": r.action, "status": r.status, "status_reason": r.status_reason}
        for r in stacks.resource_list(db, stack.id)
    ]


def graph_dot(db: Database, stack: models.Stack) -> str:
    return prepare.graph_dot(db, stack)
