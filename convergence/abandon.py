"""Abandon and adopt (doc/convergence.rst, "Keeping what matters"): a stack
that lets go of its physical resources, and one made over existing ones
without any driver call.

The abandon data is JSON: ``{"format": 1, "name", "id", "template",
"parameters", "resources": {NAME: {"type", "physical_id", "properties",
"attributes", "action", "status"}}, "left": [...]}`` (``left``: physical
resources of rows the template no longer names, kept as they are but not
adoptable by name). Adopt reads ``resources`` (and ``parameters``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.convergence import physical as phys
from sharemgr.convergence import prepare
from sharemgr.convergence.properties import ResourceData, diff_properties, resolve_properties
from sharemgr.convergence.template import Template, TemplateError, template_from_dict
from sharemgr.db import models, stack_keep
from sharemgr.db.engine import Database
from sharemgr.manager import hosts

FORMAT = 1


class AdoptError(ValueError):
    """The adopt data does not fit the template or the database; nothing
    was written."""


# Abandon -----------------------------------------------------------------------------


def abandon(db: Database, stack: models.Stack) -> dict[str, object]:
    """Delete the stack's records (``stack_keep.abandon``: refused while a
    traversal is in progress) and return what adopt reads."""
    gone = stack_keep.abandon(db, stack.id)
    stored = dict(gone.template or {})
    template = template_from_dict(stored) if stored else Template.empty()
    rows = [r for r in gone.rows
            if not (r.action == vocab.STACK_DELETE and r.status == vocab.STACK_COMPLETE)]
    chosen, _ = prepare.choose_rows(rows, template, gone.stack.template_id,
                                    gone.stack.template_id)
    resources = {
        name: {"type": row.type, "physical_id": row.physical_id,
               "properties": dict(row.properties or {}),
               "attributes": dict(row.attributes or {}),
               "action": row.action, "status": row.status}
        for name, row in chosen.items() if row.physical_id is not None}
    kept = {row.id for row in chosen.values()}
    left = [{"name": r.name, "type": r.type, "physical_id": r.physical_id}
            for r in rows if r.id not in kept and r.physical_id is not None]
    parameters = stored.pop("parameter_values", {})
    return {"format": FORMAT, "name": gone.stack.name, "id": gone.stack.id,
            "template": stored, "parameters": parameters, "resources": resources,
            "left": left}


# Adopt -------------------------------------------------------------------------------


def read_data(text: str | bytes) -> dict[str, object]:
    """The abandon data, shape-checked (AdoptError)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AdoptError(f"not JSON: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("resources"), dict):
        raise AdoptError("must be a JSON object with a 'resources' mapping "
                         "(what 'sharectl stack abandon' prints)")
    if data.get("format", FORMAT) != FORMAT:
        raise AdoptError(f"format {data.get('format')!r} is not known (this one reads {FORMAT})")
    params = data.get("parameters", {})
    if not isinstance(params, dict):
        raise AdoptError("'parameters' must be a mapping")
    return data


def _facts(type_: str, observed: phys.Observed) -> dict[str, object]:
    """The properties the database tells of an existing physical resource,
    in the template's terms: what an adopt compares."""
    a = observed.attributes
    if type_ == vocab.SHARE:
        facts = {"size": a.get("size"), "proto": a.get("proto")}
        if observed.host:
            facts["backend"] = hosts.backend_of(observed.host)
        return facts
    if type_ in (vocab.SNAPSHOT, vocab.REPLICA):
        return {"share": a.get("share_id")}
    if type_ == vocab.GROUP_SNAPSHOT:
        return {"share_group": a.get("share_group_id")}
    return {}


def plan(db: Database, template: Template, data: Mapping[str, object]
         ) -> list[stack_keep.Adopted]:
    """The rows an adopt makes: each resource of ``template`` with its
    physical resource from ``data``, which must exist and be available,
    belong to no live stack, and have the properties the template gives
    it (a mismatch is refused: AdoptError names them all for the first
    resource that has one)."""
    entries = data.get("resources")
    if not isinstance(entries, dict):  # read_data checked it; a caller's own may not be
        raise AdoptError("the adopt data has no 'resources' mapping")
    out: list[stack_keep.Adopted] = []
    sent: dict[str, ResourceData] = {}
    seen: dict[tuple[str, str], str] = {}
    for name in template.dependency_order():
        defn = template.resources[name]
        entry = entries.get(name)
        where = f"resource {name!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("physical_id"), str):
            raise AdoptError(f"{where}: the adopt data has no physical_id for it")
        pid = entry["physical_id"]
        if entry.get("type", defn.type) != defn.type:
            raise AdoptError(f"{where}: the adopt data's is a {entry['type']}, "
                             f"the template's a {defn.type}")
        if (defn.type, pid) in seen:
            raise AdoptError(f"{where}: {defn.type} {pid} is adopted already as "
                             f"{seen[(defn.type, pid)]!r}")
        seen[(defn.type, pid)] = name
        observed = phys.observe(db, defn.type, pid)
        if observed.state == phys.GONE:
            raise AdoptError(f"{where}: {defn.type} {pid} does not exist")
        if observed.state != phys.OK:
            raise AdoptError(f"{where}: {defn.type} {pid} is {observed.status}, not available")
        try:
            props = resolve_properties(defn, {d: sent[d] for d in defn.requires if d in sent})
        except TemplateError as exc:
            raise AdoptError(str(exc))
        recorded = entry.get("properties") or {}
        if not isinstance(recorded, dict):
            raise AdoptError(f"{where}: 'properties' must be a mapping")
        current = {**recorded, **{k: v for k, v in _facts(defn.type, observed).items()
                                  if k in props or k in recorded}}
        changed = sorted(diff_properties(defn.type, current, props).changed)
        if changed:
            raise AdoptError(f"{where}: {defn.type} {pid} differs from the template: " + ", ".join(
                f"{p} is {current.get(p)!r}, the template says {props.get(p)!r}"
                for p in changed))
        sent[name] = ResourceData(name, None, pid, observed.attributes)
        out.append(stack_keep.Adopted(name, defn.type, pid, props, dict(observed.attributes),
                                      sorted(defn.requires)))
    taken = stack_keep.owners(db, [(r.type, r.physical_id) for r in out])
    if taken:
        (type_, pid), other = sorted(taken.items())[0]
        raise AdoptError(f"{type_} {pid} belongs to stack {other}")
    return out


def adopt(db: Database, name: str, template: Template, data: Mapping[str, object],
          disable_rollback: bool = False, timeout_seconds: int | None = None) -> models.Stack:
    """A COMPLETE stack named ``name`` over the resources ``data`` names.
    Raises AdoptError (``stack_keep.Refused`` too: a resource taken
    meanwhile), StackExists."""
    adopted = plan(db, template, data)
    try:
        return stack_keep.adopt(db, name, template.to_dict(), adopted, disable_rollback,
                                timeout_seconds)
    except stack_keep.Refused as exc:
        raise AdoptError(str(exc))
