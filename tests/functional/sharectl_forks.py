"""sharectl runs for the functional tests, each a process of its own forked
from one that imported sharectl once.

A functional test runs sharectl hundreds of times, and most of each run is
Python importing SQLAlchemy, oslo.config and cliff (about 0.4 s on a quiet
two-core machine, over a second under the suite's load). Here one server
process per test worker imports them, and the modules the commands import
lazily (the database side, the drivers' and the manager's modules, the
SQL dialects: 0.6 s of CPU a run before they were); each run is a fork of
it, with the caller's arguments, environment, working folder and standard
streams (passed as file descriptors), which calls the console script's own
``main`` and exits with its code. So each run is still a new process with
nothing of the others' state, and only the start-up is shared. Tests that
need the installed script itself (its entry point, ``--help`` from a
shell, a process they signal) run it with subprocess, and
``SHAREMGR_TEST_SHARECTL=exec`` makes every run do so."""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

SERVER = r"""
import json, os, random, socket, socketserver, sys
sys.argv[0] = "sharectl"  # cliff names the program from it at import (usage lines)
import importlib, pkgutil
import sharemgr.cli.app as app

# What a run would import on its way (the commands import the database side
# lazily, so that --help stays quick): imported here once, where it costs
# nothing per run. An import that fails here fails the same way in the run.
names = ["sqlalchemy.dialects.sqlite.pysqlite", "sqlalchemy.dialects.postgresql.psycopg2",
         "sqlalchemy.dialects.mysql.pymysql", "tooz.drivers.redis", "tooz.drivers.file",
         "cliff.formatters.json_format", "cliff.formatters.table",
         "cliff.formatters.value", "cliff.formatters.yaml_format",
         "cliff.formatters.commaseparated", "cliff.formatters.shell"]
for package in ("common", "db", "manager", "drivers", "cli"):
    module = importlib.import_module(f"sharemgr.{package}")
    names += [info.name for info in pkgutil.iter_modules(module.__path__, module.__name__ + ".")
              if not info.ispkg]
for name in names:
    try:
        importlib.import_module(name)
    except ImportError:
        pass


class Run(socketserver.BaseRequestHandler):
    def handle(self):
        msg, fds, _flags, _addr = socket.recv_fds(self.request, 1 << 20, 3)
        req = json.loads(msg)
        self.request.sendall(f"{os.getpid()}\n".encode())
        os.setsid()  # signals for the run's group reach it alone
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["sharectl", *req["argv"]]
        random.seed()
        try:
            code = app.main(req["argv"])
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        self.request.sendall(f"{code}\n".encode())
        os._exit(0)


class Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    block_on_close = False


server = Server(sys.argv[1], Run)
print("ready", flush=True)
server.serve_forever()
"""


class Forks:
    """One forking server for this process (a test worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._socket = ""

    def _server(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                folder = tempfile.mkdtemp(prefix="sharectl-forks-")
                path = os.path.join(folder, "s")
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, text=True)
                assert self._proc.stdout is not None
                if self._proc.stdout.readline().strip() != "ready":
                    raise RuntimeError("the sharectl fork server did not start")
                self._socket = path
                atexit.register(self._proc.kill)
            return self._socket

    def address(self) -> str:
        return self._server()

    def run(self, argv: list[str], timeout: float, cwd: str | None = None,
            env: dict[str, str] | None = None, input_text: str | None = None
            ) -> subprocess.CompletedProcess:
        path = self._server()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                tempfile.TemporaryFile() as inp:
            if input_text is not None:
                inp.write(input_text.encode())
                inp.seek(0)
            conn, reader, pid = ask(path, argv, [inp.fileno(), out.fileno(), err.fileno()],
                                    cwd, env, timeout)
            deadline = time.monotonic() + timeout
            with conn:
                try:
                    line = reader.readline()
                except TimeoutError:
                    line = ""
            if not line:
                _kill(pid)
                if time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(["sharectl", *argv], timeout)
                raise RuntimeError(f"sharectl {' '.join(argv)} died without an exit code")
            code = int(line)
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(
                ["sharectl", *argv], code, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


def ask(path: str, argv: list[str], fds: list[int], cwd: str | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None
        ) -> tuple[socket.socket, TextIO, int]:
    """Ask the server at ``path`` for a run of ``argv`` with ``fds`` as its
    stdin, stdout and stderr; the connection, its reader (the exit code's
    line comes next) and the run's pid."""
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(path)
        req = {"argv": argv, "cwd": cwd or os.getcwd(), "env": dict(env or os.environ)}
        socket.send_fds(conn, [json.dumps(req).encode()], fds)
        conn.settimeout(timeout)
        reader = conn.makefile("r")
        return conn, reader, int(reader.readline())
    except BaseException:
        conn.close()
        raise


SHIM = r"""#!{python} -S
# sharectl through a test worker's fork server (tests/functional/sharectl_forks.py).
import os, signal, sys
sys.path.insert(0, {repo!r})
from tests.functional.sharectl_forks import ask
conn, reader, pid = ask({socket!r}, sys.argv[1:], [0, 1, 2])


def stop(signum, _frame):
    os.kill(pid, signal.SIGKILL)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
line = reader.readline()
sys.exit(int(line) if line else 1)
"""


def commands(folder: Path) -> Path:
    """A folder of the venv's commands for a program that runs them by path
    (ansible): ``sharectl`` there runs through this worker's fork server,
    the others are links to the installed scripts. Not with
    SHAREMGR_TEST_SHARECTL=exec: then the venv's own folder is returned."""
    real = Path(sys.executable).parent
    if os.environ.get("SHAREMGR_TEST_SHARECTL") == "exec":
        return real
    folder.mkdir(parents=True, exist_ok=True)
    # No python here: a link to the venv's interpreter outside the venv's
    # folder is the system's Python (the venv is found next to it).
    for script in real.iterdir():
        if script.name != "sharectl" and not script.name.startswith("python"):
            (folder / script.name).symlink_to(script)
    shim = folder / "sharectl"
    shim.write_text(SHIM.format(python=sys.executable, socket=_FORKS.address(),
                                repo=str(Path(__file__).resolve().parents[2])))
    shim.chmod(0o755)
    return folder


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_FORKS = Forks()


def run(tool: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """sharectl ``argv``: forked (above), or the installed script ``tool``
    when SHAREMGR_TEST_SHARECTL=exec."""
    if os.environ.get("SHAREMGR_TEST_SHARECTL") == "exec" or not Path(tool).exists():
        return subprocess.run([tool, *argv], capture_output=True, text=True, timeout=timeout)
    return _FORKS.run(argv, timeout)
