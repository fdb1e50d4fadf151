"""What the reconciliation unit tests share: a fake driver programmed per test,
row builders for every resource type, and an engine (real tooz file
coordinator, real Operations, real Reconciler) around a real database.

Only the driver is fake. The expected outcomes (``EXPECTED``, ``EXCLUDED``)
are written here from doc/specs.rst (architecture §6, spec 002), never taken from
``reconcile/rules.py``.
"""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sharemgr.common import vocab
from sharemgr.common.outcome import Outcome, Result
from sharemgr.db import api, migration, models
from sharemgr.db.engine import Database
from sharemgr.drivers.base import ShareDriver
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.manager import kinds
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.handlers import HANDLERS
from sharemgr.manager.operations import Operations
from sharemgr.manager.plans import Op
from sharemgr.reconcile.reconciler import Reconciler

HOST = "hostA"
BACKEND = "be"
HOSTBE = f"{HOST}@{BACKEND}"

# What a status method may answer (the list).
HEALTHY = "healthy"
ANSWERS = (HEALTHY, "error", "missing", "not_implemented", "none", "no_status", "raises")

BACKEND_SIZE = 8  # what the backend reports as a share's size when healthy

STATUS_METHOD = {
    vocab.SHARE_INSTANCE: "get_share_status",
    vocab.REPLICA: "get_replica_status",
    vocab.SNAPSHOT_INSTANCE: "get_snapshot_status",
    vocab.SHARE_GROUP: "get_share_group_status",
    vocab.GROUP_SNAPSHOT: "get_share_group_snapshot_status",
}
DELETE_METHOD = {
    vocab.SHARE_SERVER: "teardown_server",
    vocab.SHARE_INSTANCE: "delete_share",
    vocab.REPLICA: "delete_replica",
    vocab.SNAPSHOT_INSTANCE: "delete_snapshot",
    vocab.SHARE_GROUP: "delete_share_group",
    vocab.GROUP_SNAPSHOT: "delete_share_group_snapshot",
    vocab.BACKUP: "delete_backup",
}

# The spec's table -------------------------------------------------------------------

Q, D, K = "query", "delete", "mark"

# (action, error status) per type and transient status: doc/specs.rst, architecture §6 and
# spec. Success is 'available' for a query and 'deleted' for a delete. A
# replica is a share instance: the share-instance rows that need no driver
# (mark) apply to it too; its create asks get_replica_status.
INSTANCE_MARKS = {
    vocab.MANAGING: (K, vocab.MANAGE_ERROR),
    vocab.UNMANAGING: (K, vocab.UNMANAGE_ERROR),
    vocab.RESTORING: (K, vocab.ERROR),
    vocab.REVERTING: (K, vocab.ERROR),
    vocab.REPLICATION_CHANGE: (K, vocab.ERROR),
    vocab.BACKUP_CREATING: (K, vocab.ERROR),
    vocab.BACKUP_RESTORING: (K, vocab.ERROR),
}
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    vocab.SHARE_SERVER: {
        vocab.CREATING: (K, vocab.ERROR),
        vocab.MANAGING: (K, vocab.MANAGE_ERROR),
        vocab.UNMANAGING: (K, vocab.UNMANAGE_ERROR),
        vocab.SERVER_NETWORK_CHANGE: (K, vocab.ERROR),
        vocab.DELETING: (D, vocab.ERROR),
    },
    vocab.SHARE_INSTANCE: {
        vocab.CREATING: (Q, vocab.ERROR),
        vocab.CREATING_FROM_SNAPSHOT: (Q, vocab.ERROR),
        vocab.EXTENDING: (Q, vocab.EXTENDING_ERROR),
        vocab.SHRINKING: (Q, vocab.SHRINKING_ERROR),
        vocab.DELETING: (D, vocab.ERROR_DELETING),
        vocab.DEFERRED_DELETING: (D, vocab.ERROR_DELETING),
        # Only reached when the task_state ended without the status: a
        # migration in progress is its own periodic task's.
        vocab.MIGRATING: (K, vocab.ERROR),
        vocab.MIGRATING_TO: (K, vocab.ERROR),
        **INSTANCE_MARKS,
    },
    vocab.REPLICA: {
        vocab.CREATING: (Q, vocab.ERROR),
        vocab.DELETING: (D, vocab.ERROR_DELETING),
        **INSTANCE_MARKS,
    },
    vocab.SNAPSHOT_INSTANCE: {
        vocab.CREATING: (Q, vocab.ERROR),
        vocab.DELETING: (D, vocab.ERROR_DELETING),
        vocab.MANAGING: (K, vocab.MANAGE_ERROR),
        vocab.UNMANAGING: (K, vocab.UNMANAGE_ERROR),
        vocab.RESTORING: (K, vocab.ERROR),
    },
    vocab.SHARE_GROUP: {vocab.CREATING: (Q, vocab.ERROR), vocab.DELETING: (D, vocab.ERROR)},
    vocab.GROUP_SNAPSHOT: {vocab.CREATING: (Q, vocab.ERROR), vocab.DELETING: (D, vocab.ERROR)},
    # Backups: delete only; creating/restoring whose driver call never started
    # (no progress) cannot be continued: creating fails, restoring returns the
    # intact backup to available.
    vocab.BACKUP: {vocab.DELETING: (D, vocab.ERROR), vocab.CREATING: (K, vocab.ERROR),
               vocab.RESTORING: (K, vocab.AVAILABLE)},
}
# Transient statuses a pass leaves to another workflow (spec: "Excluded").
EXCLUDED = {
    vocab.SHARE_SERVER: {vocab.SERVER_MIGRATING, vocab.SERVER_MIGRATING_TO},
    vocab.SHARE_INSTANCE: {vocab.SERVER_MIGRATING, vocab.SERVER_MIGRATING_TO, vocab.ENSURING},
    # Statuses Manila never gives a secondary replica (resize, deferred
    # deletion and create-from-snapshot act on the active instance).
    vocab.REPLICA: {
        vocab.SERVER_MIGRATING,
        vocab.SERVER_MIGRATING_TO,
        vocab.ENSURING,
        vocab.EXTENDING,
        vocab.SHRINKING,
        vocab.CREATING_FROM_SNAPSHOT,
        vocab.DEFERRED_DELETING,
        vocab.MIGRATING,  # a replicated share is not migrated
        vocab.MIGRATING_TO,
    },
    vocab.SNAPSHOT_INSTANCE: set(),
    vocab.SHARE_GROUP: set(),
    vocab.GROUP_SNAPSHOT: set(),
    vocab.BACKUP: set(),
}
STAGE_ORDER = (vocab.SHARE_SERVER, vocab.SHARE_INSTANCE, vocab.REPLICA, vocab.SNAPSHOT_INSTANCE,
               vocab.SHARE_GROUP, vocab.GROUP_SNAPSHOT, vocab.BACKUP)

