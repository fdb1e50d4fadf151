"""A node's first step: what to do, from the rows read (doc/design.rst, "A
node in three steps"). Nothing here writes; what it reads of the physical
resources goes through ``physical.observe``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import physical as phys
from sharemgr.convergence.graph import Graph, Node
from sharemgr.convergence.properties import (
    PropertyDiff,
    data_by_name,
    diff_properties,
    resolve_properties,
)
from sharemgr.convergence.template import REPLACE, RESOURCE_TYPES, Template
from sharemgr.db import models, stacks
from sharemgr.db.engine import Database
from sharemgr.manager import hosts, migration_plans

LOG = logging.getLogger(__name__)


class Work(enum.StrEnum):
    """What an update node does to its resource."""

    NOOP = "noop"
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    MIGRATE = "migrate"  # a share moved to another backend, its data kept
    BUSY = "busy"  # another operation is under way on it
    KEPT = "kept"  # in an error that kept its data: never replaced, the node fails


class RowEnd(TypedDict):
    """A row's values when its action completes (``act.row_end``): its
    template, and only the rows it requires now."""

    template_id: int | None
    requires: list[int]


@dataclass(frozen=True)
class Decision:
    kind: Work
    props: dict[str, object]
    observed: phys.Observed
    in_place: Mapping[str, Any]
    host: str | None  # where the work runs ('host@backend', '*@backend', None: anywhere)
    # The rows the resource requires now: those whose data it was given.
    requires_now: tuple[int, ...] = ()
    # The row's values when its action starts: its properties, and the rows
    # it requires, old and new, so that neither is deleted under it.
    start: Mapping[str, object] = field(default_factory=dict)


def decide(db: Database, template: Template, row: models.StackResource,
           effective: models.StackResource, input_data: Mapping[str, object],
           observed: phys.Observed | None = None) -> Decision:
    """What the update node of ``row`` does to ``effective`` (the row or its
    replacement, see ``effective``) for the template's definition.
    ``observed``: ``effective``'s physical resource as the caller just
    observed it (not read again)."""
    defn = template.resources[row.name]
    data = data_by_name(input_data)
    props = resolve_properties(defn, data)
    requires_now = tuple(sorted({rd.resource_id for rd in data.values()
                                 if rd.name in defn.requires and rd.resource_id is not None}))
    if observed is None:
        observed = phys.observe(db, effective.type, effective.physical_id)
    kind: Work = Work.REPLACE
    in_place: Mapping[str, Any] = {}
    if effective.action == vocab.STACK_DELETE:
        kind = Work.REPLACE  # doc/specs.rst, spec 001: update node whose row is being deleted
    elif unhealthy(effective):
        kind = Work.REPLACE  # marked so by the user (stack resource mark-unhealthy)
    elif observed.state == phys.ERROR and observed.status in vocab.ERRORS_KEEPING_DATA:
        kind = Work.KEPT  # a failed resize or the like: replaced, its data would be deleted
    elif observed.state == phys.GONE:
        kind = Work.CREATE
    elif observed.state == phys.BUSY:
        kind = Work.BUSY
    elif observed.state == phys.OK:
        current = current_properties(effective, observed, props)
        diff = diff_properties(effective.type, current, props)
        if not diff.replace:
            kind, in_place = (Work.UPDATE, diff.in_place) if diff.changed \
                else (Work.NOOP, {})
        elif migrates(db, effective, diff, props, observed):
            kind = Work.MIGRATE  # then planned again, for what else changed
    if kind in (Work.CREATE, Work.REPLACE):
        host = phys.target_host(db, effective.type, props)
    else:
        host = observed.host
    start = {"properties": props, "status_reason": None,
             "requires": sorted(set(effective.requires or ()) | set(requires_now))}
    return Decision(kind, props, observed, in_place, host, requires_now, start)


def current_properties(row: models.StackResource, observed: phys.Observed,
                       props: Mapping[str, object]) -> dict[str, object]:
    """The properties the physical resource has now: the row's, with what
    is observed; a share's backend, when the template names one, is the one
    it is on (a migration moved it: a check cut short may not have recorded
    it)."""
    current: dict[str, object] = {**(row.properties or {}), **observed.actual}
    if row.type == vocab.SHARE and props.get("backend") and observed.host:
        current["backend"] = hosts.backend_of(observed.host)
    return current


def migrates(db: Database, row: models.StackResource, diff: PropertyDiff,
             props: Mapping[str, object], observed: phys.Observed) -> bool:
    """Whether the share is moved rather than replaced: its backend is the
    one change that would need a new share, and a migration there can
    start now (no snapshots, replicas or share server; a destination that
    takes it); else it is replaced, as before (doc/migration.rst,
    "Stacks")."""
    backend = props.get("backend")
    if row.type != vocab.SHARE or not backend or not row.physical_id:
        return False
    schema = RESOURCE_TYPES[row.type].properties
    if {p for p in diff.changed if schema[p].update == REPLACE} != {"backend"}:
        return False
    dest = migration_plans.destination_for(db, observed.host or "", str(backend))
    why = migration_plans.refusal(db, migration_plans.Request(row.physical_id, dest,
                                                              complete=True))
    if why:
        LOG.info("share %s cannot move to %s (%s): it is replaced", row.physical_id, dest, why)
    return why is None


def kept_reason(row: models.StackResource, status: str | None) -> str:
    """Why a resource in an error that kept its data is not replaced."""
    return (f"physical resource {row.physical_id} is {status}: the failure kept its data, "
            "so the stack does not replace it; look at it on the backend, reset its status "
            f"(sharectl {row.type.replace('_', '-')} reset-state {row.physical_id} --state "
            "available) and update the stack again")


def unhealthy(row: models.StackResource) -> bool:
    """Marked unhealthy (Heat's CHECK_FAILED): its next update replaces it."""
    return row.action == vocab.STACK_CHECK and row.status == vocab.STACK_FAILED


def effective(db: Database, stack: models.Stack, row: models.StackResource
              ) -> tuple[models.StackResource, bool]:
    """The row an update node works on: its replacement if a check of this
    traversal made one before it was cut short (same template, not being
    deleted), else the row itself. The flag says whether the row's
    ``replaced_by`` points elsewhere and must be cleared (a rollback back
    to this row: its replacement is cleaned up instead)."""
    if row.replaced_by is None:
        return row, False
    new = stacks.resource_get(db, row.replaced_by)
    if new is not None and new.action != vocab.STACK_DELETE \
            and new.template_id == stack.template_id:
        return new, False
    return row, True


def orphan(db: Database, graph: Graph, row: models.StackResource
           ) -> models.StackResource | None:
    """A replacement of ``row`` that its update node must delete itself
    before it goes on: one made by a check of this traversal that a crash
    cut short (hence not in the graph, so no clean-up node will come for
    it), whose physical resource failed or is being deleted. Deleting it
    first is safe: nothing depends on it yet, its dependants run after this
    node."""
    if row.replaced_by is None:
        return None
    new = stacks.resource_get(db, row.replaced_by)
    if new is None or (new.id, False) in graph or \
            (new.action == vocab.STACK_DELETE and new.status == vocab.STACK_COMPLETE):
        return None
    if new.action == vocab.STACK_DELETE:
        return new
    return new if phys.observe(db, new.type, new.physical_id).state == phys.ERROR else None


def route(db: Database, template: Template, stack: models.Stack, row: models.StackResource,
          node: Node, graph: Graph, input_data: Mapping[str, object]) -> str | None:
    """Where this node's physical work must run: an update node that creates
    or replaces goes where the new resource goes, any other node to the
    existing physical resource's ``host@backend``; None: any engine. A
    failure to tell is decided under the lock, here."""
    try:
        if not node.is_update:
            if (row.id, True) in graph and row.replaced_by is None:
                return None
            return phys.observe(db, row.type, row.physical_id).host
        eff, _ = effective(db, stack, row)
        return decide(db, template, row, eff, input_data).host
    except Exception as exc:
        LOG.debug("node %s: no route (%s); deciding here", node, exc)
        return None


def nominal(row: models.StackResource) -> str:
    """The action an update node performs on ``row``, for its FAILED state."""
    if row.action == vocab.STACK_INIT or \
            (row.action == vocab.STACK_CREATE and row.status != vocab.STACK_COMPLETE):
        return vocab.STACK_CREATE
    return vocab.STACK_UPDATE
