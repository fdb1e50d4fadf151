"""What starting, completing and cancelling a share's migration writes, with
the checks that refuse it first (doc/migration.rst).

A migration moves a share's instance to another backend: the source instance
is ``migrating`` and a new destination instance on the destination host is
``migrating_to`` until the migration completes (the destination becomes the
share's instance, the source goes) or ends otherwise (the destination goes,
the source is ``available`` again). Both carry the migration's task_state,
Manila's, which keeps every other workflow off them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sharemgr.common import vocab
from sharemgr.db import access as db_access
from sharemgr.db import api as db_api
from sharemgr.db import capabilities as db_capabilities
from sharemgr.db import models, quiet
from sharemgr.db.engine import Database
from sharemgr.manager import capabilities, hosts
from sharemgr.manager.plans import Op, Plan, Refused, need, quiet_share, room, share

# What the source backend's report may declare it keeps while it migrates a
# share (``migration_support``: flag → bool); a flag it does not declare
# true is refused up front. A backend that declares nothing is asked at the
# start (``migration_check_compatibility``).
SUPPORT_KEY = "migration_support"
FLAGS = ("writable", "nondisruptive", "preserve_metadata", "preserve_snapshots")
# What the engine's copy keeps (rsync: modes, owners, times, xattrs).
HOST_ASSISTED_KEEPS = ("preserve_metadata",)
CANCELLABLE = (vocab.MIGRATION_DRIVER_IN_PROGRESS, vocab.MIGRATION_DRIVER_PHASE1_DONE,
               vocab.DATA_COPYING_IN_PROGRESS, vocab.DATA_COPYING_COMPLETED)
# Phase 1 done: the driver's copy, or the engine's (checked equal).
COPIED = (vocab.MIGRATION_DRIVER_PHASE1_DONE, vocab.DATA_COPYING_COMPLETED)


@dataclass(frozen=True)
class Request:
    """A ``share migration start`` as asked."""

    share_id: str
    destination: str  # 'host@backend[#pool]'
    writable: bool = False
    nondisruptive: bool = False
    preserve_metadata: bool = False
    preserve_snapshots: bool = False
    force_host_assisted: bool = False  # the engine copies, not the driver
    complete: bool = False  # completed once copied (a stack's update), not by a user

    def flags(self) -> dict[str, bool]:
        return {flag: bool(getattr(self, flag)) for flag in FLAGS}


def destination_of(db: Database, share_id: str) -> models.ShareInstance | None:
    """The share's destination instance while it migrates."""
    found = db_api.query(db, models.ShareInstance,
                         {"share_id": share_id, "status": vocab.MIGRATING_TO})
    return found[0] if found else None


def _destination(db: Database, source: models.ShareInstance, given: str) -> str:
    """The destination 'host@backend[#pool]', checked: a backend that
    reports (an engine serves it), not the share's own place."""
    host, _, pool = given.partition("#")
    name, at, backend = host.partition("@")
    if not (name and at and backend) or "@" in backend or (("#" in given) and not pool):
        raise Refused(f"invalid destination {given!r}: use host@backend or host@backend#pool")
    if capabilities.report(db, host) is None:
        raise Refused(f"unknown destination {given!r}: no engine serves {host} (it has "
                      "never reported; 'sharectl backend list' shows those that have)")
    same_pool = capabilities.pool_of(source.host) == (pool or None)
    if hosts.host_of(source.host) == host and (same_pool or not pool):
        raise Refused(f"share {source.share_id} is on {source.host} already")
    return given


def host_assisted_refusal(flags: Mapping[str, bool]) -> str | None:
    """Why the engine's own copy cannot do what the flags ask, or None: the
    source is read-only while it copies, clients are moved to a new export,
    and snapshots are not copied (Manila's host-assisted migration keeps
    none of these either)."""
    kept = [f for f, asked in flags.items() if asked and f not in HOST_ASSISTED_KEEPS]
    if not kept:
        return None
    return ("host-assisted migration (the engine's copy) cannot keep the share "
            f"{', '.join(f.replace('_', ' ') for f in kept)}: leave out "
            f"{', '.join('--' + f.replace('_', '-') for f in kept)}")


def same_host(source: str, dest: str) -> bool:
    """Whether both places are backends of one host (the engine's copy
    needs both shares' data on the host that copies)."""
    return source.partition("@")[0] == dest.partition("@")[0]