# Operations reconciliation must never start again (a crash left them
# half-done; redoing them risks duplicates on the backend).
FORBIDDEN = (
    "create_share", "create_share_from_snapshot", "extend_share", "shrink_share",
    "create_snapshot", "create_replica", "setup_server", "create_share_group",
    "create_share_group_snapshot", "create_backup", "restore_backup",
    "create_backup_continue", "restore_backup_continue",
    "migration_start", "migration_continue", "migration_complete",
)


@dataclass(frozen=True)
class Literal:
    """A status method answer returned as it is."""

    value: object


def export_path(ident: str) -> str:
    return f"10.0.0.1:/shares/{ident}"


class FakeDriver:
    """The ShareDriver methods reconciliation may call, programmed per test.

    ``answer`` is what every status method answers unless ``answers`` has an
    entry for the object's id; ``delete_fails`` holds ids (or ``"*"``) whose
    delete raises ShareBackendException. ``calls`` records (method, id) in
    call order.
    """

    def __init__(self, dhss: bool = True) -> None:
        self.driver_handles_share_servers = dhss
        self.answer = HEALTHY
        self.answers: dict[str, object] = {}
        self.delete_fails: set[str] = set()
        self.replica_state: str | None = vocab.REPLICA_OUT_OF_SYNC
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _record(self, method: str, ident: str) -> None:
        with self._lock:
            self.calls.append((method, ident))

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    def _status(self, method: str, obj: dict, healthy: dict) -> object:
        ident = obj["id"]
        self._record(method, ident)
        answer = self.answers.get(ident, self.answer)
        if isinstance(answer, Literal):
            return answer.value
        if answer == HEALTHY:
            return {"status": vocab.AVAILABLE, **healthy}
        if answer == "error":
            return {"status": vocab.ERROR}
        if answer == "missing":
            raise ShareResourceNotFound(f"no such object {ident}")
        if answer == "not_implemented":
            raise NotImplementedError(method)
        if answer == "none":
            return None
        if answer == "no_status":
            return {"size": BACKEND_SIZE}
        if answer == "raises":
            raise RuntimeError("backend exploded")
        raise AssertionError(f"unknown programmed answer {answer!r}")

    # Status methods -----------------------------------------------------------

    def get_share_status(self, share: dict, share_server: dict | None = None) -> object:
        return self._status("get_share_status", share, {
            "size": BACKEND_SIZE,
            "export_locations": [{"path": export_path(share["id"]), "is_admin_only": False,
                                  "preferred": True}],
        })

    def get_replica_status(self, replica: dict, share_server: dict | None = None) -> object:
        healthy: dict[str, object] = {
            "size": BACKEND_SIZE,
            "export_locations": [{"path": export_path(replica["id"]), "is_admin_only": False,
                                  "preferred": False}],
        }
        if self.replica_state is not None:
            healthy["replica_state"] = self.replica_state
        return self._status("get_replica_status", replica, healthy)

    def get_snapshot_status(self, snapshot: dict, share_server: dict | None = None) -> object:
        return self._status("get_snapshot_status", snapshot, {"size": 1})

    def get_share_group_status(self, group: dict, share_server: dict | None = None) -> object:
        return self._status("get_share_group_status", group, {})

    def get_share_group_snapshot_status(self, group_snapshot: dict,
                                        share_server: dict | None = None) -> object:
        return self._status("get_share_group_snapshot_status", group_snapshot, {})

    # Deletes ------------------------------------------------------------------

    def _delete(self, method: str, ident: str) -> None:
        self._record(method, ident)
        if ident in self.delete_fails or "*" in self.delete_fails:
            raise ShareBackendException(f"backend refused to delete {ident}")

    def delete_share(self, share: dict, share_server: dict | None = None) -> None:
        self._delete("delete_share", share["id"])

    def delete_replica(self, replica: dict, share_server: dict | None = None) -> None:
        self._delete("delete_replica", replica["id"])

    def delete_snapshot(self, snapshot: dict, share_server: dict | None = None) -> None:
        self._delete("delete_snapshot", snapshot["id"])

    def delete_share_group(self, group: dict, share_server: dict | None = None) -> None:
        self._delete("delete_share_group", group["id"])

    def delete_share_group_snapshot(self, group_snapshot: dict,
                                    share_server: dict | None = None) -> None:
        self._delete("delete_share_group_snapshot", group_snapshot["id"])

    def teardown_server(self, server: dict, backend_details: dict) -> None:
        self._delete("teardown_server", server["id"])

    def delete_backup(self, backup: dict) -> None:
        self._delete("delete_backup", backup["id"])

    # What must never be called -------------------------------------------------

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name in FORBIDDEN:
            def forbidden(*args: object, **kwargs: object) -> None:
                self._record(name, "?")
                raise AssertionError(f"reconciliation called {name}")
            return forbidden
        raise AttributeError(name)


