"""What the property test of stacks (test_convergence_properties.py) runs on:
stack_rig's in-process engines, plus control over *when* an engine's work
happens and *where it dies*.

Every ``Database.session()`` an engine's thread opens is a boundary between
two transactions. Work of an engine — a check request, a watchdog run — runs
as a :class:`Task` in a thread of its own that stops at a chosen boundary and
waits there, with no transaction open, while the test does other things
(another engine's check, a user's update); it is then let go again, or its
engine dies there: :class:`Crash`, raised at the boundary, unwinds the
thread without writing anything more (every later boundary of that thread
raises it too), and the engine leaves the engines group — to its peers it is
a dead engine whose requests, locks and half-done operations are left for
reconciliation and the watchdog. Only one thread runs at a time,
so a run is fully determined by the steps the test takes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import api, migration, models, records
from sharemgr.db.engine import Database
from sharemgr.manager.coordination import Coordinator
from sharemgr.reconcile.reconciler import Reconciler
from sqlalchemy.orm import Session

from tests.unit.stack_rig import HOST, Engine, FixedPace, Rig

T = TypeVar("T")
TASK_TIMEOUT = 60.0  # seconds a task may run between two boundaries before we call it stuck


class Crash(BaseException):
    """A simulated engine death at a transaction boundary. A BaseException,
    so that no ``except Exception`` of the engine records it as a failure:
    a dead engine records nothing."""


class TaskStuck(AssertionError):
    pass


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.depth = 0  # open sessions of this thread
        self.tooz = 0  # tooz locks this thread holds
        self.task: Task | None = None


class SteppedDatabase(Database):
    """A Database whose session entries are the boundaries tasks stop at."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.local = _ThreadState()
        self.transactions = 0  # sessions opened, all threads: a cheap "did anything happen"

    @contextlib.contextmanager
    def _boundary(self, open_: Callable[[], contextlib.AbstractContextManager[T]]) -> Iterator[T]:
        local = self.local
        task = local.task
        if task is not None:
            task.boundary(local.depth, local.tooz)
        local.depth += 1
        self.transactions += 1
        try:
            with open_() as session:
                yield session
        finally:
            local.depth -= 1

    # The same contexts as the database's, wrapped: a generator's context
    # manager each (typeshed's name for it is private).
    def session(self) -> contextlib.AbstractContextManager[Session]:  # type: ignore[override]
        return self._boundary(super().session)

    # A read is a boundary too (others may write in between), on a plain
    # connection likewise.
    def reading(self) -> contextlib.AbstractContextManager[Session]:  # type: ignore[override]
        return self._boundary(super().reading)

    def connect(self) -> contextlib.AbstractContextManager[sa.Connection]:  # type: ignore[override]
        return self._boundary(super().connect)


class Task:
    """Work of one engine in a thread of its own, stopped at boundaries.

    ``go(n)`` lets it pass ``n`` more boundaries and returns when it waits at
    the next one (``paused``) or has ended (``done``); ``go(None)`` runs it to
    its end. A boundary inside a nested session or while the thread holds a
    tooz lock is never a place to wait (another engine could need that lock)
    but is a place to die: ``go(n, crash=True)`` kills the engine at the
    boundary after the next ``n``."""

    def __init__(self, rig: PropertyRig, engine: PEngine, label: str,
                 fn: Callable[[], object]) -> None:
        self.rig = rig
        self.engine = engine
        self.label = label
        self._fn = fn
        self._cv = threading.Condition()
        self._budget: int | None = 0  # boundaries it may pass; None: any number
        self._crash_at_stop = False
        self._dying = False  # every boundary from now on raises Crash
        self.state = "new"  # new | running | paused | done
        self.passed = 0  # boundaries passed
        self.crashed = False
        self.result: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"task-{label}", daemon=True)

    # In the task's thread ----------------------------------------------------------

    def _main(self) -> None:
        self.rig.db.local.task = self
        try:
            self.result = self._fn()
        except Crash:
            self.crashed = True
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.rig.db.local.task = None
            with self._cv:
                self.state = "done"
                self._cv.notify_all()

    def boundary(self, depth: int, tooz: int) -> None:
        with self._cv:
            if self._dying:
                raise Crash()
            if self._budget is not None and self._budget <= 0:
                if self._crash_at_stop:
                    self._dying = True
                    raise Crash()
                if depth == 0 and tooz == 0:
                    self.state = "paused"
                    self._cv.notify_all()
                    self._cv.wait_for(lambda: self.state == "running")
                    if self._dying:
                        raise Crash()
            if depth == 0:
                self.passed += 1
                if self._budget is not None:
                    self._budget -= 1

    # In the test's thread -----------------------------------------------------------

    def go(self, boundaries: int | None = None, crash: bool = False) -> None:
        with self._cv:
            if self.state == "done":
                return
            self._budget = boundaries
            self._crash_at_stop = crash and boundaries is not None
            first = self.state == "new"
            self.state = "running"
            self._cv.notify_all()
        if first:
            self._thread.start()
        self._wait()

    def kill(self) -> None:
        """The engine died while this task waited: unwind it."""
        with self._cv:
            if self.state == "done":
                return
            self._dying = True
            if self.state == "new":
                self.state = "done"
                self.crashed = True
                return
            self.state = "running"
            self._cv.notify_all()
        self._wait()

    def _wait(self) -> None:
        with self._cv:
            if not self._cv.wait_for(lambda: self.state in ("paused", "done"),
                                     timeout=TASK_TIMEOUT):
                raise TaskStuck(f"task {self.label} neither reached a boundary nor ended "
                                f"in {TASK_TIMEOUT}s (blocked on a lock?)")

    @property
    def done(self) -> bool:
        return self.state == "done"

    def __repr__(self) -> str:
        return f"<Task {self.label} {self.state} after {self.passed} boundaries>"


