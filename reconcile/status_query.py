"""Asking the drivers about a pass's batch of resources: each status
method's arguments (a batch's share instances read together), one batch
call per driver and method, and the columns a healthy answer sets."""

from __future__ import annotations

import collections
from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.db import models
from sharemgr.db import resources as db_res
from sharemgr.db.api import Change
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import driver_args, hosts, views
from sharemgr.manager.operations import Operations
from sharemgr.reconcile import answers, ask, rules
from sharemgr.reconcile.scan import Candidate

SECONDARY_STATES = (vocab.REPLICA_IN_SYNC, vocab.REPLICA_OUT_OF_SYNC, vocab.REPLICA_ERROR)


def verdicts(db: Database, operations: Operations, drivers: Mapping[str, ShareDriver],
             queries: list[tuple[Candidate, rules.Rule]]) -> dict[str, answers.Verdict]:
    """(healthy, reason, answer) per resource: one batch call per driver
    and method where the driver has the batch form, the single method
    for the resources it leaves out (or when it has none or fails)."""
    results: dict[str, answers.Verdict] = {}
    groups: dict[tuple[str, str], dict[str, tuple[object, ...]]] = collections.defaultdict(dict)
    args = status_args(db, operations, [c for c, _ in queries])
    for cand, rule in queries:
        given = args[cand.id]
        if isinstance(given, Exception):
            results[cand.id] = (False, f"{rule.method} raised {given!r}", {})
        else:
            assert rule.method is not None, "a query rule names its method"
            groups[(hosts.backend_of(cand.host), rule.method)][cand.id] = given
    for (backend, method), items in groups.items():
        for ident, answer in ask.ask(drivers[backend], method, items).items():
            results[ident] = answers.verdict(method, answer)
    return results


def _share_parts(db: Database, cands: list[Candidate]) -> dict[str, tuple[object, ...]]:
    """The status arguments of the batch's share instances and replicas,
    their shares and servers read in one query each (the other kinds are
    read one by one: few of them get stuck)."""
    insts = [c.row for c in cands if c.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA)]
    if not insts:
        return {}
    shares = db_res.rows_by_id(db, models.Share, {i.share_id for i in insts},
                               include_deleted=True)
    servers = db_res.rows_by_id(db, models.ShareServer,
                                {i.share_server_id for i in insts}, include_deleted=True)
    parts: dict[str, tuple[object, ...]] = {}
    for inst in insts:
        share = shares.get(inst.share_id)
        if share is None:
            continue  # the single path reports it as the status call raising
        server = servers.get(inst.share_server_id)
        parts[inst.id] = (views.share(inst, share), views.server(server) if server else None)
    return parts


def status_args(db: Database, operations: Operations, cands: list[Candidate]
                ) -> dict[str, tuple[object, ...] | Exception]:
    """The status method's arguments of each resource, by id (the
    exception when they cannot be read)."""
    parts: dict[str, tuple[object, ...] | Exception] = dict(_share_parts(db, cands))
    for cand in cands:
        if cand.id not in parts:
            try:
                parts[cand.id] = _status_args(operations, cand)
            except Exception as exc:
                parts[cand.id] = exc
    return parts


def _status_args(ops: Operations, cand: Candidate) -> tuple[object, ...]:
    if cand.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
        return driver_args.share_parts(ops.db, cand.row)
    if cand.rtype == vocab.SNAPSHOT_INSTANCE:
        return driver_args.snapshot_parts(ops.db, cand.row)
    if cand.rtype == vocab.SHARE_GROUP:
        return views.group(cand.row), driver_args.server_dict(ops.db, cand.row.share_server_id)
    return driver_args.group_snapshot_parts(ops.db, cand.row)


def healthy_values(cand: Candidate, answer: Mapping[str, object]
                   ) -> tuple[dict[str, object], list[Change]]:
    """The columns a healthy answer sets; ``Unusable`` when the answer cannot
    be recorded (the error outcome, not a crash that leaves the resource
    transient for every later pass too)."""
    values: dict[str, object] = {}
    extra: list[Change] = []
    if cand.rtype in (vocab.SHARE_INSTANCE, vocab.REPLICA):
        if answer.get("export_locations") is not None:
            values["export_locations"] = answers.exports_of(answer["export_locations"])
        if cand.rtype == vocab.REPLICA:
            # A secondary being created is never the active replica (that
            # takes a promotion); anything else is out of sync until proven.
            state = answer.get("replica_state") or vocab.REPLICA_IN_SYNC
            values["replica_state"] = state if state in SECONDARY_STATES \
                else vocab.REPLICA_OUT_OF_SYNC
        if cand.status in (vocab.EXTENDING, vocab.SHRINKING):
            # The backend's size is the truth, whichever way the resize
            # went; without it the database cannot be made to match.
            extra.append((models.Share, cand.row.share_id, {},
                          {"size": answers.size_of(answer)}))
    if cand.rtype == vocab.SNAPSHOT_INSTANCE:
        values["progress"] = "100%"  # as a completed create records it
    return values, extra
