"""sharectl and share-manager runs for the functional tests, each a process
of its own forked from one that imported the package once.

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
``SHAREMGR_TEST_SHARECTL=exec`` makes every run do so.

An engine (``Deployment.start``) starts the same way, about 2 s of CPU of
imports less for each of the suite's engine starts: the server's child
forks the engine and waits for it, and tells its wait status back, so that
the test holds a ``Forked`` (the engine's pid, ``poll``, ``wait``,
signals) as it would a ``Popen``. The engine ends as the interpreter's
exit would end it: its non-daemon threads joined, then the ``atexit``
functions. An engine started with its own environment, under a wrapper or
with a ``preexec_fn`` (libfaketime, a network namespace, systemd's
socket) is exec'ed as before, and ``SHAREMGR_TEST_DAEMON=exec`` makes every
start do so. The engine stays in the test worker's process group, as an
exec'ed one does; the server's child ignores SIGINT so that it can tell
the engine's end, and reaps the engine only once the test has read it, so
that its pid cannot be another process's meanwhile. What still differs
from an exec'ed engine: the engines of one worker share the server's hash
seed (sets of strings iterate alike in all of them), and oslo.log names
the program ``<string>`` where it takes a log file's name from it (no test
sets ``log_dir`` without ``log_file``)."""

from __future__ import annotations

import atexit
import json
import os
import select
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
# A console script's first path is its own folder, not the working folder.
sys.path[0] = os.path.dirname(sys.executable)
import atexit, importlib, pkgutil, signal, threading, traceback
import sharemgr.cli.app as app
import sharemgr.daemon.service as daemon

# What a run would import on its way (the commands import the database side
# lazily, so that --help stays quick): imported here once, where it costs
# nothing per run. An import that fails here fails the same way in the run.
names = ["sqlalchemy.dialects.sqlite.pysqlite", "sqlalchemy.dialects.postgresql.psycopg2",
         "sqlalchemy.dialects.mysql.pymysql", "tooz.drivers.redis", "tooz.drivers.file",
         "cliff.formatters.json_format", "cliff.formatters.table",
         "cliff.formatters.value", "cliff.formatters.yaml_format",
         "cliff.formatters.commaseparated", "cliff.formatters.shell"]
for package in ("common", "db", "manager", "drivers", "cli", "daemon", "reconcile",
                "convergence"):
    module = importlib.import_module(f"sharemgr.{package}")
    names += [info.name for info in pkgutil.iter_modules(module.__path__, module.__name__ + ".")
              if not info.ispkg]
for name in names:
    try:
        importlib.import_module(name)
    except ImportError:
        pass


def exit_code(run):
    # run's exit code, as the console script's sys.exit makes it
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return 1
    return code


def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def become(req, fds):
    # This process takes the run's streams, folder, environment and argv.
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [req["program"], *req["argv"]]
    random.seed()


def engine(req, fds, conn):
    # The engine runs in a child of this one, which reports its wait status:
    # a signal that ends the engine is seen as a Popen would see it.
    pid = os.fork()
    if pid == 0:
        # Only this run's streams: the test sees the run end when it ends.
        # In the group of the test's worker, as an exec'ed engine is.
        conn.close()
        become(req, fds)
        code = exit_code(lambda: daemon.main(req["argv"]))
        # As the interpreter's exit: non-daemon threads, then atexit.
        threading._shutdown()
        atexit._run_exitfuncs()
        flush()
        os._exit(code)
    for fd in fds:
        os.close(fd)
    # This one tells the engine's end: a Ctrl-C that reaches the engine
    # (as it would an exec'ed one) must not end this one first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return pid


def status(pid):
    # The engine's end as Popen says it, the engine left unreaped.
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class Run(socketserver.BaseRequestHandler):
    def handle(self):
        # A connection to a server that died must fail, not wait in the
        # queue of a socket this process would keep open.
        self.server.socket.close()
        msg, fds, _flags, _addr = socket.recv_fds(self.request, 1 << 20, 3)
        req = json.loads(msg)
        if req["program"] == "share-manager":
            pid = engine(req, fds, self.request)
            self.request.sendall(f"{pid}\n".encode())
            self.request.sendall(f"{status(pid)}\n".encode())
            # Reaped once the test has read its end (or is gone): until then
            # its pid is not another process's, as a Popen's is not.
            try:
                while self.request.recv(64):
                    pass
            except OSError:
                pass
            os.waitpid(pid, 0)
            return
        self.request.sendall(f"{os.getpid()}\n".encode())
        os.setsid()  # signals for the run's group reach it alone
        become(req, fds)
        code = exit_code(lambda: app.main(req["argv"]))
        flush()
        self.request.sendall(f"{code}\n".encode())
        os._exit(0)


class Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    block_on_close = False
    # An engine's child lives as long as the engine: past max_children the
    # server would wait for one to end before it serves the next run.
    max_children = 100000


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
                folder = tempfile.mkdtemp(prefix="sharemgr-forks-")
                path = os.path.join(folder, "s")
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, text=True)
                assert self._proc.stdout is not None
                if self._proc.stdout.readline().strip() != "ready":
                    raise RuntimeError("the fork server did not start")
                self._socket = path
                atexit.register(self._proc.kill)
            return self._socket

    def address(self) -> str:
        return self._server()

    def engine(self, argv: list[str], log: int) -> Forked:
        """share-manager ``argv``, its output to the file ``log``."""
        with open(os.devnull, "rb") as null:
            conn = connect(self._server(), "share-manager", argv, [null.fileno(), log, log])
        return Forked(conn, ["share-manager", *argv])

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


class Forked:
    """A forked engine, as its test holds it: what ``harness.Engine`` and
    the chaos fleet ask of a ``Popen``."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = b""
        self._gone = False
        self._lock = threading.Lock()
        line = self._line(None)
        if not line:
            conn.close()
            raise RuntimeError(f"{' '.join(args)} was not forked")
        self.pid = int(line)

    def _line(self, timeout: float | None) -> bytes | None:
        """The next line from the server's child (b"" once it has closed),
        or None if none came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _status(self, timeout: float | None, block: bool = True) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self._lock.acquire(block, -1 if timeout is None or not block else timeout):
            return None  # another thread waits for it (as Popen.poll)
        try:
            if self.returncode is None:
                line = None if self._gone else self._line(timeout)
                if line is None and not self._gone:
                    return None
                self._conn.close()
                if not line:
                    self._gone = True
                    raise RuntimeError(f"the fork server's child of {self.pid} ended "
                                       "without its wait status")
                self.returncode = int(line)
            return self.returncode
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        return self._status(0, block=False)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            _signal(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def connect(path: str, program: str, argv: list[str], fds: list[int], cwd: str | None = None,
            env: dict[str, str] | None = None) -> socket.socket:
    """Ask the server at ``path`` for a run of ``program`` ``argv`` with
    ``fds`` as its stdin, stdout and stderr: the connection, on which its
    pid comes, then its exit code."""
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(path)
        req = {"program": program, "argv": argv, "cwd": cwd or os.getcwd(),
               "env": dict(env or os.environ)}
        socket.send_fds(conn, [json.dumps(req).encode()], fds)
        return conn
    except BaseException:
        conn.close()
        raise


def ask(path: str, argv: list[str], fds: list[int], cwd: str | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None
        ) -> tuple[socket.socket, TextIO, int]:
    """Ask the server at ``path`` for a sharectl run of ``argv`` with
    ``fds`` as its stdin, stdout and stderr; the connection, its reader
    (the exit code's line comes next) and the run's pid."""
    conn = connect(path, "sharectl", argv, fds, cwd, env)
    try:
        conn.settimeout(timeout)
        reader = conn.makefile("r")
        return conn, reader, int(reader.readline())
    except BaseException:
        conn.close()
        raise


SHIM = r"""#!{python} -S
# sharectl through a test worker's fork server (tests/functional/forks.py).
import os, signal, sys
sys.path.insert(0, {repo!r})
from tests.functional.forks import ask
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


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _kill(pid: int) -> None:
    _signal(pid, signal.SIGKILL)


_FORKS = Forks()


def run(tool: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """sharectl ``argv``: forked (above), or the installed script ``tool``
    when SHAREMGR_TEST_SHARECTL=exec."""
    if os.environ.get("SHAREMGR_TEST_SHARECTL") == "exec" or not Path(tool).exists():
        return subprocess.run([tool, *argv], capture_output=True, text=True, timeout=timeout)
    return _FORKS.run(argv, timeout)


def engine(tool: str, argv: list[str], log: int) -> Forked | None:
    """share-manager ``argv`` forked (above), or None when
    SHAREMGR_TEST_DAEMON=exec or ``tool`` is not the installed script: then
    the caller starts it."""
    if os.environ.get("SHAREMGR_TEST_DAEMON") == "exec" or not Path(tool).exists():
        return None
    return _FORKS.engine(argv, log)