def expect(outcome: Outcome[object], result: Result, match: str | None = None
           ) -> Outcome[object]:
    """``outcome`` (``Operations.perform``'s) is ``result``, its reason
    matching ``match``."""
    assert outcome.result is result, outcome
    assert match is None or re.search(match, outcome.reason or ""), outcome
    return outcome


# Databases ---------------------------------------------------------------------------


def migrated_template(folder: Path) -> Path:
    """An SQLite database file at the head revision (the migrations, run once)."""
    path = folder / "template.sqlite"
    db = Database(f"sqlite:///{path}")
    migration.upgrade(db)
    db.dispose()
    return path


def sqlite_copy(template: Path, folder: Path) -> Database:
    """A real SQLite database of the test's own: a copy of the template
    (running the migrations for each of some hundred cases costs more than
    the cases themselves)."""
    dest = folder / "sharemgr.sqlite"
    for suffix in ("", "-wal"):
        if Path(f"{template}{suffix}").exists():
            shutil.copyfile(f"{template}{suffix}", f"{dest}{suffix}")
    db = Database(f"sqlite:///{dest}")
    assert migration.is_current(db)
    return db


# Rows ---------------------------------------------------------------------------


def add(db: Database, *rows: models.Base) -> None:
    """Insert in order (foreign keys are enforced)."""
    with db.session() as session:
        for row in rows:
            session.add(row)
            session.flush()


def make_share(db: Database, status: str = vocab.AVAILABLE, host: str = HOSTBE, size: int = 5,
               replica_state: str | None = None, task_state: str | None = None,
               server_id: str | None = None) -> models.ShareInstance:
    share = models.Share(id=models.new_id(), size=size, share_proto="NFS", name="s")
    inst = models.ShareInstance(id=models.new_id(), share_id=share.id, host=host, status=status,
                           replica_state=replica_state, task_state=task_state,
                           share_server_id=server_id, export_locations=[])
    add(db, share, inst)
    return inst