def _supported(db: Database, source: models.ShareInstance, req: Request) -> None:
    report = capabilities.report(db, source.host)
    declared = report.stats.get(SUPPORT_KEY) if report is not None else None
    declared = declared if isinstance(declared, Mapping) else None
    by_driver = not req.force_host_assisted and (
        declared is None or bool(declared.get("driver_assisted", True)))
    if by_driver and declared is not None:
        for flag, wanted in req.flags().items():
            if wanted and not declared.get(flag):
                raise Refused(f"backend {hosts.host_of(source.host)!r} cannot migrate a "
                              f"share with --{flag.replace('_', '-')} ({SUPPORT_KEY} in its "
                              "last report)")
    if by_driver:
        return  # the driver is asked at the start; the engine's copy is the fallback
    why = host_assisted_refusal(req.flags())
    if why:
        raise Refused(why if req.force_host_assisted else
                      f"backend {hosts.host_of(source.host)!r} does not move shares itself "
                      f"({SUPPORT_KEY} in its last report), and {why}")
    if not same_host(source.host, req.destination):
        raise Refused(f"host-assisted migration copies on one host: {req.destination} is not "
                      f"a backend of {source.host.partition('@')[0]!r}")


def start(db: Database, req: Request) -> Plan:
    """The source instance ``migrating`` and a new destination instance
    ``migrating_to`` on the destination, both ``migration_starting``, and
    the source host's request that starts the driver's migration."""
    row, source = share(db, req.share_id)
    what = f"share {req.share_id}"
    need(source.status, (vocab.AVAILABLE,), what, "migrate")
    if source.task_state in vocab.BUSY_TASK_STATES:
        raise Refused(f"cannot migrate {what}: its task_state is {source.task_state!r}")
    others = [i for i in db_api.query(db, models.ShareInstance, {"share_id": row.id})
              if i.id != source.id]
    if others:
        raise Refused(f"cannot migrate {what}: it has {len(others)} replica(s); delete them "
                      "first")
    if source.share_server_id:
        raise Refused(f"cannot migrate {what}: it lives on share server "
                      f"{source.share_server_id} (backends that handle share servers are "
                      "not supported)")
    if row.share_group_id:
        raise Refused(f"cannot migrate {what}: it is in share group {row.share_group_id}")
    snapshots = db_api.query(db, models.ShareSnapshot, {"share_id": row.id})
    if snapshots and not req.preserve_snapshots:
        raise Refused(f"cannot migrate {what}: it has {len(snapshots)} snapshot(s); delete "
                      "them, or ask for --preserve-snapshots")
    rules = db_access.rules_of(db, row.id)
    if any(r.state in vocab.ACCESS_IN_FLIGHT for r in rules):
        raise Refused(f"cannot migrate {what}: its access rules are being applied; try "
                      "again when they are")
    _supported(db, source, req)
    dest_host = _destination(db, source, req.destination)
    caps = capabilities.report(db, dest_host)
    if caps is not None and not caps.serves(row.share_proto or ""):
        raise Refused(f"cannot migrate {what} ({row.share_proto}) to {dest_host}: backend "
                      f"{caps.backend!r} serves {', '.join(caps.protocols())}")
    dest_host, claim = room(db, caps, dest_host, row.size,
                            f"migrate {what} ({row.size} GiB) to {dest_host}")
    dest = models.ShareInstance(id=models.new_id(), share_id=row.id, host=dest_host,
                                status=vocab.MIGRATING_TO,
                                task_state=vocab.MIGRATION_STARTING, export_locations=[])
    plan = Plan(row.id, [dest], [
        (models.ShareInstance, source.id,
         {"status": vocab.AVAILABLE, "task_state": source.task_state},
         {"status": vocab.MIGRATING, "task_state": vocab.MIGRATION_STARTING, "progress": "0"}),
    ], Op(vocab.SHARE_INSTANCE, source.id, vocab.ACTION_MIGRATION_START, source.host,
          {"destination": dest.id, **req.flags(),
           **{k: True for k in ("force_host_assisted", "complete") if getattr(req, k)}}),
        row, claims=[claim] if claim else [])
    # Nothing else of the family at work meanwhile (a snapshot being made),
    # and the share still the size claimed at the destination.
    return quiet_share(db, plan, row.id, quiet.Quiet(
        models.ShareSnapshotInstance, {"share_instance_id": source.id},
        vocab.TRANSIENT_STATUSES,
        f"cannot migrate {what}: it has a snapshot that is {{statuses}}; try again when it "
        "is done"), expect={"size": row.size})


def destination_for(db: Database, source_host: str, backend: str) -> str:
    """Where a stack moves a share whose template names ``backend``: that
    backend on the share's own host when the host serves it (the engine
    can copy there), else on a host that does."""
    here = f"{source_host.partition('@')[0]}@{backend}"
    serving = sorted(hosts.host_of(r.host) for r in db_capabilities.all_stats(db)
                     if hosts.backend_of(r.host) == backend)
    return here if here in serving or not serving else serving[0]


