"""The dummy backend's state: one SQLite file per backend folder.

SQLite in WAL mode gives what the dummy driver needs: several processes (two
engines on one host, plus the ``sharemgr-dummy-backend`` command) read and
write the same backend safely, a committed change survives the process being
killed the next instant, and hundreds of operations take well under a second.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, Required, TypedDict, Unpack

import tenacity
from sharemgr.drivers.shapes import ExportLocation

DB_NAME = "dummy-backend.sqlite"

KINDS = (
    "share",
    "snapshot",
    "replica",
    "share_server",
    "share_group",
    "group_snapshot",
    "backup",
)

# Logical ids an object may belong to; ``remove``/``set`` find objects by them.
LOGICAL_IDS = (
    "share_id",
    "share_instance_id",
    "snapshot_id",
    "share_server_id",
    "share_group_id",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    share_id TEXT,
    share_instance_id TEXT,
    snapshot_id TEXT,
    share_server_id TEXT,
    share_group_id TEXT,
    name TEXT,
    size INTEGER,
    status TEXT NOT NULL,
    replica_state TEXT,
    export_locations TEXT NOT NULL DEFAULT '[]',
    details TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_objects_share_id ON objects (share_id);
CREATE INDEX IF NOT EXISTS ix_objects_share_instance_id ON objects (share_instance_id);
CREATE INDEX IF NOT EXISTS ix_objects_snapshot_id ON objects (snapshot_id);
CREATE INDEX IF NOT EXISTS ix_objects_share_server_id ON objects (share_server_id);
CREATE INDEX IF NOT EXISTS ix_objects_share_group_id ON objects (share_group_id);
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    method TEXT NOT NULL,
    resource_id TEXT,
    engine_id TEXT,
    pid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS fences (id TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""

# Columns the call log gained after its first release: added to an older
# state file when it is opened. ``token``: the call's fencing token;
# ``fenced``: 1 when the backend refused it as fenced; ``finished``: when the
# call's change was committed (with the change); ``finished_after``: the seq
# of the last call logged by then — an order of calls that no engine's clock
# writes (the times are the calling engine's, which may run ahead or behind).
_CALL_COLUMNS = {"token": "INTEGER", "fenced": "INTEGER NOT NULL DEFAULT 0",
                 "finished": "TEXT", "finished_after": "INTEGER"}

_JSON_COLUMNS = ("export_locations", "details")
_COLUMNS = (
    "id", "kind", *LOGICAL_IDS, "name", "size", "status", "replica_state",
    "export_locations", "details", "created_at", "updated_at",
)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


class AppliedRule(TypedDict):
    id: str
    access_type: str
    access_to: str
    access_level: str


class Details(TypedDict, total=False):
    """What the dummy driver keeps beside an object's columns."""

    share_proto: str | None  # shares
    pool: str  # shares and replicas placed in a pool
    access_rules: list[AppliedRule]  # shares: what update_access applied
    progress: int  # backups, a migration's destination: 0..100
    migrating_from: str  # a migration's destination: its source's id
    restore_progress: int
    restore_to: str  # backups: the share being restored into
    server_name: str  # share servers: their backend_details
    address: str
    managed_with: dict[str, str]  # managed objects: the driver options given
    provider_location: str  # managed snapshots: where they were found
    members: list[str]  # group snapshots: the share instances they hold


# The progress keys of a backup's details, one per phase.
ProgressKey = Literal["progress", "restore_progress"]


class NewObject(TypedDict, total=False):
    """The columns ``Tx.insert`` takes; the others start empty."""

    id: Required[str]
    kind: Required[str]
    share_id: str | None
    share_instance_id: str | None
    snapshot_id: str | None
    share_server_id: str | None
    share_group_id: str | None
    name: str | None
    size: int | None
    status: Required[str]
    replica_state: str | None
    export_locations: list[ExportLocation]
    details: Details


