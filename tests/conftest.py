"""Shared fixtures: database URLs for SQLite, PostgreSQL and MariaDB, Redis.

A test that needs a server skips when it is absent, except under CI=true,
where a missing server fails the run.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator

import filelock
import pytest
import redis
import sqlalchemy as sa
from sharemgr.db import migration
from sharemgr.db.engine import Database

PG_ADMIN = os.environ.get("SHAREMGR_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
MY_ADMIN = os.environ.get("SHAREMGR_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("SHAREMGR_TEST_REDIS", "redis://127.0.0.1:6379")

IN_CI = os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``long(seconds)`` run first, the longest first: with
    several workers a test of minutes started last is the suite's tail,
    started first it overlaps the many short ones. (The Makefile's
    ``--maxschedchunk=1`` hands tests out one at a time, so the long ones go
    to different workers.) A stable sort: the rest keep their order."""
    def rank(item: pytest.Item) -> float:
        mark = item.get_closest_marker("long")
        return -mark.args[0] if mark is not None else 0.0

    items.sort(key=rank)


def need_server(name: str, host: str, port: int) -> None:
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        msg = f"{name} at {host}:{port} is not reachable: {exc}"
    if IN_CI:
        pytest.fail(msg + " (CI=true: servers are required)")
    pytest.skip(msg)


def need_program(name: str, package: str) -> None:
    """Skip without ``name`` on the PATH; under CI=true fail instead
    (``make test`` installs it: a missing one is a broken set-up)."""
    if shutil.which(name) is not None:
        return
    msg = f"{name} is not installed (Debian package {package})"
    if IN_CI:
        pytest.fail(msg + " (CI=true: required)")
    pytest.skip(msg)


def _fresh_database(admin_url: str, dialect: str) -> str:
    """Create an empty database of its own for one test; returns its URL."""
    name = f"sm_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return str(sa.engine.make_url(admin_url).set(database=name).render_as_string(False))


def _drop_database(admin_url: str, url: str) -> None:
    name = sa.engine.make_url(url).database
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
    engine.dispose()


# The databases the running test made; dropped once its teardown is over.
_MADE: list[tuple[str, str]] = []
# One thread: the drops go on while the next tests run (a MariaDB drop
# removes a file per table and takes a while); the session's end waits only
# for the last ones.
_DROPPER = concurrent.futures.ThreadPoolExecutor(max_workers=1)
_DROPS: list[concurrent.futures.Future] = []


# The Redis key namespaces the running test used: tooz leaves its groups'
# keys without an expiry, so they go once the test's engines have stopped.
_NAMESPACES: list[str] = []


def _drop_made() -> None:
    while _MADE:
        _DROPS.append(_DROPPER.submit(_drop_database, *_MADE.pop()))


def _drop_namespaces() -> None:
    if not _NAMESPACES:
        return
    client = redis.Redis.from_url(REDIS_URL)
    try:
        while _NAMESPACES:
            keys = list(client.scan_iter(match=f"{_NAMESPACES.pop()}*", count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After every function-scoped fixture of the test has finished with its
    databases (e.g. the engines a deployment started, whatever the order the
    test names its fixtures in), they are dropped in the background; so are
    its Redis namespaces' keys, at once."""
    try:
        return (yield)
    finally:
        _drop_made()
        _drop_namespaces()


@pytest.fixture(scope="session")
def _databases_to_drop():
    """The list a test's database fixtures add to; at the session's end every
    drop is waited for, and one that failed fails the run's teardown."""
    yield _MADE
    _drop_made()
    for done in _DROPS:
        done.result()


@pytest.fixture
def pg_url(_databases_to_drop):
    need_server("PostgreSQL", "127.0.0.1", 5432)
    url = _fresh_database(PG_ADMIN, "postgresql")
    _databases_to_drop.append((PG_ADMIN, url))
    return url


@pytest.fixture
def many_connections():
    """For a test that opens tens of connections to one server at once:
    PostgreSQL here allows 100, which two such tests on two workers would
    use up between them (both failed once with every other test's
    connections besides). Such tests take turns, across the workers."""
    path = os.path.join(tempfile.gettempdir(), "sharemgr-tests-many-connections.lock")
    with filelock.FileLock(path):
        yield


@pytest.fixture
def mysql_url(_databases_to_drop):
    need_server("MariaDB", "127.0.0.1", 3306)
    url = _fresh_database(MY_ADMIN, "mysql")
    _databases_to_drop.append((MY_ADMIN, url))
    return url


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/sharemgr.sqlite"


@pytest.fixture
def redis_url():
    """Redis with a key namespace of the test's own: tests running at once
    on other workers (the same host name, the same engines group) must not
    see each other's engines come and go."""
    need_server("Redis", "127.0.0.1", 6379)
    namespace = f"sm_{uuid.uuid4().hex[:12]}"
    _NAMESPACES.append(namespace)
    return f"{REDIS_URL}?namespace={namespace}"


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db_url(request):
    """The same test on every supported database."""
    return request.getfixturevalue(
        {"sqlite": "sqlite_url", "postgresql": "pg_url", "mysql": "mysql_url"}[request.param]
    )


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    migration.upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def sqlite_db(sqlite_url):
    database = Database(sqlite_url)
    migration.upgrade(database)
    yield database
    database.dispose()


# A reconciliation engine (tests/unit/reconcile_harness.py) -------------------------------
# Unit tests (tests/unit/reconcile/) and functional ones
# (test_limits_races_and_logged_errors) drive the same in-process engine.
# tests/unit/conftest.py puts it on a copy of a migrated SQLite file; a module
# may override ``engine_db`` (test_limits_races_and_logged_errors: every database).


def _reconcile_engine(database, tmp_path):
    from tests.unit.reconcile_harness import Engine, coord_url

    eng = Engine(database, coord_url(tmp_path))
    yield eng
    eng.close()
    assert eng.forbidden_calls() == []


@pytest.fixture
def engine_db(sqlite_db):
    """The database the ``engine`` fixture runs on."""
    return sqlite_db


@pytest.fixture
def engine(engine_db, tmp_path):
    """One engine's reconciliation parts (real coordinator, Operations and
    Reconciler; fake driver) on ``engine_db``; it never called a forbidden method."""
    yield from _reconcile_engine(engine_db, tmp_path)


@pytest.fixture
def any_engine(db, tmp_path):
    """The same engine on SQLite, PostgreSQL and MariaDB."""
    yield from _reconcile_engine(db, tmp_path)


@pytest.fixture
def runner(engine):
    """The engine's PassRunner (reconcile/runner.py), stopped afterwards."""
    import threading

    from sharemgr.reconcile.runner import PassRunner

    stopping = threading.Event()
    passes = PassRunner(engine.reconciler, stopping)
    yield passes
    stopping.set()
    passes.executor.shutdown(wait=False)


def pytest_sessionfinish(session):
    """The run's Ceph cluster stops with the run. Here, not in
    tests/functional/conftest.py: under xdist the controller collects
    nothing and never loads that one (the cluster outlived the run)."""
    if not hasattr(session.config, "workerinput"):  # the controller (or no xdist)
        from tests.functional import ceph_shared

        ceph_shared.stop(session.config)
