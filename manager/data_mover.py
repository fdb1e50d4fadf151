"""The engine's data copy of a host-assisted migration (doc/migration.rst).

rsync copies the source's tree onto the destination's (``-aHAXS
--numeric-ids``: modes, owners, times, ACLs, xattrs, hard links, sparse
files; ``--delete``: a copy cut short and run again ends equal). A copy
holds an exclusive ``flock`` on the destination's root for as long as rsync
runs (only rsync keeps the descriptor, so a paused engine whose rsync ended
holds nothing): a second copy to the same place, from a resumed engine or
another engine of the host, finds it taken and waits for the next run.
rsync dies with the thread that started it (``setpriv --pdeathsig``), so a
killed engine leaves no copy running.

``differences`` is the check before a migration may complete: both trees
walked, every entry's type, mode, owner, size, modification time, xattrs,
link target, content (SHA-256) and hard-link grouping compared.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

# ext4's own folder at a filesystem's root: each side has its own.
SKIPPED_AT_ROOT = ("lost+found",)
RSYNC = ("rsync", "-aHAXS", "--numeric-ids", "--delete", "--info=progress2",
         "--no-inc-recursive", *(f"--exclude=/{name}" for name in SKIPPED_AT_ROOT))
_PERCENT = re.compile(rb"\s(\d{1,3})%\s")
# At most this many differences are named; the rest are counted.
NAMED = 5


class CopyBusy(Exception):
    """Another copy holds the destination (its flock)."""


class CopyStopped(Exception):
    """The copy was stopped before it ended (the reason: cancelled, taken
    over, this engine out of the group); the destination is part-copied."""


class CopyFailed(Exception):
    """rsync failed (its exit status and last words)."""


def _taken(dest: Path) -> int:
    """A descriptor of the destination's root holding its flock (CopyBusy
    when another has it)."""
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise CopyBusy(f"another copy to {dest} is running") from None
        raise
    return fd


@contextlib.contextmanager
def holding(dest: Path) -> Iterator[None]:
    """The destination root's flock, held by this process meanwhile."""
    fd = _taken(dest)
    try:
        yield
    finally:
        os.close(fd)


def copy(source: Path, dest: Path, *, stop: Callable[[], str | None],
         progress: Callable[[int], None], bwlimit_kib: int = 0, poll: float = 1.0) -> None:
    """Copy ``source``'s tree onto ``dest``. ``stop`` is asked every
    ``poll`` seconds: a reason ends rsync and raises CopyStopped.
    ``progress`` gets rsync's overall percentage as it changes."""
    argv = ["setpriv", "--pdeathsig", "KILL", *RSYNC,
            *([f"--bwlimit={bwlimit_kib}"] if bwlimit_kib else []), f"{source}/", f"{dest}/"]
    fd = _taken(dest)
    try:
        why = stop()  # asked again once the flock is held: still this copy's to make?
        if why:
            raise CopyStopped(why)
        # The flock goes with rsync's copy of the descriptor: it lasts as
        # long as rsync runs, not as long as this engine (a paused engine
        # whose rsync ended holds nothing).
        # setpriv sets the parent-death signal and execs rsync: no Python
        # runs in the forked child of this many-threaded process.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(fd,), process_group=0)
    finally:
        os.close(fd)
    seen = _Output(proc)
    try:
        while True:
            try:
                proc.wait(timeout=poll)
                break
            except subprocess.TimeoutExpired:
                pass
            if seen.percent is not None:
                progress(seen.percent)
            why = stop()
            if why:
                raise CopyStopped(why)
    finally:
        if proc.poll() is None:
            # rsync's own children too (its receiver): the flock is theirs.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        seen.join()
    if proc.returncode != 0:
        raise CopyFailed(f"rsync exited {proc.returncode}: {seen.last_error()}")
    progress(100)


