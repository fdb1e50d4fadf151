"""What starting an operation writes, planned once for every caller.

A :class:`Plan` is the new rows in their transient status, the conditional
updates of existing rows, and the :class:`Op` that finishes the job on the
backend. A user's request (``intake``) writes it with a pending request row; a
stack (``convergence.physical``) writes it with a running one and carries the
op out itself. Either way the checks are these: a plan that cannot be carried
out raises :class:`Refused` with the reason, before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import capacity as db_capacity
from sharemgr.db import models, quiet, resources
from sharemgr.db.engine import Database
from sharemgr.manager import capabilities, hosts, kinds, leases, operation_table

Change = db_api.Change
T = TypeVar("T", bound=models.HasTable)


class Refused(Exception):
    """The operation cannot be done as asked; nothing was written."""


@dataclass(frozen=True)
class Reread:
    """An operation's row and what its read brought with it (a share instance's
    share), read under the resource's lock by its holder; ``release`` lets
    that lock go (the call's ``run`` does, once the outcome is written).
    ``defer``: a success is written by the holder, not ``run``, which hands
    it back unwritten with the lock held (``late_outcome.py``)."""

    row: object
    parent: object
    release: Callable[[], object]
    defer: bool = False


@dataclass(frozen=True)
class Op:
    """One share operation: the typed form of a request row, and what
    ``Operations.perform`` carries out."""

    kind: str  # a kinds.KINDS name
    ident: str
    action: str  # vocab.ACTION_*
    host: str | None = None  # 'host@backend' that serves it
    args: Mapping[str, Any] = field(default_factory=dict)
    request_id: int | None = None
    # The lease its request row was written with (``Operations.default_lease``,
    # a stack's begin): the call keeps it when its method's lease is the default.
    lease: leases.Terms | None = None
    # The fencing token its row was inserted with, taken already, in the
    # transaction that wrote its request (a stack's begin, ``insert_taken``):
    # the call re-reads the row but takes it no more.
    taken: int | None = None
    # Its row re-read under its lock, which the caller holds for it (a stack's
    # batch: ``Operations.reread_held``): the call takes neither again.
    reread: Reread | None = None

    @classmethod
    def of_request(cls, req: models.Request) -> Op:
        return cls(req.resource_type, req.resource_id, req.action, req.host,
                   dict(req.args or {}), req.id)

    def request(self, extra: Mapping[str, Any] | None = None) -> db_api.NewRequest:
        """The request row's values (requests go to 'host@backend', pools
        stripped, so claims match the host exactly)."""
        return {"resource_type": self.kind, "resource_id": self.ident, "action": self.action,
                "host": hosts.host_of(self.host) if self.host else None,
                "args": {**self.args, **(extra or {})}}


# The token of a row inserted taken (a row never taken has 0).
FIRST_TOKEN = 1


def insert_taken(add: Sequence[models.Base], op: Op | None) -> int | None:
    """Mark the row ``op`` is about, if ``add`` inserts it and it is fenced,
    as taken (``FIRST_TOKEN``), before a stack's begin writes it with the
    request: nobody can have held a row that did not exist, so the call
    re-reads it without taking it again (``Op.taken``). The token, or None."""
    row = None if op is None else next(
        (r for r in add if getattr(r, "id", None) == op.ident and hasattr(r, "fence")), None)
    if row is None:
        return None
    row.fence = FIRST_TOKEN
    return FIRST_TOKEN


@dataclass(frozen=True)
class Plan:
    """What starting an operation writes, as its planner decided: passed on
    as it is (a planner that builds on another's plan makes a new one,
    ``and_then``)."""

    physical_id: str | None = None  # the id users and stacks know it by
    add: Sequence[models.Base] = ()
    changes: Sequence[Change] = ()
    op: Op | None = None
    row: Any = None  # the resource users know (share, snapshot, ...) as planned
    # Pool capacity its rows take, claimed in the transaction that writes it.
    claims: Sequence[db_capacity.Claim] = ()
    # No related row busy: checked now and again after the changes, in the
    # transaction that writes them (db/quiet.py).
    conditions: Sequence[quiet.Condition] = ()

    def __post_init__(self) -> None:
        # Tuples: a plan handed on cannot be changed behind its planner's back.
        for name in ("add", "changes", "claims", "conditions"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.row is None and self.add:
            object.__setattr__(self, "row", self.add[0])  # a create: its first new row

    def and_then(self, add: Sequence[models.Base] = (), changes: Sequence[Change] = (),
                 op: Op | None = None, claims: Sequence[db_capacity.Claim] = (),
                 conditions: Sequence[quiet.Condition] = ()) -> Plan:
        """This plan with more rows, changes, claims and conditions after its
        own, and ``op`` if it has none."""
        more = dataclasses.replace(
            self, add=(*self.add, *add), changes=(*self.changes, *changes),
            op=self.op or op, claims=(*self.claims, *claims),
            conditions=(*self.conditions, *conditions))
        object.__setattr__(more, "row", self.row)  # its resource is still this plan's
        return more


def need(status: str, allowed: tuple[str, ...], what: str, doing: str, hint: str = "") -> None:
    """Refused unless ``status`` is one of ``allowed``; ``hint``: the way out."""
    if status not in allowed:
        raise Refused(f"cannot {doing} {what}: its status is {status!r} "
                      f"(needs {' or '.join(allowed)}{'; ' + hint if hint else ''})")


def quiet_share(db: Database, plan: Plan, share_id: str, *conditions: quiet.Condition,
                expect: dict[str, object] | None = None) -> Plan:
    """``plan`` as one of the share's family (db/quiet.py): its changes end
    with the share's anchor (written only if the share's row still has the
    values ``expect`` names), and ``conditions`` are checked now (Refused)
    and again in the writing transaction."""
    try:
        quiet.check(db, conditions)
    except quiet.Busy as exc:
        raise Refused(str(exc))
    return plan.and_then(changes=[quiet.anchor(share_id, expect)], conditions=conditions)


def get(db: Database, model: type[T], ident: str | None, what: str) -> T:
    row: T | None = db_api.get(db, model, ident) if ident else None
    if row is None:
        raise Refused(f"no {what} with id {ident!r}")
    return row


def share(db: Database, share_id: str | None) -> tuple[models.Share, models.ShareInstance]:
    return share_of(db, get(db, models.Share, share_id, "share"))


def share_of(db: Database, row: models.Share, where: str = ""
             ) -> tuple[models.Share, models.ShareInstance]:
    """``row`` and its primary instance (``where`` says whose share it is in
    the refusal)."""
    inst = resources.primary_instance(db, row.id)
    if inst is None:
        raise Refused(f"share {row.id}{where} has no instance")
    return row, inst


def snapshot(db: Database, snapshot_id: str | None
             ) -> tuple[models.ShareSnapshot, models.ShareSnapshotInstance]:
    row = get(db, models.ShareSnapshot, snapshot_id, "snapshot")
    inst = resources.snapshot_instance_of(db, row.id)
    if inst is None:
        raise Refused(f"snapshot {snapshot_id} has no instance")
    return row, inst


def replica(db: Database, replica_id: str) -> models.ShareInstance:
    row = get(db, models.ShareInstance, replica_id, "replica")
    if not kinds.is_secondary(row):
        raise Refused(f"{replica_id} is the active instance of its share, "
                      "not a secondary replica")
    return row


def _no_dhss(host: str) -> Refused:
    return Refused(f"backend {hosts.backend_of(host)!r} does not handle share servers "
                   "(driver_handles_share_servers = False)")


# Capabilities (manager/capabilities.py) -----------------------------------------------
# Checked against the backend's last get_share_stats() report (one read by key);
# a backend that reported nothing, or leaves a capability or pools out, is
# served as before.


def _can(caps: capabilities.Report | None, key: str, doing: str) -> None:
    if caps is not None and not caps.supports(key):
        raise Refused(f"cannot {doing}: backend {caps.backend!r} does not support it "
                      f"({key} is {caps.stats[key]!r} in its last report)")


def room(db: Database, caps: capabilities.Report | None, host: str, size: int,
          doing: str) -> tuple[str, db_capacity.Claim | None]:
    """``host`` with the pool that takes ``size`` GiB more — its own pool
    when it names one, else the pool with the most room that fits (Manila's
    'host@backend#pool') — and the claim the plan's transaction makes
    (db/capacity.py). A pool's room is what its report and the reserve,
    over-subscription and placements since the report leave. Unchanged,
    and no claim, when the backend reports no pools."""
    if caps is None or not caps.pools:
        return host, None
    backend_host = hosts.host_of(host)
    pools = caps.rooms(db)
    rooms = {name: pool.room for name, pool in pools.items()}
    name = capabilities.pool_of(host)
    if name is not None:
        if name not in rooms:  # a pool no longer reported: as before
            return host, None
        left = rooms[name]
        if left is not None and size > left:
            raise Refused(f"cannot {doing}: {size} GiB is more than the {max(left, 0):g} GiB "
                          f"free in pool {host!r}")
        return host, db_capacity.Claim(backend_host, pools[name].limits, size)
    fits = [n for n in sorted(rooms) if (room := rooms[n]) is None or size <= room]
    if not fits:
        # Every pool has a room here: one without a limit (None) fits anything.
        most = max(rooms, key=lambda n: rooms[n] or 0.0)
        raise Refused(f"cannot {doing}: {size} GiB is more than the free capacity of "
                      f"every pool of backend {caps.backend!r}; the most free is "
                      f"{max(rooms[most] or 0.0, 0):g} GiB, in pool {most!r}")
    best = max(fits, key=lambda n: (rooms[n] is None, rooms[n] or 0.0))
    return f"{backend_host}#{best}", db_capacity.Claim(backend_host, pools[best].limits, size)


# Creates ------------------------------------------------------------------------------


def create_share(db: Database, host: str, dhss: bool, size: int, proto: str,
                 name: str | None = None, snapshot_id: str | None = None,
                 share_server_id: str | None = None, share_group_id: str | None = None,
                 project_id: str | None = None) -> Plan:
    status = vocab.CREATING
    if snapshot_id:
        snap, snap_inst = snapshot(db, snapshot_id)
        need(snap_inst.status, (vocab.AVAILABLE,), f"snapshot {snapshot_id}",
             "create a share from")
        if size < snap.size:
            raise Refused(f"size {size} is smaller than snapshot {snapshot_id} ({snap.size})")
        source = kinds.SNAPSHOT_INSTANCE.host_of(db, snap_inst)
        if source is None:
            raise Refused(f"snapshot {snapshot_id} is on no backend: its share is gone")
        if hosts.host_of(host) != hosts.host_of(source):
            raise Refused("a share from a snapshot must be on the snapshot's backend")
        status = vocab.CREATING_FROM_SNAPSHOT
    if dhss:
        if not share_server_id:
            raise Refused(f"backend {hosts.backend_of(host)!r} handles share servers: "
                          "the share needs a share server (sharectl: --share-server ID; "
                          "a stack: the share_server property)")
        server = get(db, models.ShareServer, share_server_id, "share server")
        need(server.status, (vocab.ACTIVE,), f"share server {share_server_id}",
             "place a share on")
        if server.host != hosts.host_of(host):
            raise Refused(f"share server {share_server_id} is on {server.host}, not {host}")
    elif share_server_id:
        raise _no_dhss(host)
    if share_group_id:
        group = get(db, models.ShareGroup, share_group_id, "share group")
        need(group.status, (vocab.AVAILABLE,), f"share group {share_group_id}",
             "add a share to")
        if group.host != hosts.host_of(host):
            raise Refused(f"share group {share_group_id} is on {group.host}")
    caps = capabilities.report(db, host)
    if caps is not None and not caps.serves(proto):
        raise Refused(f"cannot create a {proto} share: backend {caps.backend!r} serves "
                      f"{', '.join(caps.protocols())} (storage_protocol in its last report)")
    if snapshot_id:
        _can(caps, capabilities.FROM_SNAPSHOT, f"create a share from snapshot {snapshot_id}")
        if source is not None and capabilities.pool_of(source) \
                and not capabilities.pool_of(host):
            host = source  # into the snapshot's pool, where its data is
    host, claim = room(db, caps, host, size, f"create a share of {size} GiB")
    row = models.Share(id=models.new_id(), name=name, size=size, share_proto=proto,
                       project_id=project_id, snapshot_id=snapshot_id,
                       share_group_id=share_group_id)
    inst = models.ShareInstance(id=models.new_id(), share_id=row.id, host=host, status=status,
                                share_server_id=share_server_id, export_locations=[])
    return Plan(row.id, [row, inst], [],
                Op(vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE, host),
                claims=[claim] if claim else [])


def create_snapshot(db: Database, share_id: str, name: str | None = None) -> Plan:
    row, inst = share(db, share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "snapshot")
    _can(capabilities.report(db, inst.host), capabilities.SNAPSHOT, f"snapshot share {share_id}")
    snap = models.ShareSnapshot(id=models.new_id(), share_id=row.id, name=name, size=row.size,
                                project_id=row.project_id)
    snap_inst = models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=snap.id,
                                             share_instance_id=inst.id, status=vocab.CREATING)
    # The instance still available when written: no resize in progress;
    # the share still the size recorded: none began and ended meanwhile.
    return quiet_share(db, Plan(snap.id, [snap, snap_inst],
                                [(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE}, {})],
                                Op(vocab.SNAPSHOT_INSTANCE, snap_inst.id, vocab.ACTION_CREATE,
                                   inst.host)), row.id, expect={"size": row.size})


def create_replica(db: Database, share_id: str, host: str | None, dhss: bool) -> Plan:
    """A secondary replica on ``host`` (None: the share's own backend)."""
    row, inst = share(db, share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "replicate")
    if dhss:
        raise Refused("replicas on backends that handle share servers are not supported")
    host = host or inst.host
    caps = capabilities.report(db, host)
    _can(caps, capabilities.REPLICATION, f"replicate share {share_id}")
    _same_domain(db, share_id, inst.host, host, caps)
    host, claim = room(db, caps, host, row.size,
                        f"replicate share {share_id} ({row.size} GiB)")
    rep = models.ShareInstance(id=models.new_id(), share_id=row.id, host=host,
                               status=vocab.CREATING, replica_state=vocab.REPLICA_OUT_OF_SYNC,
                               export_locations=[])
    # The instance still available when written and the share the size
    # claimed (not resized meanwhile); the first replica makes it the active
    # replica.
    expected: dict[str, object] = {"status": vocab.AVAILABLE}
    values: dict[str, object] = {}
    if inst.replica_state is None:
        expected["replica_state"], values["replica_state"] = None, vocab.REPLICA_ACTIVE
    changes: list[Change] = [(models.ShareInstance, inst.id, expected, values)]
    return quiet_share(db, Plan(rep.id, [rep], changes,
                                Op(vocab.REPLICA, rep.id, vocab.ACTION_CREATE, host),
                                claims=[claim] if claim else []), row.id,
                       expect={"size": row.size})


def _same_domain(db: Database, share_id: str, here: str | None, there: str,
                 caps: capabilities.Report | None) -> None:
    """A replica on another backend only within a replication domain both
    report (Manila's rule): else the driver, which holds the active replica
    elsewhere, fails the create after it was accepted."""
    if here is None or hosts.host_of(here) == hosts.host_of(there):
        return
    mine = capabilities.report(db, here)
    domain = caps.stats.get("replication_domain") if caps is not None else None
    if not domain or mine is None or mine.stats.get("replication_domain") != domain:
        raise Refused(f"cannot replicate share {share_id} to {hosts.host_of(there)}: it is "
                      f"not in the replication domain of {hosts.host_of(here)} (both "
                      "backends must report the same replication_domain)")


def create_share_server(host: str, dhss: bool) -> Plan:
    if not dhss:
        raise _no_dhss(host)
    server = models.ShareServer(id=models.new_id(), host=host, status=vocab.CREATING,
                                backend_details={})
    return Plan(server.id, [server], [],
                Op(vocab.SHARE_SERVER, server.id, vocab.ACTION_CREATE, host))


def create_share_group(db: Database, host: str, name: str | None = None,
                       share_server_id: str | None = None) -> Plan:
    _can(capabilities.report(db, host), capabilities.GROUPS, "create a share group")
    if share_server_id:
        server = get(db, models.ShareServer, share_server_id, "share server")
        need(server.status, (vocab.ACTIVE,), f"share server {share_server_id}", "use")
    group = models.ShareGroup(id=models.new_id(), name=name, host=host, status=vocab.CREATING,
                              share_server_id=share_server_id)
    return Plan(group.id, [group], [],
                Op(vocab.SHARE_GROUP, group.id, vocab.ACTION_CREATE, host))


def create_group_snapshot(db: Database, group_id: str, name: str | None = None) -> Plan:
    group = get(db, models.ShareGroup, group_id, "share group")
    need(group.status, (vocab.AVAILABLE,), f"share group {group_id}", "snapshot")
    gsnap = models.ShareGroupSnapshot(id=models.new_id(), share_group_id=group.id, name=name,
                                      status=vocab.CREATING)
    # Its members: every share of the group, each available (as for a
    # snapshot of one) and still so when written; the shares' anchors make
    # a delete of one of them, which checks for members (delete_plans.py),
    # wait for this plan's transaction or this plan fail on its status.
    members: list[models.Base] = []
    held: list[Change] = []
    anchors: list[Change] = []
    for row in resources.group_shares(db, group.id):
        _, inst = share_of(db, row, f" of share group {group_id}")
        need(inst.status, (vocab.AVAILABLE,), f"share {row.id} of share group {group_id}",
             "snapshot")
        members.append(models.ShareGroupSnapshotMember(
            id=models.new_id(), share_group_snapshot_id=gsnap.id, share_id=row.id,
            share_instance_id=inst.id, size=row.size, share_proto=row.share_proto))
        held.append((models.ShareInstance, inst.id, {"status": vocab.AVAILABLE}, {}))
        anchors.append(quiet.anchor(row.id))
    return Plan(gsnap.id, [gsnap, *members], [*held, *anchors],  # instances, then shares
                Op(vocab.GROUP_SNAPSHOT, gsnap.id, vocab.ACTION_CREATE, group.host))


def create_backup(db: Database, share_id: str, name: str | None = None) -> Plan:
    """The share is busy (backup_creating) until the backup is done."""
    row, inst = share(db, share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {share_id}", "back up")
    backup = models.ShareBackup(id=models.new_id(), share_id=row.id, name=name,
                                host=hosts.host_of(inst.host), status=vocab.CREATING,
                                size=row.size)
    return Plan(backup.id, [backup],
                [(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
                  {"status": vocab.BACKUP_CREATING}),
                 quiet.anchor(row.id, {"size": row.size})],  # the size it records
                Op(vocab.BACKUP, backup.id, vocab.ACTION_CREATE, backup.host))


# Changes ------------------------------------------------------------------------------


def resize_share(db: Database, share_id: str, new_size: int, extend: bool | None = None
                 ) -> Plan:
    """Extend or shrink to ``new_size``; no op when the share has that size
    already (a resize cut short by a crash and settled by reconciliation).
    ``extend``: the way the user asked for (``share extend``, ``share
    shrink``), refused when the share's size, as read here, is not that
    way. The size is read once, and the plan is written only if it is
    still that size: a resize that ended meanwhile cannot turn a shrink
    into a no-op or an extend into a shrink."""
    row, inst = share(db, share_id)
    if extend is not None and not (new_size > row.size if extend else new_size < row.size):
        raise Refused(f"cannot extend share {share_id} to {new_size}: it is already {row.size}"
                      if extend else
                      f"cannot shrink share {share_id} to {new_size}: it is only {row.size}")
    plan = Plan(row.id, row=row)
    if new_size == row.size:
        return plan
    action = vocab.ACTION_EXTEND if new_size > row.size else vocab.ACTION_SHRINK
    spec = operation_table.spec(vocab.SHARE_INSTANCE, action)
    need(inst.status, spec.starts_from, f"share {share_id}", action)
    claims: list[db_capacity.Claim] = []
    if action == vocab.ACTION_EXTEND:
        _, claim = room(db, capabilities.report(db, inst.host), inst.host,
                         new_size - row.size, f"extend share {share_id} by "
                         f"{new_size - row.size} GiB to {new_size} GiB")
        claims += [claim] if claim else []
    values: dict[str, object] = {"status": spec.transient[0]}
    if action == vocab.ACTION_EXTEND:
        values["pending_size"] = new_size  # counted in its pool while extending
    plan = plan.and_then(
        changes=[(models.ShareInstance, inst.id, {"status": vocab.AVAILABLE}, values)],
        op=Op(vocab.SHARE_INSTANCE, inst.id, action, inst.host, {"new_size": new_size}),
        claims=claims)
    # A snapshot being made records the share's size when it is asked for,
    # the backend when its driver call runs: resizing in between would leave
    # the two disagreeing. A replica being made, deleted or promoted would
    # see the resize's driver call on it while its own runs.
    return quiet_share(
        db, plan, row.id,
        quiet.Quiet(models.ShareSnapshotInstance, {"share_instance_id": inst.id},
                    vocab.TRANSIENT_STATUSES, f"cannot {action} share {share_id}: it has a "
                    "snapshot that is {statuses}; try again when it is done"),
        quiet.Quiet(models.ShareInstance, {"share_id": row.id}, vocab.TRANSIENT_STATUSES,
                    f"cannot {action} share {share_id}: it has a replica that is "
                    "{statuses}; try again when it is done", but=(inst.id,)),
        expect={"size": row.size})


def restore_backup(db: Database, backup_id: str) -> Plan:
    backup = get(db, models.ShareBackup, backup_id, "backup")
    row, inst = share(db, backup.share_id)
    need(inst.status, (vocab.AVAILABLE,), f"share {row.id}", "restore into")
    spec = operation_table.spec(vocab.BACKUP, vocab.ACTION_RESTORE)
    need(backup.status, spec.starts_from, f"backup {backup_id}", "restore")
    if backup.size is not None and row.size < backup.size:
        raise Refused(f"cannot restore backup {backup_id} ({backup.size} GiB) into share "
                      f"{row.id} of {row.size} GiB: extend the share first")
    now_on = hosts.host_of(inst.host) if inst.host else None
    if backup.host != now_on:  # the share migrated since
        raise Refused(f"cannot restore backup {backup_id}: it was made on {backup.host} and "
                      f"share {row.id} is on {now_on} now; a backup is restored by the "
                      "backend that made it")
    return Plan(backup.id, [], [
        (models.ShareBackup, backup.id, {"status": backup.status},
         {"status": spec.transient[0], "restore_progress": None}),
        (models.ShareInstance, inst.id, {"status": vocab.AVAILABLE},
         {"status": vocab.BACKUP_RESTORING}),
        # The size checked above, still the share's (no resize began and
        # ended meanwhile).
        quiet.anchor(row.id, {"size": row.size}),
    ], Op(vocab.BACKUP, backup.id, vocab.ACTION_RESTORE, backup.host), backup)