def make_applying_rule(db: Database, inst: models.ShareInstance) -> models.ShareAccessRule:
    """An ip rule of ``inst``'s share a crash left on its way to the backend."""
    rule = models.ShareAccessRule(id=models.new_id(), share_id=inst.share_id,
                                  access_type="ip", access_to="10.0.0.1", access_level="ro",
                                  state=vocab.ACCESS_APPLYING)
    add(db, rule)
    return rule


def make_replica(db: Database, status: str, host: str = HOSTBE,
                 task_state: str | None = None) -> models.ShareInstance:
    active = make_share(db, vocab.AVAILABLE, host, replica_state=vocab.REPLICA_ACTIVE)
    rep = models.ShareInstance(
        id=models.new_id(),
        share_id=active.share_id,
        host=host,
        status=status,
        replica_state=vocab.REPLICA_OUT_OF_SYNC,
        task_state=task_state,
        export_locations=[],
    )
    add(db, rep)
    return rep


def make_server(db: Database, status: str, host: str = HOSTBE) -> models.ShareServer:
    row = models.ShareServer(id=models.new_id(), host=host, status=status,
                             backend_details={"k": "v"})
    add(db, row)
    return row


def make_snapshot(db: Database, status: str, host: str = HOSTBE) -> models.ShareSnapshotInstance:
    inst = make_share(db, vocab.AVAILABLE, host)
    snap = models.ShareSnapshot(id=models.new_id(), share_id=inst.share_id, size=5, name="snap")
    snap_inst = models.ShareSnapshotInstance(id=models.new_id(), snapshot_id=snap.id,
                                        share_instance_id=inst.id, status=status,
                                        progress="0%")
    add(db, snap, snap_inst)
    return snap_inst


def from_snapshot(db: Database, inst: models.ShareInstance) -> models.ShareSnapshotInstance:
    """Make ``inst``'s share one created from a (new, available) snapshot."""
    snap_inst = make_snapshot(db, vocab.AVAILABLE, inst.host or HOSTBE)
    with db.session() as session:
        share = session.get(models.Share, inst.share_id)
        assert share is not None
        share.snapshot_id = snap_inst.snapshot_id
    return snap_inst


def make_group(db: Database, status: str, host: str = HOSTBE) -> models.ShareGroup:
    row = models.ShareGroup(id=models.new_id(), host=host, status=status, name="g")
    add(db, row)
    return row


def make_group_snapshot(db: Database, status: str, host: str = HOSTBE) -> models.ShareGroupSnapshot:
    grp = make_group(db, vocab.AVAILABLE, host)
    row = models.ShareGroupSnapshot(id=models.new_id(), share_group_id=grp.id, status=status,
                                    name="gs")
    add(db, row)
    return row


def make_backup(db: Database, status: str, host: str = HOSTBE, progress: str | None = None,
                restore_progress: str | None = None,
                share_status: str = vocab.AVAILABLE) -> models.ShareBackup:
    inst = make_share(db, share_status, host)
    row = models.ShareBackup(id=models.new_id(), share_id=inst.share_id, host=host, status=status,
                        size=5, progress=progress, restore_progress=restore_progress)
    add(db, row)
    return row


MAKE: dict[str, Callable[..., models.Base]] = {
    vocab.SHARE_SERVER: make_server,
    vocab.SHARE_INSTANCE: make_share,
    vocab.REPLICA: make_replica,
    vocab.SNAPSHOT_INSTANCE: make_snapshot,
    vocab.SHARE_GROUP: make_group,
    vocab.GROUP_SNAPSHOT: make_group_snapshot,
    vocab.BACKUP: make_backup,
}


def make(db: Database, rtype: str, status: str, host: str = HOSTBE) -> Any:
    return MAKE[rtype](db, status, host=host)


def fetch(db: Database, rtype: str, ident: str) -> Any:
    return api.get(db, kinds.kind(rtype).model, ident, include_deleted=True)


def host_of_row(db: Database, rtype: str, row: kinds.StatusRow) -> str:
    """The 'host@backend' a request for this resource names (as intake does)."""
    parent: models.Base | None = row  # type: ignore[assignment]  # every kind's row is a model
    if isinstance(row, models.ShareSnapshotInstance):
        parent = api.get(db, models.ShareInstance, row.share_instance_id)
    elif isinstance(row, models.ShareGroupSnapshot):
        parent = api.get(db, models.ShareGroup, row.share_group_id)
    host = getattr(parent, "host", None)
    assert isinstance(host, str), (rtype, row.id)
    return host