class BackendObject(TypedDict):
    """An object on the dummy backend: a row of ``objects``."""

    id: str
    kind: str
    share_id: str | None
    share_instance_id: str | None
    snapshot_id: str | None
    share_server_id: str | None
    share_group_id: str | None
    name: str | None
    size: int | None
    status: str
    replica_state: str | None
    export_locations: list[ExportLocation]
    details: Details
    created_at: str
    updated_at: str


class Call(TypedDict):
    """A driver call in the log: a row of ``calls``."""

    seq: int
    time: str
    method: str
    resource_id: str | None
    engine_id: str | None
    pid: int
    token: int | None
    fenced: bool
    finished: str | None
    finished_after: int | None  # the last call's seq when this one finished


def _row_to_object(row: sqlite3.Row) -> BackendObject:
    return {
        "id": row["id"], "kind": row["kind"], "share_id": row["share_id"],
        "share_instance_id": row["share_instance_id"], "snapshot_id": row["snapshot_id"],
        "share_server_id": row["share_server_id"], "share_group_id": row["share_group_id"],
        "name": row["name"], "size": row["size"], "status": row["status"],
        "replica_state": row["replica_state"],
        "export_locations": json.loads(row["export_locations"]),
        "details": json.loads(row["details"]),
        "created_at": row["created_at"], "updated_at": row["updated_at"],
    }


