"""What deleting a resource writes: its deleting status and the delete
operation, refused while something not deleted with it still needs it
(``plans.py`` holds the plan's parts and the creates)."""

from __future__ import annotations

from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models, quiet, resources
from sharemgr.db.engine import Database
from sharemgr.db.records import Record
from sharemgr.manager import kinds, operation_table, successes
from sharemgr.manager.plans import Op, Plan, Refused, get, need, quiet_share, replica, snapshot

# What a share's family must not be doing while one of its members starts
# something (db/quiet.py): a resize calls the driver on every replica.
_RESIZING = frozenset({vocab.EXTENDING, vocab.SHRINKING, vocab.REVERTING,
                       vocab.REPLICATION_CHANGE})


def _deleting(db: Database, kind: kinds.Kind, row: kinds.StatusRow | Record, what: str,
              host: str | None,
              shown: object = None, force: bool = False) -> Plan:
    """``row`` holds the status; ``shown`` is what users know (a share, not
    its instance), when it differs. A forced delete (admin) starts from any
    status, as Manila's force-delete does: its request carries
    ``{"force": True}`` and ends in deleted whatever the driver says; one
    of a resource whose create no engine has taken is written at once
    (``_never_taken``)."""
    spec = operation_table.spec(kind.name, vocab.ACTION_DELETE)
    if not force:
        need(row.status, spec.starts_from, what, "delete",
             "an admin's delete --force starts from any status")
    elif (at_once := _never_taken(db, kind, row, what, shown)) is not None:
        return at_once
    return Plan(None, [], [(kind.model, row.id, {"status": row.status},
                            {"status": spec.transient[0]})],
                Op(kind.name, row.id, vocab.ACTION_DELETE, host,
                   {"force": True} if force else {}), shown or row)


# The kinds whose create writes its own rows alone until it runs: its
# records can go without it. A backup's create also made its share
# backup_creating, which its own operation ends.
_CREATE_OWN_ROWS_ONLY = frozenset({
    vocab.SHARE_INSTANCE, vocab.SNAPSHOT_INSTANCE, vocab.REPLICA, vocab.SHARE_SERVER,
    vocab.SHARE_GROUP, vocab.GROUP_SNAPSHOT})


def _never_taken(db: Database, kind: kinds.Kind, row: kinds.StatusRow | Record, what: str,
                 shown: object) -> Plan | None:
    """A forced delete of a resource whose create is still pending — no
    engine took it (none serves its host, or none got to it yet), so no
    driver was called about it: its records go at once, with the create's
    request failed, in one transaction and only while that request is still
    pending (an engine that takes it meanwhile wins: the delete is refused
    as changed meanwhile, and a second one waits for the create as any
    forced delete does). Else None. A delete request would wait, for ever
    where no engine serves the host (Manila deletes a share that has no
    host in its API, for the same reason)."""
    create = operation_table.SPECS.get((kind.name, vocab.ACTION_CREATE))
    if kind.name not in _CREATE_OWN_ROWS_ONLY or create is None \
            or row.status not in create.transient:
        return None
    waiting = db_api.query(db, models.Request, {
        "resource_type": kind.name, "resource_id": row.id, "action": vocab.ACTION_CREATE,
        "status": vocab.REQUEST_PENDING}, order_by="id", limit=1)
    if not waiting:
        return None
    found = db_api.get(db, kind.model, row.id)  # the model's row, as a success reads it
    if found is None or found.status != row.status:
        return None
    failed = (models.Request, waiting[0].id, {"status": vocab.REQUEST_PENDING, "engine_id": None},
              {"status": vocab.REQUEST_FAILED, "finished_at": models.utcnow(),
               "error": f"not carried out: {what} was force-deleted before an engine "
                        "took this request"})
    gone = successes.changes(db, operation_table.spec(kind.name, vocab.ACTION_DELETE), found,
                             None, force=True)
    return Plan(None, [], [failed, *gone], None, shown or row)


def _in_use(db: Database, checks: tuple[tuple[type, str], ...], ident: str) -> bool:
    return any(resources.live_count(db, model, **{column: ident}) for model, column in checks)


def delete(db: Database, type_: str, ident: str, force: bool = False) -> Plan:
    """The deleting status and the delete operation of a user-facing type's
    resource, refused while something that is not being deleted with it
    still needs it. ``force`` lifts the status check only: as in Manila, a
    share with snapshots or replicas, or a share server or group still in
    use, is refused even when forced."""
    return _DELETERS[type_](db, ident, force)


