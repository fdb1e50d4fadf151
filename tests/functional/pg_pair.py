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
        primary, standby = self.dirs["primary"], self.dirs["standby"]
        self._run("initdb", "-D", str(primary), "-U", "postgres", "--auth=trust",
                  "--no-sync")
        with open(primary / "postgresql.conf", "a") as conf:
            conf.write(f"port = {self.ports['primary']}\nlisten_addresses = '127.0.0.1'\n"
                       "unix_socket_directories = ''\nwal_level = replica\n"
                       "max_wal_senders = 5\nfsync = off\nmax_connections = 100\n")
        with open(primary / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self._ctl("primary", "start")
        self.started.add("primary")
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.ports["primary"]),
                  "-U", "postgres", "-D", str(standby), "-R", "-X", "stream")
        with open(standby / "postgresql.conf", "a") as conf:
            conf.write(f"port = {self.ports['standby']}\n")
        with open(standby / "postgresql.auto.conf", "a") as conf:
            conf.write("primary_conninfo = 'host=127.0.0.1 port="
                       f"{self.ports['primary']} user=postgres application_name=standby'\n")
        self._ctl("standby", "start")
        self.started.add("standby")
        # Synchronous only once the standby streams: before, every commit
        # would wait for a standby that is not there.
        deadline = time.monotonic() + 30
        while self.psql("primary", "SELECT count(*) FROM pg_stat_replication "
                        "WHERE state = 'streaming'") != "1":
            if time.monotonic() > deadline:
                raise RuntimeError("the standby does not stream")
            time.sleep(0.2)
        self.psql("primary", "ALTER SYSTEM SET synchronous_standby_names = 'standby'")
        self.psql("primary", "SELECT pg_reload_conf()")
        self.psql("primary", "CREATE DATABASE sharemgr")
        return self

    def url(self) -> str:
        """SQLAlchemy's multi-host URL: whichever host is read-write."""
        hosts = "&".join(f"host=127.0.0.1:{self.ports[n]}" for n in ("primary", "standby"))
        return f"postgresql+psycopg2://postgres@/sharemgr?{hosts}&target_session_attrs=read-write"

    def kill_primary(self) -> None:
        """The primary dies (SIGKILL of its postmaster); it stays down."""
        pid = int((self.dirs["primary"] / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 9)
        self.started.discard("primary")
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
        self._ctl("standby", "promote")

    def stop(self) -> None:
        for name in list(self.started):
            try:
                self._ctl(name, "stop", "-m", "immediate")
            except Exception:
                pass
        # A killed primary leaves children behind for a moment; then nothing.
        shutil.rmtree(self.root, ignore_errors=True)