class Tx:
    """Queries inside one transaction of the backend state."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def get(self, obj_id: str | None, kinds: tuple[str, ...] | None = None
            ) -> BackendObject | None:
        if obj_id is None:
            return None
        row = self.conn.execute("SELECT * FROM objects WHERE id = ?", (obj_id,)).fetchone()
        if row is None or (kinds is not None and row["kind"] not in kinds):
            return None
        return _row_to_object(row)

    def get_many(self, obj_ids: list[str], kinds: tuple[str, ...]) -> dict[str, BackendObject]:
        """Objects of ``kinds`` with these ids, by id (a batch status call)."""
        found: dict[str, BackendObject] = {}
        ids = [i for i in obj_ids if i is not None]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(
                f"SELECT * FROM objects WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            found.update((r["id"], _row_to_object(r)) for r in rows if r["kind"] in kinds)
        return found

    def find(self, column: str, value: str, kinds: tuple[str, ...]) -> list[BackendObject]:
        assert column in LOGICAL_IDS
        marks = ",".join("?" * len(kinds))
        rows = self.conn.execute(
            f"SELECT * FROM objects WHERE {column} = ? AND kind IN ({marks}) ORDER BY created_at",
            (value, *kinds),
        ).fetchall()
        return [_row_to_object(r) for r in rows]

    def insert(self, **fields: Unpack[NewObject]) -> BackendObject:
        stamp = now()
        obj: BackendObject = {
            "id": fields["id"], "kind": fields["kind"], "share_id": fields.get("share_id"),
            "share_instance_id": fields.get("share_instance_id"),
            "snapshot_id": fields.get("snapshot_id"),
            "share_server_id": fields.get("share_server_id"),
            "share_group_id": fields.get("share_group_id"), "name": fields.get("name"),
            "size": fields.get("size"), "status": fields["status"],
            "replica_state": fields.get("replica_state"),
            "export_locations": fields.get("export_locations", []),
            "details": fields.get("details", {}), "created_at": stamp, "updated_at": stamp,
        }
        row: Mapping[str, object] = obj
        values = [json.dumps(row[c]) if c in _JSON_COLUMNS else row[c] for c in _COLUMNS]
        self.conn.execute(
            f"INSERT INTO objects ({','.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})",
            values,
        )
        return obj

    def update(self, obj_id: str, **fields: object) -> None:
        fields["updated_at"] = now()
        for col in fields:
            assert col in _COLUMNS and col not in ("id", "created_at"), col
        sets = ", ".join(f"{c} = ?" for c in fields)
        values = [json.dumps(v) if c in _JSON_COLUMNS else v for c, v in fields.items()]
        self.conn.execute(f"UPDATE objects SET {sets} WHERE id = ?", (*values, obj_id))

    def rekey(self, obj_id: str, new_id: str, **fields: object) -> None:
        """Give object ``obj_id`` the id ``new_id`` (a manage: the backend
        object now answers to the manager's new ids), with ``fields``
        changed too; the objects that name it as their share instance or
        share server follow."""
        fields["id"] = new_id
        fields["updated_at"] = now()
        for col in fields:
            assert col in _COLUMNS and col != "created_at", col
        sets = ", ".join(f"{c} = ?" for c in fields)
        values = [json.dumps(v) if c in _JSON_COLUMNS else v for c, v in fields.items()]
        self.conn.execute(f"UPDATE objects SET {sets} WHERE id = ?", (*values, obj_id))
        for column in ("share_instance_id", "share_server_id"):
            self.conn.execute(f"UPDATE objects SET {column} = ? WHERE {column} = ? AND id != ?",
                              (new_id, obj_id, new_id))

    def delete(self, obj_id: str) -> bool:
        return self.conn.execute("DELETE FROM objects WHERE id = ?", (obj_id,)).rowcount > 0

    def objects(self, kind: str | None = None) -> list[BackendObject]:
        if kind:
            rows = self.conn.execute(
                "SELECT * FROM objects WHERE kind = ? ORDER BY created_at, id", (kind,)
            )
        else:
            rows = self.conn.execute("SELECT * FROM objects ORDER BY created_at, id")
        return [_row_to_object(r) for r in rows]

    def lookup(self, any_id: str) -> list[BackendObject]:
        """Objects whose id is ``any_id``, else those it is a logical id of,
        else those named ``any_id``."""
        obj = self.get(any_id)
        if obj is not None:
            return [obj]
        where = " OR ".join(f"{c} = ?" for c in LOGICAL_IDS)
        rows = self.conn.execute(
            f"SELECT * FROM objects WHERE {where} ORDER BY created_at, id",
            (any_id,) * len(LOGICAL_IDS),
        ).fetchall()
        if not rows:
            rows = self.conn.execute(
                "SELECT * FROM objects WHERE name = ? ORDER BY created_at, id", (any_id,)
            ).fetchall()
        return [_row_to_object(r) for r in rows]

    def log_call(self, method: str, resource_id: str | None, engine_id: str | None,
                 token: int | None = None) -> int:
        return self.conn.execute(
            "INSERT INTO calls (time, method, resource_id, engine_id, pid, token) "
            "VALUES (?,?,?,?,?,?)",
            (now(), method, resource_id, engine_id, os.getpid(), token),
        ).lastrowid or 0  # a row was inserted: SQLite gives its id

    def finish_call(self, seq: int) -> None:
        self.conn.execute("UPDATE calls SET finished = ?, finished_after = (SELECT MAX(seq) "
                          "FROM calls) WHERE seq = ?", (now(), seq))

    def accept_token(self, obj_id: str, token: int) -> int | None:
        """Accept ``token`` for ``obj_id`` unless a higher one was: None when
        accepted, else the highest accepted (the call is fenced)."""
        row = self.conn.execute("SELECT token FROM fences WHERE id = ?", (obj_id,)).fetchone()
        if row is not None and row[0] > token:
            return int(row[0])
        if row is None or row[0] < token:
            self.conn.execute("INSERT OR REPLACE INTO fences (id, token) VALUES (?, ?)",
                              (obj_id, token))
        return None

    def calls(self) -> list[Call]:
        rows = self.conn.execute("SELECT * FROM calls ORDER BY seq").fetchall()
        return [{"seq": r["seq"], "time": r["time"], "method": r["method"],
                 "resource_id": r["resource_id"], "engine_id": r["engine_id"], "pid": r["pid"],
                 "token": r["token"], "fenced": bool(r["fenced"]), "finished": r["finished"],
                 "finished_after": r["finished_after"]}
                for r in rows]

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())


class BackendState:
    """The state file of one dummy backend, shared by threads and processes."""

    def __init__(self, folder: str, backend: str | None = None) -> None:
        """Open (creating with ``backend`` set) the state under ``folder``."""
        self.folder = folder
        self.path = os.path.join(folder, DB_NAME)
        self._local = threading.local()
        if backend is not None:
            os.makedirs(folder, exist_ok=True)
        elif not os.path.exists(self.path):
            raise FileNotFoundError(f"no dummy backend state at {self.path}")
        for attempt in tenacity.Retrying(
                retry=tenacity.retry_if_exception(_locked), reraise=True,
                wait=tenacity.wait_random(0.05, 0.25), stop=tenacity.stop_after_delay(30)):
            with attempt:
                self._conn().executescript(_SCHEMA)
                # Look and add under the write lock: engines starting
                # together would otherwise both add the same column.
                with self.transaction() as tx:
                    have = {r[1] for r in tx.conn.execute("PRAGMA table_info(calls)")}
                    for column, decl in _CALL_COLUMNS.items():
                        if column not in have:
                            tx.conn.execute(f"ALTER TABLE calls ADD COLUMN {column} {decl}")
        if backend is not None:
            with self.transaction() as tx:
                tx.conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('backend', ?)", (backend,)
                )
        with self.reading() as tx:
            #: Name of the backend (config group) this state belongs to.
            self.backend: str = tx.meta().get("backend", "")

    def _conn(self) -> sqlite3.Connection:
        # One connection per thread, and a new one after fork: sqlite3
        # connections must not cross either.
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL, as sharemgr's own SQLite database (db/engine.py): in WAL
            # mode a commit survives the death of the process that made it
            # (the crash points and the tests kill processes, never the
            # machine); only an OS crash or power loss can take back the
            # last commits. FULL added an fsync to every driver call.
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A write transaction; ``BEGIN IMMEDIATE`` takes the write lock at
        once so two writers never deadlock upgrading read locks."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield Tx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def reading(self) -> Iterator[Tx]:
        """A read transaction: a consistent snapshot, no write lock."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield Tx(conn)
        finally:
            conn.execute("ROLLBACK")

    def log_call(self, method: str, resource_id: str | None, engine_id: str | None) -> int:
        with self.transaction() as tx:
            return tx.log_call(method, resource_id, engine_id)

    def arrive(self, method: str, resource_id: str, engine_id: str | None,
               token: int) -> tuple[int, int | None]:
        """Log a fenced call as it arrives and accept its token (or refuse
        the call) in the same transaction: ``(seq, newer)``, ``newer`` the
        higher token that fences it, else None."""
        with self.transaction() as tx:
            seq = tx.log_call(method, resource_id, engine_id, token)
            newer = tx.accept_token(resource_id, token)
            if newer is not None:
                tx.conn.execute("UPDATE calls SET fenced = 1, finished = ? WHERE seq = ?",
                                (now(), seq))
            return seq, newer

    def mark_fenced(self, seq: int) -> None:
        with self.transaction() as tx:
            tx.conn.execute("UPDATE calls SET fenced = 1, finished = ? WHERE seq = ?",
                            (now(), seq))

    def log_calls(self, method: str, resource_ids: Sequence[str | None],
                  engine_id: str | None, tokens: dict[str, int] | None = None) -> None:
        """One call log row per resource of a batch call, in one transaction
        (with each resource's fencing token, where it has one)."""
        with self.transaction() as tx:
            for resource_id in resource_ids:
                tx.log_call(method, resource_id, engine_id,
                            (tokens or {}).get(resource_id or ""))


def _locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" that its busy timeout does not cover:
    the first connection after a crash recovers the WAL and others get
    SQLITE_BUSY at once (seen when a chaos kill hit a writer)."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