def delete_seen(db: Database, type_: str, ident: str) -> tuple[kinds.Observed, Plan | None]:
    """The resource as observed now and, unless it is gone, its delete's
    plan (``delete``'s checks: Refused), from one read where the type
    allows it — a share's (``resources.share_to_delete``) holds the rows
    its observation is made of; a stack's delete makes one per resource —
    else an observation, then the plan."""
    if type_ != vocab.SHARE:
        observed = kinds.observe(db, type_, ident)
        return observed, None if observed.state == kinds.GONE else delete(db, type_, ident)
    found = resources.share_to_delete(db, ident) if ident else resources.NOT_LIVE
    row, inst = found[0], _primary(found[1])
    seen = None if row is None or inst is None else kinds.observe_rows(
        vocab.SHARE, {models.Share: row, models.ShareInstance: inst})
    if seen is None:
        return kinds.Observed(kinds.GONE), None
    return seen, _delete_share(db, ident, found=found)


def _primary(live: list[Record]) -> Record | None:
    """Of a share's live instances (oldest first), the primary: the oldest
    that is not a secondary (``resources.primary_instance``'s choice)."""
    return next((i for i in live if not kinds.is_secondary(i)), None)


def _delete_share(db: Database, ident: str, force: bool = False,
                  found: resources.ToDelete | None = None) -> Plan:
    # One read (a stack's delete makes one per resource): the share, its live
    # instances (the primary and any other a replica), its snapshots and
    # backups; ``found``: that read, made by the caller.
    if found is None:
        found = resources.share_to_delete(db, ident) if ident else resources.NOT_LIVE
    row, live, snapshots, backups, group_snapshots = found
    if row is None:
        raise Refused(f"no share with id {ident!r}")
    inst = _primary(live)
    if inst is None:
        raise Refused(f"share {ident} has no instance")
    if snapshots:
        raise Refused(f"share {ident} has snapshots: delete them first")
    if any(i.status == vocab.MIGRATING_TO for i in live):
        # Even forced: the migration's periodic task owns both instances.
        raise Refused(f"share {ident} is migrating: cancel its migration first (sharectl "
                      "share migration cancel)")
    if len(live) > 1:
        kept = [i.id for i in live if i is not inst and not kinds.is_secondary(i)]
        if kept:  # a migration's destination it could not remove (doc/migration.rst)
            raise Refused(f"share {ident} has another instance ({', '.join(kept)}): delete "
                          "it first (sharectl share-instance delete)")
        raise Refused(f"share {ident} has replicas: delete them first")
    if group_snapshots:
        # As Manila (its share's group snapshot members): forced too.
        raise Refused(f"share {ident} is in {group_snapshots} group snapshot(s) of its group: "
                      "delete them first (sharectl group-snapshot list, group-snapshot delete)")
    if backups:
        # A backup is restored into its share alone (as in Manila): one left
        # behind could never be restored. Forced too, as for snapshots (a
        # backup being made or restored also owns the share).
        raise Refused(f"share {ident} has {backups} backup(s): delete them first "
                      "(sharectl backup list, backup delete)")
    # Checked again in the writing transaction, after the share's anchor
    # (db/quiet.py): a replica or a (group) snapshot created since the read above,
    # whose plan anchors the share too, refuses the delete there; else both
    # were accepted, and the share was left live with no live instance (a
    # fault run's replica create beside a share delete).
    others = (quiet.Quiet(models.ShareInstance, {"share_id": row.id},
                          frozenset(vocab.VALID_STATUSES[vocab.SHARE_INSTANCE]),
                          f"share {ident} has replicas ({{statuses}}): delete them first",
                          but=(inst.id,)),
              quiet.Quiet(models.ShareSnapshotInstance, {"share_instance_id": inst.id},
                          frozenset(vocab.VALID_STATUSES[vocab.SNAPSHOT_INSTANCE]),
                          f"share {ident} has snapshots ({{statuses}}): delete them first"),
              quiet.Quiet(models.ShareBackup, {"share_id": row.id},
                          frozenset(vocab.VALID_STATUSES[vocab.BACKUP]),
                          f"share {ident} has backups ({{statuses}}): delete them first"),
              quiet.Unheld(row.id, f"share {ident} is in group snapshots ({{statuses}}): "
                                   "delete them first"))
    return _deleting(db, kinds.SHARE_INSTANCE, inst, f"share {ident}", inst.host, row, force) \
        .and_then(changes=[quiet.anchor(row.id)], conditions=others)


