"""tooz coordination: per-resource locks and engine membership."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator

import tenacity
import tooz
from oslo_log import log as logging
from sharemgr.common import tasks
from sharemgr.common.vocab import ENGINE_GROUP
from sharemgr.db.engine import safe_url
from tooz import coordination, locking

LOG = logging.getLogger(__name__)

# Seconds a stop waits for the coordination backend (``Coordinator.stop``).
STOP_WAIT = 5.0

# Locks a pass may hold at once (``Coordinator.locks_held_limit``): open
# files on the file driver; on Redis and etcd, what a heartbeat renews in a
# quarter of the timeout at RENEWAL_SECONDS a lock.
FILE_LOCKS_HELD_LIMIT = 1024
MIN_LOCKS_HELD = 16
RENEWAL_SECONDS = 0.01
TOOZ_DEFAULT_TIMEOUT = 30.0  # tooz's own, for a URL that names none

# The network backends whose server is probed before tooz starts.
_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "etcd3+http": 2379, "etcd3+https": 2379}


def _lease_of(lock: object) -> object | None:
    """The etcd lease a tooz etcd3gw lock was taken with (None for other
    drivers). tooz's etcd lock cannot tell whether it is still held (a
    holder paused past its TTL still says it is) and leaves the lease of a
    failed or released attempt to expire by itself: the lease answers both."""
    lease = getattr(lock, "_lease", None)
    return lease if hasattr(lease, "ttl") and hasattr(lease, "revoke") else None


def _drop_lease(lock: object) -> None:
    """Revoke the lease of a lock attempt that failed or was released, so
    that leases do not pile up on etcd for their TTL (every try-lock of a
    reconciliation pass made one)."""
    lease = _lease_of(lock)
    if lease is not None:
        with contextlib.suppress(Exception):  # gone already: expired, or the key's
            lease.revoke()  # type: ignore[attr-defined]


class CoordinationUnavailable(Exception):
    """The coordination backend cannot be reached (one line for the user)."""


class Coordinator:
    """A started tooz coordinator with this engine's member id."""

    def __init__(self, url: str, member_id: str) -> None:
        self.url = url
        self.member_id = member_id
        try:
            self._coord = coordination.get_coordinator(url, member_id.encode())
        except ModuleNotFoundError as exc:  # redis-py is an extra
            raise CoordinationUnavailable(
                f"cannot use coordination backend {safe_url(url)}: {exc}: install the "
                f"extra it needs (pip install 'sharemgr[{exc.name or 'redis'}]')")
        except Exception as exc:
            raise CoordinationUnavailable(
                f"cannot use coordination backend {safe_url(url)}: {exc}"
            )
        self.joined = False
        # The locks this engine holds now, by name: ``still_holds`` asks the
        # backend whether each is still ours.
        self._held: dict[bytes, object] = {}
        self._held_guard = threading.Lock()

    @property
    def locks_held_limit(self) -> int:
        """Most locks a pass (a reconciliation, a drift check) holds at once.
        tooz's file driver keeps an open file per lock. Redis and etcd renew
        every held lock with a round trip of its own inside each heartbeat,
        after the membership's: on a loaded host each round trip waits for
        the GIL (about 10 ms seen, against 0.3 ms idle), and 300 held locks
        made a heartbeat outlast a 2 s membership timeout: the engine lost its
        locks and its membership in the middle of its own pass. So the
        renewals get a quarter of the shortest timeout tooz renews, at 10 ms
        each (50 locks at 2 s, 250 at the default 10 s)."""
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme == "file":
            return FILE_LOCKS_HELD_LIMIT
        query = urllib.parse.parse_qs(parsed.query)
        ttls = [float(query[k][0]) for k in ("membership_timeout", "lock_timeout", "timeout")
                if k in query]
        ttl = min(ttls) if ttls else TOOZ_DEFAULT_TIMEOUT
        return max(MIN_LOCKS_HELD, min(FILE_LOCKS_HELD_LIMIT,
                                       int(ttl / 4 / RENEWAL_SECONDS)))

    def _probe(self) -> None:
        """Fail at once when a network backend refuses connections: redis-py
        would otherwise retry with back-off for about a minute, and tooz's
        etcd driver for as long as its ``timeout``."""
        parsed = urllib.parse.urlsplit(self.url)
        port = _DEFAULT_PORTS.get(parsed.scheme)
        if port is None:
            return
        try:
            with socket.create_connection((parsed.hostname, parsed.port or port), timeout=5):
                pass
        except OSError as exc:
            raise CoordinationUnavailable(
                f"cannot connect to coordination backend {safe_url(self.url)}: {exc}"
            )

    def start(self, heartbeat: bool = True) -> None:
        self._probe()
        try:
            self._coord.start(start_heart=heartbeat)
        except Exception as exc:
            raise CoordinationUnavailable(
                f"cannot connect to coordination backend {safe_url(self.url)}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            )

    def join_engines(self) -> None:
        with contextlib.suppress(coordination.GroupAlreadyExist):
            self._coord.create_group(ENGINE_GROUP).get()
        self._coord.join_group(ENGINE_GROUP).get()
        self.joined = True

    def rejoin_engines(self) -> None:
        """Join again after the membership expired (tooz never does)."""
        with contextlib.suppress(coordination.GroupAlreadyExist):
            self._coord.create_group(ENGINE_GROUP).get()
        try:
            self._coord.join_group(ENGINE_GROUP).get()
        except coordination.MemberAlreadyExist:
            # tooz's file driver keeps an expired member's file, and its
            # run_watchers forgets the group was joined, so the heartbeat no
            # longer refreshes it: leave (the file goes) and join anew. Only
            # when expired: a live member leaving would look dead to peers.
            if self.member_id not in self.engines():
                with contextlib.suppress(coordination.MemberNotJoined):
                    self._coord.leave_group(ENGINE_GROUP).get()
                self._coord.join_group(ENGINE_GROUP).get()
        self.joined = True

    def leave_engines(self) -> None:
        if self.joined:
            with contextlib.suppress(coordination.ToozError):
                self._coord.leave_group(ENGINE_GROUP).get()
            self.joined = False

    def engines(self) -> set[str]:
        """Member ids of the alive engines."""
        try:
            members = self._coord.get_members(ENGINE_GROUP).get()
        except coordination.GroupNotCreated:
            return set()
        return {m.decode() if isinstance(m, bytes) else m for m in members}

    def is_alive(self, engine_id: str) -> bool:
        return engine_id in self.engines()

    def lock(self, name: bytes) -> locking.Lock:
        """A fresh lock object: tooz's file driver keeps a stale count on a lock
        object reused after a failed non-blocking acquire (doc/specs.rst, architecture §10)."""
        return self._coord.get_lock(name)

    def each_unlocked(self, lock: Callable[[str], bytes], idents: Iterable[str],
                      act: Callable[[str], object], what: str) -> None:
        """A periodic task's work: ``act(ident)`` for each resource whose lock
        (named by ``lock``) this engine gets at once (one held by its request,
        a pass or another engine is left for the next run); a failure about
        one is logged with its traceback and the others go on."""
        for ident in idents:
            with self.try_lock(lock(ident)) as got:
                if not got:
                    continue
                try:
                    act(ident)
                except Exception:
                    LOG.exception("%s of %s failed", what, ident)

    @contextlib.contextmanager
    def try_lock(self, name: bytes) -> Iterator[bool]:
        """Non-blocking: yields True while held, False if someone else holds it."""
        lock = self.lock(name)
        got = lock.acquire(blocking=False)
        if not got:
            _drop_lease(lock)
            yield False
            return
        with self._holding(name, lock):
            yield True

    @contextlib.contextmanager
    def hold(self, name: bytes, timeout: float | None = None) -> Iterator[None]:
        """Blocking acquire (``timeout`` seconds, None = forever); raises
        CoordinationUnavailable when the backend fails while acquiring."""
        lock = self.lock(name)
        try:
            # A number is a timeout, as tooz's docs say (its annotation says bool).
            got = lock.acquire(blocking=True if timeout is None else timeout)  # type: ignore[arg-type]
        except tenacity.RetryError:  # tooz's etcd driver, when the time is up
            got = False
        except coordination.ToozError as exc:
            # Unreachable or timed out (an etcd leader election): not held.
            _drop_lease(lock)
            raise CoordinationUnavailable(
                f"lock {name.decode(errors='replace')} not acquired: the coordination "
                f"backend failed: {type(exc).__name__}: {exc}") from exc
        if not got:
            _drop_lease(lock)
            raise TimeoutError(f"lock {name!r} not acquired in {timeout}s")
        with self._holding(name, lock):
            yield

    @contextlib.contextmanager
    def _holding(self, name: bytes, lock: object) -> Iterator[None]:
        with self._held_guard:
            self._held[name] = lock
        try:
            yield
        finally:
            with self._held_guard:
                if self._held.get(name) is lock:
                    del self._held[name]
            with contextlib.suppress(coordination.ToozError):
                lock.release()  # type: ignore[attr-defined]
            self._forget(lock)
            _drop_lease(lock)

    def _forget(self, lock: object) -> None:
        """tooz stops renewing ``lock``, whatever its release did. tooz's
        etcd driver forgets a lock only when its release deletes the key:
        one whose release failed (etcd unreachable) it went on renewing on
        every heartbeat, so the lock stayed held for ever after the
        partition healed; one found gone (expired in a pause) cost a
        keep-alive per heartbeat for ever, until the heartbeat outlasted
        the membership's TTL and the engine fell out of the group (the
        long many-host run). tooz has no call for this: its driver's set
        of held locks is what its heartbeat renews (Redis's release
        empties it in a ``finally``; the etcd driver's does not)."""
        held = getattr(self._coord, "_acquired_locks", None)
        if isinstance(held, set):
            held.discard(lock)

    def still_holds(self, name: bytes) -> bool:
        """False only when the backend says this engine's lock ``name`` is
        no longer its own (it expired during a pause longer than
        ``lock_timeout`` and may be another engine's) or cannot be asked.
        True otherwise, including for backends that cannot tell (a file
        lock is held until it is released)."""
        with self._held_guard:
            lock = self._held.get(name)
        if lock is None:
            return True
        try:
            return bool(lock.is_still_owner())  # type: ignore[attr-defined]
        except tooz.NotImplemented:
            lease = _lease_of(lock)
            if lease is None:
                return True
            try:
                # Alive: the key holds this lock's value (only its release
                # or the lease's end removes it).
                return bool(lease.ttl() > 0)  # type: ignore[attr-defined]
            except Exception:
                return False
        except coordination.ToozError:
            return False

    def watch_leave(self, callback: coordination.EventCallback[coordination.MemberLeftGroup]
                    ) -> None:
        """Call ``callback(event)`` from ``run_watchers`` when an engine leaves
        the group (or its membership expires)."""
        self._coord.watch_leave_group(ENGINE_GROUP, callback)

    def run_watchers(self) -> None:
        self._coord.run_watchers()

    def heartbeat(self) -> None:
        self._coord.heartbeat()

    def stop(self) -> None:
        """Leave the group and stop tooz, waiting STOP_WAIT seconds at most:
        tooz's heart retries a heartbeat the backend does not answer for
        ever, and its stop waits for the heart, so a stop while Redis or
        etcd is away never returned (the membership expires on the backend
        by itself)."""
        done = threading.Event()

        def stop() -> None:
            try:
                self.leave_engines()
                with contextlib.suppress(Exception):
                    self._coord.stop()
            finally:
                done.set()

        tasks.start_thread(stop, name="coordination-stop")
        if not done.wait(STOP_WAIT):
            LOG.warning("the coordination backend %s did not answer within %.0fs; "
                        "stopping without it", safe_url(self.url), STOP_WAIT)