def refusal(db: Database, req: Request) -> str | None:
    """Why ``start`` would refuse ``req`` now, or None (it writes nothing):
    a stack replaces a share it cannot move, as before migrations."""
    try:
        start(db, req)
    except Refused as exc:
        return str(exc)
    return None


def _migrating(db: Database, share_id: str, states: tuple[str, ...], doing: str
               ) -> tuple[models.Share, models.ShareInstance, models.ShareInstance]:
    row, source = share(db, share_id)
    dest = destination_of(db, row.id)
    if source.status != vocab.MIGRATING or dest is None:
        raise Refused(f"cannot {doing} the migration of share {share_id}: it is not "
                      f"migrating (status {source.status!r}, task_state "
                      f"{source.task_state!r})")
    if source.task_state not in states:
        raise Refused(f"cannot {doing} the migration of share {share_id}: its task_state is "
                      f"{source.task_state!r} (needs {' or '.join(states)})")
    return row, source, dest


def _step(db: Database, share_id: str, states: tuple[str, ...], doing: str, task_state: str,
          action: str) -> Plan:
    row, source, dest = _migrating(db, share_id, states, doing)
    return Plan(row.id, [], [
        (models.ShareInstance, source.id,
         {"status": vocab.MIGRATING, "task_state": source.task_state},
         {"task_state": task_state}),
    ], Op(vocab.SHARE_INSTANCE, source.id, action, source.host, {"destination": dest.id}), row)


def complete(db: Database, share_id: str) -> Plan:
    """Phase 2, once the driver's copy is done: the source host's request
    that switches the share to the destination."""
    return _step(db, share_id, COPIED, "complete",
                 vocab.MIGRATION_COMPLETING, vocab.ACTION_MIGRATION_COMPLETE)


def cancel(db: Database, share_id: str) -> Plan:
    """Stop a started migration: the destination goes, the source stays."""
    return _step(db, share_id, CANCELLABLE, "cancel", vocab.MIGRATION_CANCEL_IN_PROGRESS,
                 vocab.ACTION_MIGRATION_CANCEL)


# What 'share migration show' reads: the share's newest migration.
_WAITS = {vocab.MIGRATION_STARTING, vocab.MIGRATION_DRIVER_STARTING,
          vocab.MIGRATION_DRIVER_IN_PROGRESS, vocab.MIGRATION_IN_PROGRESS,
          vocab.DATA_COPYING_STARTING, vocab.DATA_COPYING_IN_PROGRESS}


def shown(db: Database, share_id: str) -> dict[str, object]:
    """The share's newest migration: its task_state, progress, and the
    source and destination instances and hosts (``Refused`` for a share
    that was never migrated). Read only."""
    row = db_api.get(db, models.Share, share_id)
    if row is None:
        raise Refused(f"no share with id {share_id!r}")
    # Each migration gives its source a task_state and makes its
    # destination: the newest instance with one is the newest destination.
    moved = [i for i in db_api.query(db, models.ShareInstance, {"share_id": row.id},
                                     include_deleted=True) if i.task_state]
    if len(moved) < 2:
        raise Refused(f"share {share_id} has never been migrated")
    dest = moved[-1]
    source = _source_of(moved[:-1])
    task = source.task_state  # the source's is the migration's (the plans move it)
    progress = source.progress if source.status == vocab.MIGRATING else (
        "100" if task == vocab.MIGRATION_SUCCESS else None)
    return {"share_id": row.id, "task_state": task,
            "total_progress": f"{progress}%" if progress is not None else None,
            "source_host": source.host, "source_instance_id": source.id,
            "destination_host": dest.host, "destination_instance_id": dest.id}


def _source_of(older: list[models.ShareInstance]) -> models.ShareInstance:
    """The newest migration's source among the instances made before its
    destination (oldest first): the one still served (migrating, or
    available after a cancel or an error), else, once it completed, the
    newest one that migration deleted. Not merely the one before the
    destination: a cancelled migration's destination may be."""
    live = [i for i in older if i.status in (vocab.MIGRATING, vocab.AVAILABLE)]
    if live:
        return live[-1]
    done = [i for i in older if i.task_state == vocab.MIGRATION_SUCCESS]
    return (done or older)[-1]


def waits(task_state: object) -> bool:
    """Whether ``migration start --wait`` still waits on this task_state."""
    return task_state in _WAITS