def _delete_instance(db: Database, ident: str, force: bool = False) -> Plan:
    """An instance that is neither its share's own nor a replica: what a
    migration that ended in error left when its destination's driver could
    not remove it (Manila's share-instance-force-delete). The share's own
    instance goes with the share, a replica with ``replica delete``, and a
    migration's instances are its own until it ends (even forced)."""
    row = get(db, models.ShareInstance, ident, "share instance")
    if kinds.is_secondary(row):
        raise Refused(f"share instance {ident} is a replica: sharectl replica delete")
    live = resources.share_to_delete(db, row.share_id).live
    primary = _primary(live)
    if primary is not None and primary.id == row.id:
        raise Refused(f"share instance {ident} is its share's own: delete the share "
                      f"(sharectl share delete {row.share_id})")
    if any(i.status in (vocab.MIGRATING, vocab.MIGRATING_TO) for i in live):
        raise Refused(f"share {row.share_id} is migrating: cancel its migration first "
                      "(sharectl share migration cancel)")
    return _deleting(db, kinds.SHARE_INSTANCE, row, f"share instance {ident}", row.host,
                     force=force)


def _delete_snapshot(db: Database, ident: str, force: bool = False) -> Plan:
    snap, inst = snapshot(db, ident)
    return _deleting(db, kinds.SNAPSHOT_INSTANCE, inst, f"snapshot {ident}",
                     kinds.SNAPSHOT_INSTANCE.host_of(db, inst), snap, force)


def _delete_replica(db: Database, ident: str, force: bool = False) -> Plan:
    """Refused while its share is resized or another replica promoted (even
    forced: the two would call the driver on it at once)."""
    row = replica(db, ident)
    # Snapshots stay on the replica that was active when they were taken: a
    # promote leaves them on the old one, a secondary now. Deleting it
    # would leave them pointing at a deleted instance (a revert of one
    # would land there), forced or not.
    held = quiet.Quiet(models.ShareSnapshotInstance, {"share_instance_id": row.id},
                       frozenset(vocab.VALID_STATUSES[vocab.SNAPSHOT_INSTANCE]),
                       f"replica {ident} holds snapshots of its share (taken while it was the "
                       "active replica; {statuses}): delete them first")
    return quiet_share(db, _deleting(db, kinds.REPLICA, row, f"replica {ident}", row.host,
                                     force=force), row.share_id,
                       quiet.Quiet(models.ShareInstance, {"share_id": row.share_id}, _RESIZING,
                                   f"cannot delete replica {ident}: its share is "
                                   "{statuses}; try again when it is done", but=(row.id,)),
                       held)


def _delete_server(db: Database, ident: str, force: bool = False) -> Plan:
    row = get(db, models.ShareServer, ident, "share server")
    if _in_use(db, ((models.ShareInstance, "share_server_id"),
                    (models.ShareGroup, "share_server_id")), row.id):
        raise Refused(f"share server {ident} is in use by shares or groups")
    return _deleting(db, kinds.SHARE_SERVER, row, f"share server {ident}", row.host, force=force)


def _delete_group(db: Database, ident: str, force: bool = False) -> Plan:
    row = get(db, models.ShareGroup, ident, "share group")
    if _in_use(db, ((models.Share, "share_group_id"),), row.id):
        raise Refused(f"share group {ident} has shares: delete them first")
    # Forced, its group snapshots' records go with it (as Manila's force-delete).
    if not force and _in_use(db, ((models.ShareGroupSnapshot, "share_group_id"),), row.id):
        raise Refused(f"share group {ident} has snapshots: delete them first")
    return _deleting(db, kinds.SHARE_GROUP, row, f"share group {ident}", row.host, force=force)


def _delete_group_snapshot(db: Database, ident: str, force: bool = False) -> Plan:
    row = get(db, models.ShareGroupSnapshot, ident, "group snapshot")
    return _deleting(db, kinds.GROUP_SNAPSHOT, row, f"group snapshot {ident}",
                     kinds.GROUP_SNAPSHOT.host_of(db, row), force=force)


def _delete_backup(db: Database, ident: str, force: bool = False) -> Plan:
    row = get(db, models.ShareBackup, ident, "backup")
    return _deleting(db, kinds.BACKUP, row, f"backup {ident}", row.host, force=force)


_DELETERS = {
    vocab.SHARE: _delete_share,
    vocab.SHARE_INSTANCE: _delete_instance,
    vocab.SNAPSHOT: _delete_snapshot,
    vocab.REPLICA: _delete_replica,
    vocab.SHARE_SERVER: _delete_server,
    vocab.SHARE_GROUP: _delete_group,
    vocab.GROUP_SNAPSHOT: _delete_group_snapshot,
    vocab.BACKUP: _delete_backup,
}
