"""What an update would do, without doing it (``stack update --dry-run``,
doc/convergence.rst "Preview").

Each resource of the new template is classified by the engine's own
decision (:func:`sharemgr.convergence.decide.decide`, the code an update
node runs first), fed with the data its references would carry: the
physical id and attributes of the resources as they are, or a placeholder
id for one that the update adds or replaces (so a reference to a replaced
share makes its snapshot replaced too, as the traversal would). Nothing is
written: decide only reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from sharemgr.common import vocab
from sharemgr.convergence import actions, prepare, retain
from sharemgr.convergence import physical as phys
from sharemgr.convergence.decide import (
    Work,
    current_properties,
    decide,
    kept_reason,
    unhealthy,
)
from sharemgr.convergence.graph import Node
from sharemgr.convergence.properties import (
    ResourceData,
    data_by_name,
    diff_properties,
    resolve_properties,
)
from sharemgr.convergence.template import REPLACE, RESOURCE_TYPES, Template, TemplateError
from sharemgr.db import models, status_reads
from sharemgr.db.engine import Database

ADDED = "added"
UPDATED = "updated"
MIGRATED = "migrate"  # a share moved to another backend with its data
REPLACED = "replaced"
DELETED = "deleted"
RETAINED = "retained"  # removed from the stack, its physical resource kept (retain.py)
UNCHANGED = "unchanged"
UNKNOWN = "unknown"  # busy, or a value only known once the update runs


@dataclass(frozen=True)
class Change:
    name: str
    type: str
    change: str
    properties: tuple[str, ...] = ()  # replaced: the ones that force it; updated: changed
    reason: str = ""
    kept: bool = False  # replaced, the old physical resource retained (deletion_policy)
    was: str = ""  # replaced by a resource of another type: the old one's type


@dataclass
class Preview:
    changes: list[Change] = field(default_factory=list)

    def names(self, change: str) -> set[str]:
        return {c.name for c in self.changes if c.change == change}

    def lost_shares(self) -> list[Change]:
        """Shares the new template replaces (a property that forces a new
        share changed): the data on the old one does not come along. A
        share replaced because it failed or is gone is not counted: there
        is nothing to keep, and refusing would block its repair; nor is one
        marked unhealthy, whose replacement the user asked for, nor one
        whose old share is retained (its data stays, outside the stack)."""
        return [c for c in self.changes
                if c.change == REPLACED and vocab.SHARE in (c.type, c.was) and c.properties
                and not c.kept]


def preview(db: Database, template: Template,
            rows: Mapping[str, models.StackResource],
            unchanged: Mapping[str, ResourceData] | None = None) -> Preview:
    """Classify each resource of ``template`` against ``rows`` (name -> the
    row that embodies it now, ``actions.current_rows``; empty for a
    create). ``unchanged``: resources known to be unchanged already (a
    preparation settled them), with the data they pass on."""
    out = Preview()
    unchanged = unchanged or {}
    data: dict[str, ResourceData] = {}
    seen = _shares_observed(db, (r for n, r in rows.items() if n not in unchanged))
    for name in template.dependency_order():
        defn = template.resources[name]
        row = rows.get(name)
        if row is None:
            out.changes.append(Change(name, defn.type, ADDED))
            data[name] = ResourceData(name, None, f"(new {name})")
            continue
        if name in unchanged:
            out.changes.append(Change(name, defn.type, UNCHANGED))
            data[name] = unchanged[name]
            continue
        if row.type != defn.type:
            # A share made another type is a share replaced (its data lost),
            # unless it was never made.
            out.changes.append(_kept(db, row, Change(
                name, defn.type, REPLACED, ("type",) if row.physical_id else (),
                f"type {row.type} -> {defn.type}", was=row.type)))
            data[name] = ResourceData(name, None, f"(new {name})")
            continue
        input_data = {n: data[n].to_dict() for n in defn.requires if n in data}
        try:
            props = resolve_properties(defn, data_by_name(input_data))
            observed = seen.get(row.id) or phys.observe(db, row.type, row.physical_id)
        except TemplateError as exc:  # ResolutionError: known once the update runs
            out.changes.append(Change(name, defn.type, UNKNOWN, reason=str(exc)))
            data[name] = ResourceData(name, row.id, row.physical_id)
            continue
        try:
            kind = decide(db, template, row, row, input_data, observed).kind
        except phys.CheckError:
            # Raised only where a new physical resource is placed: its
            # parent is one the update makes (our placeholder id).
            kind = Work.REPLACE
        diff = diff_properties(row.type, current_properties(row, observed, props), props)
        schema = RESOURCE_TYPES[row.type].properties
        forcing = tuple(sorted(p for p in diff.changed if schema[p].update == REPLACE))
        if row.physical_id is None and kind in (Work.CREATE, Work.REPLACE):
            # Its create never began (a traversal failed before it): nothing
            # is replaced, whatever its references became meanwhile.
            change = Change(name, defn.type, REPLACED, (), "never made: made now")
        elif kind == Work.NOOP:
            change = Change(name, defn.type, UNCHANGED)
        elif kind == Work.UPDATE:
            change = Change(name, defn.type, UPDATED, tuple(sorted(diff.in_place)))
        elif kind == Work.MIGRATE:
            change = Change(name, defn.type, MIGRATED, tuple(sorted(diff.changed)),
                            f"moved to backend {props['backend']} with its data")
        elif kind == Work.REPLACE and unhealthy(row):
            change = Change(name, defn.type, REPLACED, (),
                            f"marked unhealthy: {row.status_reason or 'no reason given'}")
        elif kind == Work.REPLACE:
            change = Change(name, defn.type, REPLACED, forcing,
                            "" if forcing else f"resource is {row.action} {row.status}")
        elif kind == Work.KEPT:
            change = Change(name, defn.type, UNKNOWN, reason=kept_reason(row, observed.status))
        elif kind == Work.CREATE:
            change = Change(name, defn.type, REPLACED, (),
                            "its physical resource is gone: made anew")
        else:
            change = Change(name, defn.type, UNKNOWN, reason="another operation is under way")
        change = _kept(db, row, change)
        out.changes.append(change)
        if change.change == REPLACED:
            data[name] = ResourceData(name, None, f"(new {name})",
                                      observed.attributes)
        else:
            data[name] = ResourceData(name, row.id, row.physical_id,
                                      observed.attributes)
    for name, row in rows.items():
        if name not in template.resources:
            kept = retain.keeps(db, vocab.STACK_UPDATE, row)
            out.changes.append(Change(name, row.type, RETAINED if kept else DELETED))
    return out


class LosesShares(Exception):
    """An update would replace shares (``Preview.lost_shares``)."""

    def __init__(self, lost: list[Change]) -> None:
        super().__init__(", ".join(c.name for c in lost))
        self.lost = lost


def refuse_lost_shares(db: Database, template: Template, previous: Template,
                       previous_id: int | None) -> prepare.Guard:
    """A preparation's guard (``prepare.Guard``) raising :class:`LosesShares`
    when the update to ``template`` would replace shares; ``previous``: the
    stack's stored template as the caller read it (``previous_id``), read
    again if the stack has moved to another since. Run in the preparation, after the
    stack row is locked, it judges the state the traversal starts from, and
    the nodes the preparation settled are unchanged without a second look:
    at 1 % changed, that is 99 % of the preview's work not done twice."""

    def guard(prepared: prepare.Prepared) -> None:
        stack = prepared.stack
        if stack.template_id is None:
            return
        stored = (previous if stack.template_id == previous_id
                  else actions.stored_template(db, stack))
        # The rows as ``actions.current_rows`` chooses them, from those read.
        rows, _ = prepare.choose_rows(prepared.rows, stored, stack.template_id,
                                      stack.template_id)
        settled = prepared.settled
        kept = set(settled.rows)
        unchanged = {name: ResourceData.from_dict(sent) for name, row in rows.items()
                     if row.id in kept
                     and isinstance(sent := settled.data.get(Node(row.id, True)), Mapping)}
        lost = preview(db, template, rows, unchanged).lost_shares()
        if lost:
            raise LosesShares(lost)

    return guard


