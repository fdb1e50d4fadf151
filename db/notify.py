"""Waking the engines when a request is written, instead of polling for it.

Every pending request is written by ``request_queue.request_add_tx``, which calls
:func:`announce` in the same transaction. Engines of the writing process
are called at once when it commits (:func:`subscribe`: a stack check this
engine queued for itself). On PostgreSQL other processes hear a ``NOTIFY``
(delivered when the transaction commits, dropped if it rolls back) and the
engines ``LISTEN`` (:func:`listen`). On SQLite, after the commit, the writer
replaces a small file beside the database (``<database>.requests``); the
engines of the machine watch its inode and mtime (a ``stat`` call, no SQL).
MariaDB has neither: engines there fall back to their adaptive poll
(``request_poll_max_interval``). A lost wake-up costs latency, never work:
the poll still finds every request.
"""

from __future__ import annotations

import os
import select
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa
from oslo_log import log as logging
from sharemgr.common.outage import Backoff
from sharemgr.db.engine import Database
from sqlalchemy import event
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    import psycopg2.extensions

LOG = logging.getLogger(__name__)

CHANNEL = "sharemgr_requests"
SQLITE_CHECK_SECONDS = 0.02  # how often the wake file is looked at (a stat call)
LISTEN_TIMEOUT = 1.0  # seconds a LISTEN wait lasts before it looks at the stop flag


def wake_file(database: str) -> str:
    return f"{os.path.abspath(database)}.requests"


# Database URL -> this process's callbacks for new requests.
_local: dict[str, list[Callable[[], None]]] = {}
_local_lock = threading.Lock()


def subscribe(db: Database, wake: Callable[[], None]) -> None:
    with _local_lock:
        _local.setdefault(str(db.engine.url), []).append(wake)


def unsubscribe(db: Database, wake: Callable[[], None]) -> None:
    with _local_lock:
        callbacks = _local.get(str(db.engine.url), [])
        if wake in callbacks:
            callbacks.remove(wake)


def announce(session: Session) -> None:
    """A pending request was written in ``session``'s transaction: wake the
    engines once it commits (nobody if it rolls back)."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        # Once per transaction: PostgreSQL folds a transaction's identical
        # notifications into one anyway (a fan-out's report queues many).
        transaction = session.get_transaction()
        if session.info.get("notified") is not transaction:
            session.execute(sa.text(f"NOTIFY {CHANNEL}"))
            session.info["notified"] = transaction
    if session.info.get("announce"):
        return
    session.info["announce"] = True
    db_url = bind.engine.url  # a session is bound to an engine, not a connection
    url = str(db_url)
    path = None
    if bind.dialect.name == "sqlite" and db_url.database not in (None, "", ":memory:"):
        path = wake_file(db_url.database)

    def committed(done: Session) -> None:
        done.info.pop("announce", None)
        with _local_lock:
            callbacks = list(_local.get(url, ()))
        for wake in callbacks:
            wake()
        if path is not None:
            _touch(path)

    event.listen(session, "after_commit", committed, once=True)


def _touch(path: str) -> None:
    # A new inode on every write: two writes within one mtime tick still differ.
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(uuid.uuid4().hex)
        os.replace(tmp, path)
    except OSError as exc:  # only latency is lost: the poll finds the request
        LOG.warning("could not signal new requests through %s: %s", path, exc)


def can_listen(db: Database) -> bool:
    return db.dialect == "postgresql" or (
        db.dialect == "sqlite" and db.engine.url.database not in (None, "", ":memory:"))


def listen(db: Database, wake: Callable[[], None], stopping: threading.Event) -> None:
    """Call ``wake`` whenever requests may have been written, until
    ``stopping`` is set (the body of a thread)."""
    if db.dialect == "postgresql":
        _listen_postgresql(db, wake, stopping)
    elif can_listen(db):
        _watch_file(wake_file(db.engine.url.database or ""), wake, stopping)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _watch_file(path: str, wake: Callable[[], None], stopping: threading.Event) -> None:
    seen = _stamp(path)
    while not stopping.wait(SQLITE_CHECK_SECONDS):
        now = _stamp(path)
        if now != seen:
            seen = now
            wake()


def _listen_postgresql(db: Database, wake: Callable[[], None],
                       stopping: threading.Event) -> None:
    # The database away: one WARNING for the process (common/outage.py),
    # retries with back-off; polling goes on meanwhile.
    backoff = Backoff("listening for new requests", 1.0, 30.0)
    while not stopping.is_set():
        try:
            raw = db.engine.raw_connection()
        except Exception as exc:
            stopping.wait(backoff.failed(exc))
            continue
        try:
            # psycopg2's (untyped): LISTEN, poll, notifies
            conn: psycopg2.extensions.connection = raw.driver_connection
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"LISTEN {CHANNEL}")
            backoff.recovered()
            wake()  # anything written before LISTEN took effect
            while not stopping.is_set():
                if select.select([conn], [], [], LISTEN_TIMEOUT) == ([], [], []):
                    continue
                conn.poll()
                if conn.notifies:
                    conn.notifies.clear()
                    wake()
        except Exception as exc:  # the connection broke: listen again
            stopping.wait(backoff.failed(exc))
        finally:
            try:
                raw.invalidate()  # never back to the pool in LISTEN mode
            except Exception:
                LOG.debug("closing the LISTEN connection failed", exc_info=True)