class _CountingCoordinator:
    """Counts the tooz locks each thread holds (a task never waits while it
    holds one), otherwise the engine's Coordinator."""

    def __init__(self, inner: Coordinator, local: _ThreadState) -> None:
        self._inner = inner
        self._local = local

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextlib.contextmanager
    def hold(self, name: bytes, timeout: float | None = None) -> Iterator[None]:
        with self._inner.hold(name, 30.0 if timeout is None else timeout):
            self._local.tooz += 1
            try:
                yield
            finally:
                self._local.tooz -= 1

    @contextlib.contextmanager
    def try_lock(self, name: bytes) -> Iterator[bool]:
        with self._inner.try_lock(name) as got:
            if got:
                self._local.tooz += 1
            try:
                yield got
            finally:
                if got:
                    self._local.tooz -= 1


class PEngine(Engine):
    """stack_rig's Engine without a heartbeat thread (the coordination URL's
    membership timeout is long instead), so that an engine starts and dies in
    milliseconds; its tooz locks are counted per thread; its watchdog is armed
    when the rig starts it (:meth:`PropertyRig.start_engine`)."""

    heartbeat = False
    arm_watchdog = False
    rig: PropertyRig

    def __init__(self, rig: PropertyRig, host: str, backends: dict) -> None:  # noqa: D107
        super().__init__(rig, host, backends)
        self.alive = True
        self.tasks: list[Task] = []
        self.number = 0

    def wrap_coordinator(self, coordinator: Coordinator) -> _CountingCoordinator:
        return _CountingCoordinator(coordinator, self.rig.db.local)

    def reconciler(self) -> Reconciler:
        return Reconciler(self.rig.db, self.drivers, self.coordinator, self.operations,
                          self.host, self.engine_id, 2)

    def die(self) -> None:
        """Leave the engines group at once (to the others this engine is
        dead); tooz's own shutdown takes a second, so it runs aside."""
        self.alive = False
        self.raw_coordinator.leave_engines()
        _stop_aside(self.raw_coordinator)

    def stop(self) -> None:
        if self.alive:
            self.die()

    def __repr__(self) -> str:
        return f"<engine {self.number}{'' if self.alive else ' (dead)'}>"


_stopping: list[threading.Thread] = []
_template_db: list[str] = []


def _migrated_sqlite() -> str:
    """A migrated, empty SQLite database file, made once per process."""
    if not _template_db:
        path = os.path.join(tempfile.mkdtemp(prefix="sharemgr-props-db-"), "migrated.sqlite")
        db = Database(f"sqlite:///{path}")
        try:
            migration.upgrade(db)
        finally:
            db.dispose()
        _template_db.append(path)
    return _template_db[0]


def _stop_aside(coordinator: Coordinator) -> None:
    thread = threading.Thread(target=coordinator.stop, name="tooz-stop", daemon=True)
    thread.start()
    _stopping[:] = [t for t in _stopping if t.is_alive()] + [thread]


def join_stopping() -> None:
    """Wait for the coordinators being stopped aside (end of a test)."""
    for thread in list(_stopping):
        thread.join(10)