def _kept(db: Database, row: models.StackResource, change: Change) -> Change:
    """A replacement whose old physical resource the update keeps
    (``deletion_policy: retain``, whatever forces the replacement: a type
    change too) says so."""
    if change.change != REPLACED or not retain.keeps(db, vocab.STACK_UPDATE, row):
        return change
    return replace(change, reason="; ".join(filter(None, (change.reason,
                                                        "the old one is retained"))),
                   kept=True)


def _shares_observed(db: Database, rows: Iterable[models.StackResource]
                     ) -> dict[int, phys.Observed]:
    """The rows' shares observed in bulk, by row id (a statement per 500,
    where a read each made a 10,000-share stack's preview 20,000 statements
    long). Other types are read one by one, as before."""
    shares = {r.id: r.physical_id for r in rows if r.type == vocab.SHARE and r.physical_id}
    found = status_reads.shares_with_status_by_id(db, shares.values())
    out: dict[int, phys.Observed] = {}
    for rid, pid in shares.items():
        pair = found.get(pid)
        if pair is None or pair[1] is None:  # as ``observe`` answers it
            out[rid] = phys.Observed(phys.GONE)
            continue
        seen = phys.observe_rows(vocab.SHARE, {models.Share: pair[0],
                                               models.ShareInstance: pair[1]})
        if seen is not None:
            out[rid] = seen
    return out
