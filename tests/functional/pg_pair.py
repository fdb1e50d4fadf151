"""A PostgreSQL primary and a synchronous streaming standby of the test's own,
on loopback ports (the machine's PostgreSQL 15 binaries, run as the
``postgres`` user), for failover tests: kill the primary, promote the
standby. Every server is stopped by ``stop``, killed or not; a deposed
primary is never started again (it would come back read-write with
diverged data: it is fenced by staying down)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.functional.local_harness import free_port


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def require_pg_binaries() -> Path:
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        problems.append("no postgres user")
    path = _bin()
    if path is None:
        problems.append("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
    if not problems:
        assert path is not None
        return path
    msg = "failover tests need " + "; ".join(problems)
    if IN_CI:
        pytest.fail(msg + " (CI=true: they are required)")
    pytest.skip(msg)


class Pair:
    def __init__(self) -> None:
        self.bin = require_pg_binaries()
        # Not under pytest's folder: it is root's alone, and the servers run
        # as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="sharemgr-pg-"))
        self.ports = {"primary": free_port(), "standby": free_port()}
        self.dirs = {n: self.root / n for n in self.ports}
        self.started: set[str] = set()
        self.primary, self.standby = "primary", "standby"  # the roles, as they move
        user = pwd.getpwnam("postgres")
        self._uid, self._gid = user.pw_uid, user.pw_gid

    def _run(self, *argv: str, timeout: float = 60) -> str:
        out = subprocess.run([str(self.bin / argv[0]), *argv[1:]], capture_output=True,
                             text=True, timeout=timeout, user=self._uid, group=self._gid,
                             cwd="/tmp")
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {out.stdout}{out.stderr}")
        return out.stdout

    def _ctl(self, name: str, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.dirs[name]), "-l", str(self.root / f"{name}.log"),
                  "-w", "-t", "60", *args)

    def psql(self, name: str, sql: str, db: str = "postgres") -> str:
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.ports[name]), "-U",
                              "postgres", "-d", db, "-At", "-c", sql], capture_output=True,
                             text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: {out.stderr}")
        return out.stdout.strip()

    def start(self) -> Pair:
        os.chown(self.root, self._uid, self._gid)
        first = self.dirs["primary"]
        self._run("initdb", "-D", str(first), "-U", "postgres", "--auth=trust", "--no-sync")
        with open(first / "postgresql.conf", "a") as conf:
            conf.write("listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                       "wal_level = replica\nmax_wal_senders = 5\nfsync = off\n"
                       "max_connections = 100\nwal_log_hints = on\n")
        with open(first / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self._write_port("primary")
        self._ctl("primary", "start")
        self.started.add("primary")
        self.psql("primary", "CREATE DATABASE sharemgr")
        self._follow("standby", "primary")
        return self

    def _write_port(self, name: str) -> None:
        # The last line wins: a copy of another server's folder says its port.
        with open(self.dirs[name] / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {self.ports[name]}\n")

    def _follow(self, name: str, primary: str) -> None:
        """``name`` made a synchronous standby of ``primary`` from a fresh copy."""
        shutil.rmtree(self.dirs[name], ignore_errors=True)
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.ports[primary]),
                  "-U", "postgres", "-D", str(self.dirs[name]), "-R", "-X", "stream",
                  "-c", "fast")
        with open(self.dirs[name] / "postgresql.auto.conf", "a") as conf:
            conf.write("synchronous_standby_names = ''\nprimary_conninfo = 'host=127.0.0.1 "
                       f"port={self.ports[primary]} user=postgres application_name=standby'\n")
        self._write_port(name)
        self._ctl(name, "start")
        self.started.add(name)
        # Synchronous only once the standby streams: before, every commit
        # would wait for a standby that is not there.
        deadline = time.monotonic() + 60
        while self.psql(primary, "SELECT count(*) FROM pg_stat_replication "
                        "WHERE state = 'streaming'") != "1":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} does not stream from {primary}")
            time.sleep(0.2)
        self.psql(primary, "ALTER SYSTEM SET synchronous_standby_names = 'standby'")
        self.psql(primary, "SELECT pg_reload_conf()")
        self.primary, self.standby = primary, name

    def url(self) -> str:
        """SQLAlchemy's multi-host URL: whichever host is read-write."""
        hosts = "&".join(f"host=127.0.0.1:{self.ports[n]}" for n in ("primary", "standby"))
        return f"postgresql+psycopg2://postgres@/sharemgr?{hosts}&target_session_attrs=read-write"

    def kill_primary(self) -> None:
        """The primary dies (SIGKILL of its postmaster); it stays down."""
        pid = int((self.dirs[self.primary] / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 9)
        self.started.discard(self.primary)
        deadline = time.monotonic() + 30
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the primary does not die")
            time.sleep(0.05)

    def promote(self) -> None:
        self._ctl(self.standby, "promote")
        self.primary, self.standby = self.standby, self.primary

    def rebuild_standby(self) -> None:
        """The deposed primary, down since it was killed, comes back only as
        a synchronous standby of the new primary (from a fresh copy)."""
        self._follow(self.standby, self.primary)

    def stop(self) -> None:
        for name in list(self.started):
            try:
                self._ctl(name, "stop", "-m", "immediate")
            except Exception:
                pass
        # A killed primary leaves children behind for a moment; then nothing.
        shutil.rmtree(self.root, ignore_errors=True)