class PropertyRig(Rig):
    """A Rig over a :class:`SteppedDatabase` whose engines are PEngines."""

    db: SteppedDatabase
    engines: list[PEngine]  # type: ignore[assignment]

    def __init__(self, root: Path, db_url: str | None = None,
                 backends: dict | None = None) -> None:
        # SQLite databases are copies of one migrated file; a server database
        # is migrated and wiped by the caller (wipe()).
        if db_url is None:
            root.mkdir(parents=True, exist_ok=True)
            db_url = f"sqlite:///{root}/sharemgr.sqlite"
            shutil.copyfile(_migrated_sqlite(), root / "sharemgr.sqlite")
        self.started = 0
        super().__init__(root, db_url, backends,
                         coordination_url=f"file://{root}/coordination?timeout=36000")

    def open_database(self, url: str) -> SteppedDatabase:
        # No migration run: alembic costs a quarter of a second even with
        # nothing to do, and examples are many.
        return SteppedDatabase(url)

    def engine(self, host: str = HOST, backends: dict | None = None) -> PEngine:
        engine = super().engine(host, backends)
        assert isinstance(engine, PEngine)  # new_engine's
        return engine

    def new_engine(self, host: str, backends: dict) -> PEngine:
        self.started += 1
        engine = PEngine(self, host, backends)
        engine.number = self.started
        # As the daemon's request loop lets it: a check's report takes the
        # next pending checks to run in its thread. Odd engines end their
        # fast paths' nodes in batches of three (``Reporter.end_many``, its
        # crash points among every engine's), even ones one by one.
        engine.stacks.take_checks_when(lambda: engine.alive)
        engine.worker.pace = FixedPace(3 if engine.number % 2 else 1)
        return engine

    def live(self) -> list[PEngine]:
        return [e for e in self.engines if e.alive]

    def tasks(self) -> list[Task]:
        """Tasks that wait at a boundary, oldest first."""
        return [t for e in self.engines for t in e.tasks if not t.done]

    # Engine work ----------------------------------------------------------------------

    def check_task(self, engine: PEngine, request_id: int) -> Task:
        """Claim one pending check request and run it, as the daemon's request
        thread does (the claim is the task's first transaction)."""

        def work() -> str | None:
            req = claim_request(self.db, request_id, engine.engine_id)
            return None if req is None else engine.run(req)

        return self._task(engine, f"check#{request_id}@e{engine.number}", work)

    def watchdog_task(self, engine: PEngine) -> Task:
        return self._task(engine, f"watchdog@e{engine.number}", engine.watchdog.run_once)

    def _task(self, engine: PEngine, label: str, fn: Callable[[], object]) -> Task:
        task = Task(self, engine, label, fn)
        engine.tasks.append(task)
        return task

    def kill(self, engine: PEngine) -> None:
        """The engine dies: its waiting tasks unwind (writing nothing), it
        leaves the engines group."""
        for task in engine.tasks:
            task.kill()
        engine.die()

    def reconcile(self, engine: PEngine) -> dict:
        """A reconciliation pass on the engine's host (what a start, a peer's
        death or ``sharectl reconcile run`` triggers); pending requests for a
        pass (the watchdog asks for them) are served by it."""
        asked = [r for r in api.request_claim(self.db, [engine.host], engine.engine_id, 50,
                                              any_host=False)]
        result = engine.reconciler().run(trigger="manual" if asked else "startup")
        for req in asked:
            api.request_finish(self.db, req.id, engine.engine_id, "done", None)
        return result

    def start_engine(self) -> PEngine:
        """A new engine as the service starts one: the startup reconciliation
        pass, then the watchdog is armed and runs."""
        engine = self.engine()
        self.reconcile(engine)
        engine.watchdog.arm()
        engine.watchdog.run_once()
        return engine

    def close(self) -> None:
        for engine in self.engines:
            for task in engine.tasks:
                with contextlib.suppress(BaseException):
                    task.kill()
        super().close()


def claim_request(db: Database, request_id: int, engine_id: str) -> models.Request | None:
    """Claim one pending request (by id), as ``api.request_claim`` would."""
    with db.session() as session:
        won = records.rowcount(session.execute(
            sa.update(models.Request)
            .where(models.Request.id == request_id, models.Request.status == "pending")
            .values(status="running", engine_id=engine_id, claimed_at=models.utcnow())
            .execution_options(synchronize_session=False)
        )) == 1
        if not won:
            return None
        row = session.get(models.Request, request_id)
        session.expunge(row)
        return row


def pending_checks(db: Database) -> list[models.Request]:
    with db.session() as session:
        return list(
            session.scalars(
                sa.select(models.Request)
                .where(
                    models.Request.resource_type == vocab.STACK_RESOURCE,
                    models.Request.action == vocab.ACTION_CHECK,
                    models.Request.status == "pending",
                )
                .order_by(models.Request.id)
            )
        )


def open_requests(db: Database) -> list[models.Request]:
    """Requests of any kind that are pending or running."""
    with db.session() as session:
        return list(session.scalars(
            sa.select(models.Request).where(models.Request.status.in_(("pending", "running")))
            .order_by(models.Request.id)))


def wipe(url: str) -> None:
    """Empty every table of a migrated database (one database serves many
    examples on PostgreSQL)."""
    db = Database(url)
    try:
        migration.upgrade(db)
        tables = [t for t in models.Base.metadata.sorted_tables]
        with db.session() as session:
            if db.dialect == "postgresql":
                names = ", ".join(t.name for t in tables)
                session.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            else:
                for table in reversed(tables):
                    session.execute(table.delete())
    finally:
        db.dispose()


TRANSIENT = vocab.TRANSIENT_STATUSES
