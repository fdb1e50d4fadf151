"""Starting, signalling and stopping a server daemon known by its pid file."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.drivers.local import commands


def pid_of(pid_file: Path, program: str) -> int | None:
    """The pid in ``pid_file`` when that process is alive and runs
    ``program`` (a stale file after a reboot may name another process)."""
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError, IndexError):
        return None
    if os.path.basename(cmdline.decode(errors="replace")) != program:
        return None
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie serves nothing
        return None
    return pid


def listening(ip: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


# A daemon may write its pid before it forks and again after, from the
# child: a written pid counts as exited once it has been gone this long.
EXITED_AFTER = 1.0


def start(argv: Sequence[str], pid_file: Path, program: str, ip: str, port: int,
          log_file: Path, timeout: float = 20.0, env: Mapping[str, str] | None = None) -> int:
    """Start a daemon that forks itself away and writes ``pid_file``; wait
    until it listens on ``ip:port``.

    :raises ShareBackendException: it exited, or did not listen in time
        (naming the command and the last line of its log).
    """
    pid_file.unlink(missing_ok=True)
    argv = [commands.resolve(argv[0]), *argv[1:]]
    # Its own session and no inherited descriptors: the daemon outlives the
    # manager (a killed share-manager must not take the shares down).
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **env} if env else None)
    if out.returncode != 0:
        # A daemon's stderr often ends with its banner: its log says why.
        tail = _tail(log_file)
        raise commands.CommandFailed(argv, out.returncode, out.stderr or tail,
                                     detail=f"last line of {log_file}: {tail}" if tail else "")
    deadline = time.monotonic() + timeout
    gone: tuple[int, float] | None = None  # a written pid found not running, since when
    while time.monotonic() < deadline:
        pid = pid_of(pid_file, program)
        if pid is not None and listening(ip, port):
            return pid
        written = _written_pid(pid_file)
        if pid is not None or written is None:
            gone = None
        elif gone is None or gone[0] != written:
            gone = (written, time.monotonic())
        elif time.monotonic() - gone[1] >= EXITED_AFTER:
            # It wrote its pid and that process is gone: it will not listen.
            raise ShareBackendException(
                f"{program} (pid {written}) exited during its start; the end of "
                f"{log_file}: {_tail(log_file, 3) or '(empty)'}")
        time.sleep(0.1)
    raise ShareBackendException(
        f"command {' '.join(argv)} started but {program} does not listen on {ip}:{port} "
        f"after {timeout:g}s: {_tail(log_file, 3) or '(empty log)'}")


def _written_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# Ganesha's prefix ('27/11/2026 16:32:03 : epoch 6b09b083 : host :
# nfs-ganesha-8721[main] '): the rest of its line says what happened.
_GANESHA_PREFIX = re.compile(r"^\d\d/\d\d/\d{4} [\d:]+ : epoch \w+ : \S+ : \S+\[\w+\] ")


def _tail(log_file: Path, count: int = 1) -> str:
    """The last ``count`` lines of a log, joined with ' | '."""
    try:
        lines = [line for line in log_file.read_text(errors="replace").splitlines() if line]
    except OSError:
        return ""
    return " | ".join(_GANESHA_PREFIX.sub("", " ".join(line.split()))
                      for line in lines[-count:])


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid_file: Path, program: str, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL; a no-op when it is not running."""
    pid = pid_of(pid_file, program)
    if pid is None:
        return
    signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_of(pid_file, program) == pid:
        time.sleep(0.1)
    if pid_of(pid_file, program) == pid:
        signal_pid(pid, signal.SIGKILL)