def add_request(db: Database, rtype: str, ident: str, host: str,
                status: str = vocab.REQUEST_PENDING, engine_id: str | None = None,
                action: str = "create") -> int:
    req = models.Request(resource_type=rtype, resource_id=ident, action=action, host=host,
                    status=status, engine_id=engine_id, args={},
                    claimed_at=models.utcnow() if engine_id else None)
    add(db, req)
    return req.id


def claimed(eng: Engine, req: models.Request) -> Op:
    """``req`` as the request runner hands it to its handler: claimed,
    running for ``eng`` (an operation takes its row only for a request that
    is still its engine's running one: ``db.leases.read_and_lease``)."""
    assert api.conditional_update(eng.db, models.Request, req.id, {},
                                  {"status": vocab.REQUEST_RUNNING, "engine_id": eng.engine_id})
    return Op.of_request(req)


def request_row(db: Database, request_id: int) -> models.Request:
    return api.get(db, models.Request, request_id)


# An engine ------------------------------------------------------------------------


def coord_url(tmp_path: Path, threaded: bool = False) -> str:
    """A tooz file coordinator in the test's folder. tooz runs group calls on
    a futurist thread whose stop() idles for a second; the synchronous
    executor runs them in the caller (locks are the same either way).
    ``threaded``: the service's URL as it is."""
    return f"file://{tmp_path}/coord?timeout=5" + ("" if threaded else "&executor=synchronous")


def engine_id(host: str = HOST) -> str:
    return f"{host}.{uuid.uuid4()}"


class Engine:
    """One share-manager engine's reconciliation parts, driver faked."""

    def __init__(self, db: Database, coord_url: str, drivers: dict[str, FakeDriver] | None = None,
                 workers: int = 4) -> None:
        self.db = db
        self.coord_url = coord_url
        self.engine_id = engine_id()
        self.coordinator = Coordinator(coord_url, self.engine_id)
        self.coordinator.start()
        self.coordinator.join_engines()
        self.drivers = drivers if drivers is not None else {BACKEND: FakeDriver(dhss=True)}
        # Fakes that answer what the engine asks as a driver would (a test
        # may put a real driver in): the engine's parts take them as drivers.
        as_drivers = cast(dict[str, ShareDriver], self.drivers)
        self.operations = Operations(db, as_drivers, self.coordinator, self.engine_id,
                                     HANDLERS)
        self.reconciler = Reconciler(db, as_drivers, self.coordinator, self.operations, HOST,
                                     self.engine_id, workers)
        self._peers: list[Coordinator] = []

    @property
    def driver(self) -> FakeDriver:
        return self.drivers[BACKEND]

    def run(self, trigger: str = "startup", dry_run: bool = False) -> dict[str, Any]:
        return self.reconciler.run(trigger, dry_run)

    def peer(self, join: bool = True, host: str = HOST) -> Coordinator:
        """Another engine's coordinator (a different member id)."""
        coord = Coordinator(self.coord_url, engine_id(host))
        coord.start()
        if join:
            coord.join_engines()
        self._peers.append(coord)
        return coord

    def forbidden_calls(self) -> list[tuple[str, str]]:
        return [c for d in self.drivers.values() for c in d.calls if c[0] in FORBIDDEN]

    def close(self) -> None:
        for coord in self._peers:
            coord.stop()
        self.coordinator.stop()


# One status per type that the pass settles without help (a mark, a query
# answered healthy, or a delete), and what it becomes.
SETTLE = {
    vocab.SHARE_SERVER: (vocab.CREATING, vocab.ERROR),
    vocab.SHARE_INSTANCE: (vocab.CREATING, vocab.AVAILABLE),
    vocab.REPLICA: (vocab.CREATING, vocab.AVAILABLE),
    vocab.SNAPSHOT_INSTANCE: (vocab.CREATING, vocab.AVAILABLE),
    vocab.SHARE_GROUP: (vocab.CREATING, vocab.AVAILABLE),
    vocab.GROUP_SNAPSHOT: (vocab.CREATING, vocab.AVAILABLE),
    vocab.BACKUP: (vocab.DELETING, vocab.DELETED),
}


def _stuck(eng, rtype, host=HOSTBE):
    status, _ = SETTLE[rtype]
    return make(eng.db, rtype, status, host=host)


def _untouched(eng, rtype, row):
    after = fetch(eng.db, rtype, row.id)
    assert (after.status, after.deleted_at) == (row.status, None)
    assert all(ident != row.id for _, ident in eng.driver.calls)


def _settled(eng, rtype, row):
    assert fetch(eng.db, rtype, row.id).status == SETTLE[rtype][1]