class _Output:
    """rsync's progress percentage and its error output, read as it writes
    them (two threads that only read and record: they raise nothing)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.percent: int | None = None
        self.errors: list[bytes] = []
        assert proc.stdout is not None and proc.stderr is not None  # both piped
        self._threads = [threading.Thread(target=self._progress, args=(proc.stdout,),
                                          daemon=True),
                         threading.Thread(target=self._errors, args=(proc.stderr,),
                                          daemon=True)]
        for t in self._threads:
            t.start()

    def _progress(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(Exception):
            buf = b""
            while chunk := stream.read1(4096):  # type: ignore[attr-defined]
                buf = (buf + chunk)[-4096:]
                found = _PERCENT.findall(buf)
                if found:
                    self.percent = min(99, int(found[-1]))

    def _errors(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(Exception):
            for line in stream:
                self.errors = [*self.errors[-4:], line.rstrip()]

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=5)

    def last_error(self) -> str:
        return b" / ".join(self.errors).decode(errors="replace") or "no message"


# The check before complete --------------------------------------------------------


def _unreadable(exc: OSError) -> None:
    # A folder that cannot be listed must not pass as equal.
    raise exc


def _entries(root: Path) -> dict[str, os.stat_result]:
    found: dict[str, os.stat_result] = {}
    for folder, dirs, files in os.walk(root, onerror=_unreadable):
        rel = os.path.relpath(folder, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in SKIPPED_AT_ROOT]
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            found[os.path.normpath(os.path.join(rel, name))] = os.lstat(path)
    return found


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _xattrs(path: Path) -> dict[str, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    return {n: os.getxattr(path, n, follow_symlinks=False) for n in names}


def _same(rel: str, a: Path, b: Path, sa: os.stat_result, sb: os.stat_result) -> str | None:
    """How the entry ``rel`` differs between the trees, or None."""
    if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
        return f"{rel}: another type"
    if (sa.st_mode, sa.st_uid, sa.st_gid) != (sb.st_mode, sb.st_uid, sb.st_gid):
        return f"{rel}: mode or owner"
    if stat.S_ISLNK(sa.st_mode):
        return None if os.readlink(a) == os.readlink(b) else f"{rel}: link target"
    if not stat.S_ISDIR(sa.st_mode) and sa.st_mtime_ns != sb.st_mtime_ns:
        return f"{rel}: modification time"
    if _xattrs(a) != _xattrs(b):
        return f"{rel}: xattrs"
    if stat.S_ISREG(sa.st_mode):
        if sa.st_size != sb.st_size or _digest(a) != _digest(b):
            return f"{rel}: content"
    elif (stat.S_ISCHR(sa.st_mode) or stat.S_ISBLK(sa.st_mode)) and sa.st_rdev != sb.st_rdev:
        return f"{rel}: device"
    return None


def differences(source: Path, dest: Path) -> list[str]:
    """What differs between the two trees ([] when the destination is an
    exact copy); at most ``NAMED`` named, then a count of the rest."""
    a, b = _entries(source), _entries(dest)
    found = [f"{rel}: missing on the destination" for rel in sorted(a.keys() - b.keys())]
    found += [f"{rel}: not on the source" for rel in sorted(b.keys() - a.keys())]
    # Hard links: the entries that share an inode on one side share one on
    # the other.
    groups_a: dict[int, list[str]] = {}
    for rel in sorted(a.keys() & b.keys()):
        why = _same(rel, source / rel, dest / rel, a[rel], b[rel])
        if why:
            found.append(why)
        if not stat.S_ISDIR(a[rel].st_mode) and a[rel].st_nlink > 1:
            groups_a.setdefault(a[rel].st_ino, []).append(rel)
    for names in groups_a.values():
        if len({b[n].st_ino for n in names if n in b}) != 1:
            found.append(f"{names[0]}: hard links to it not kept ({', '.join(names[1:])})")
    if len(found) > NAMED:
        return [*found[:NAMED], f"and {len(found) - NAMED} more"]
    return found


def wait_free(dest: Path, timeout: float) -> bool:
    """Whether the destination's flock could be had within ``timeout``
    seconds (no copy runs there any more)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with holding(dest):
                return True
        except CopyBusy:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
