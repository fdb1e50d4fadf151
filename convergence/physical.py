"""The physical resources behind stack resources.

A stack resource row's ``physical_id`` names a share (the logical share; its
primary instance is what the driver sees), a snapshot, a replica (a share
instance), a share server, a share group or a group snapshot. What each kind
is, how it is observed and what creating or deleting one writes are declared
once, in ``manager/kinds.py`` and ``manager/plans.py``, for users' requests and
stacks alike. This module adds what only stacks need: where a new resource
goes (:func:`target_host`, :class:`Placement`), the plans for a template's
properties (:func:`plan_create`, :func:`plan_update`, :func:`plan_delete`) and
the physical names. A plan that cannot be carried out raises
:class:`CheckError` (``plans.Refused``), which fails the node with its message.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.db.engine import Database
from sharemgr.manager import access, delete_plans, hosts, kinds, plans
from sharemgr.manager.kinds import BUSY, ERROR, GONE, OK, Observed, observe, observe_rows
from sharemgr.manager.plans import Change, Op, Plan

__all__ = ["BUSY", "ERROR", "GONE", "OK", "Observed", "Op", "Plan", "observe", "observe_rows"]

ANY_HOST = "*"  # "*@backend": any engine that serves the backend

CheckError = plans.Refused


@dataclass(frozen=True)
class Placement:
    """Where this engine can put new physical resources."""

    host: str  # the engine's host name
    backends: Mapping[str, bool]  # backend -> driver_handles_share_servers

    @property
    def default_backend(self) -> str | None:
        return next(iter(self.backends), None)

    def serves(self, target: str | None) -> bool:
        """Whether this engine can act on ``target`` ('host@backend',
        '*@backend' or None: any engine — one without backends fails a node
        that needs one, rather than passing it around)."""
        if target is None:
            return True
        host, _, backend = hosts.host_of(target).partition("@")
        return backend in self.backends and host in (ANY_HOST, self.host)

    def concrete(self, target: str | None) -> str:
        if target is None:
            backend = self.default_backend
            if backend is None:
                raise CheckError("this engine serves no backend")
            return f"{self.host}@{backend}"
        host, _, backend = target.partition("@")
        return f"{self.host}@{backend}" if host == ANY_HOST else target


# Placement ---------------------------------------------------------------------------------


def _parent_host(db: Database, type_: str, ident: str | None, what: str) -> str:
    host = kinds.observe(db, type_, ident).host
    if host is None:
        raise CheckError(f"{what} {ident} does not exist")
    return host


def target_host(db: Database, type_: str, props: Mapping[str, Any]) -> str | None:
    """Where a new physical resource with ``props`` goes: its parent's
    'host@backend' (a snapshot, replica or group snapshot lives with its
    share or group; a share made from a snapshot, in a group or on a server
    with that one), else '*@backend' for the ``backend`` property, else None
    (the default backend of whichever engine runs the check)."""
    parent = {
        vocab.SNAPSHOT: (vocab.SHARE, props.get("share"), "share"),
        vocab.REPLICA: (vocab.SHARE, props.get("share"), "share"),
        vocab.GROUP_SNAPSHOT: (vocab.SHARE_GROUP, props.get("share_group"), "share group"),
    }.get(type_)
    if type_ == vocab.SHARE:
        for prop, ptype, what in (("snapshot", vocab.SNAPSHOT, "snapshot"),
                                  ("share_group", vocab.SHARE_GROUP, "share group"),
                                  ("share_server", vocab.SHARE_SERVER, "share server")):
            if props.get(prop):
                parent = (ptype, props[prop], what)
                break
    if parent is not None:
        ptype, ident, what = parent
        host = _parent_host(db, ptype, ident, what)
        backend = props.get("backend")
        if backend and hosts.backend_of(host) != backend:
            raise CheckError(f"backend {backend!r} differs from the {what}'s ({host})")
        return host
    backend = props.get("backend")
    return f"{ANY_HOST}@{backend}" if backend else None


# Plans ---------------------------------------------------------------------------------------


def plan_create(db: Database, type_: str, props: Mapping[str, Any], name: str,
                placement: Placement) -> Plan:
    """Rows of a new physical resource named ``name`` in its creating status
    and the operation that creates it on the backend."""
    host = placement.concrete(target_host(db, type_, props))
    dhss = placement.backends.get(hosts.backend_of(host), False)
    if type_ == vocab.SHARE:
        plan = plans.create_share(db, host, dhss, props["size"], props["proto"], name,
                                  props.get("snapshot"), props.get("share_server"),
                                  props.get("share_group"))
        if props.get("access_rules"):
            # Queued with the share; its create applies them once it is available.
            share, inst = plan.add[0], plan.add[1]
            assert isinstance(share, models.Share) and isinstance(inst, models.ShareInstance)
            inst.access_rules_status = vocab.ACCESS_RULES_SYNCING
            # Held to what the backend can serve, as a change of them is.
            wanted = access.limited(db, host, props["proto"],
                                    access.check_list(props["access_rules"]))
            plan = plan.and_then(add=[access.new_rule(share.id, spec) for spec in wanted])
        return plan
    if type_ == vocab.SNAPSHOT:
        return plans.create_snapshot(db, props["share"], name)
    if type_ == vocab.REPLICA:
        return plans.create_replica(db, props["share"], host, dhss)
    if type_ == vocab.SHARE_SERVER:
        return plans.create_share_server(host, dhss)
    if type_ == vocab.SHARE_GROUP:
        return plans.create_share_group(db, host, name)
    return plans.create_group_snapshot(db, props["share_group"], name)


def plan_update(db: Database, type_: str, physical_id: str | None, changes: Mapping[str, Any],
                name: str | None) -> Plan:
    """Apply in-place changes: ``name`` is a database change (as Manila's
    share update; ``name`` is the new physical name), ``size`` extends or
    shrinks the share to the target unless it has that size already (a
    resize cut short by a crash and settled by reconciliation)."""
    if physical_id is None:  # an update is decided on a resource that exists
        raise CheckError(f"no {type_} to update")
    plan = Plan(physical_id)
    if "size" in changes and type_ == vocab.SHARE:
        plan = plans.resize_share(db, physical_id, int(changes["size"]))
    if "access_rules" in changes and type_ == vocab.SHARE:
        # With a resize, the resize applies them when it is done.
        rules = access.converge(db, physical_id, access.check_list(changes["access_rules"] or []))
        plan = plan.and_then(add=rules.add, changes=rules.changes, op=rules.op)
    if "name" in changes and type_ in kinds.NAMED_MODEL:
        plan = plan.and_then(changes=[(kinds.NAMED_MODEL[type_], physical_id, {},
                                       {"name": name})])
    return plan


def plan_delete(db: Database, type_: str, physical_id: str | None,
                observed: Observed | None = None) -> Plan | None:
    """The deleting status and the delete operation; None if it is gone.
    ``observed``: the resource as the caller just observed it (not read
    again)."""
    if physical_id is None or (observed or observe(db, type_, physical_id)).state == GONE:
        return None
    return delete_plans.delete(db, type_, physical_id)


def observe_for_delete(db: Database, type_: str, physical_id: str | None
                       ) -> tuple[Observed, Plan | None]:
    """The resource as observed now and its delete's plan (None: gone), in
    one read for a share (``delete_plans.delete_seen``); raises CheckError as
    :func:`plan_delete` does."""
    if physical_id is None:
        return Observed(GONE), None
    return delete_plans.delete_seen(db, type_, physical_id)


def observe_after(db: Database, type_: str, physical_id: str | None, plan: Plan,
                  written: Sequence[Change] | None) -> Observed:
    """The physical resource once ``plan``'s operation succeeded. A
    create's rows are in hand: its new rows, with the changes the operation
    wrote under the resource's lock (``written``, what ``perform``
    returned) applied, are what a read would return now, so none is made.
    Anything else is read."""
    if plan.add and written is not None:
        seen = observe_rows(type_, _as_written(plan.add, written))
        if seen is not None:
            return seen
    return observe(db, type_, physical_id)


@functools.cache
def _columns(model: type[models.Base]) -> tuple[str, ...]:
    return tuple(c.key for c in model.__table__.columns)


def _as_written(add: Sequence[models.Base], written: Sequence[Change]
                ) -> dict[type, SimpleNamespace]:
    """The new rows by model, each with ``written``'s values for it; a model
    with more than one new row is left out (which one is meant?)."""
    rows: dict[type, SimpleNamespace | None] = {}
    for row in add:
        model = type(row)
        # A new object's values are in its __dict__ (an unset column: None, as
        # its attribute would say), read without the ORM's attribute machinery.
        values = {key: row.__dict__.get(key) for key in _columns(model)}
        for m, ident, _expected, changed in written:
            if m is model and ident == values.get("id"):
                values.update(changed)
        rows[model] = None if model in rows else SimpleNamespace(**values)
    return {m: r for m, r in rows.items() if r is not None}


def new_name(stack_name: str, resource_name: str, props: Mapping[str, Any]) -> str:
    """The physical name: ``<stack>-<resource>-<suffix>``, as Heat names
    physical resources, so an object on the backend tells which stack made
    it; the suffix is the ``name`` property when given (so a rename keeps
    the prefix that tells which stack and resource an object belongs to),
    else random."""
    return f"{stack_name}-{resource_name}-{props.get('name') or secrets.token_hex(4)}"
