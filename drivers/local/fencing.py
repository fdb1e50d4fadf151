"""Per-object serialisation and fencing tokens, on disk.

Each backend object id has a lock file (``fcntl.flock``: it excludes other
threads, which open their own descriptor, and other processes on this
host) and a token file holding the highest fencing token accepted for the
id, replaced atomically (write, fsync, rename) so it survives a kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from sharemgr.drivers.exceptions import FencedCall
from sharemgr.drivers.local import validation


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader (or a crash) sees the old
    content or the new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if absent)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class FenceStore:
    """Locks and highest accepted tokens of the backend's objects."""

    def __init__(self, root: Path) -> None:
        self.locks = root / "locks"
        self.tokens = root / "fence"

    def setup(self) -> None:
        self.locks.mkdir(parents=True, exist_ok=True)
        self.tokens.mkdir(parents=True, exist_ok=True)

    def highest(self, object_id: str) -> int | None:
        path = self.tokens / f"{object_id}.json"
        try:
            return int(json.loads(path.read_text())["token"])
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def guard(self, resource: Mapping[str, object], what: str) -> Iterator[str]:
        """Serialise calls about ``resource["id"]`` and check its fencing
        token before the caller changes anything.

        :raises FencedCall: the token is lower than one already accepted.
        """
        object_id = validation.object_id(resource.get("id"), f"{what} id")
        with file_lock(self.locks / f"{object_id}.lock"):
            self.check(object_id, resource.get("fence_token"), what)
            yield object_id

    def check(self, object_id: str, token: object, what: str) -> None:
        """Accept ``token`` for ``object_id`` (the caller holds its lock):
        None is unfenced (accepted, nothing recorded); a lower token than
        the highest accepted is refused."""
        if token is None:
            return
        if isinstance(token, bool) or not isinstance(token, int):
            raise FencedCall(f"local driver: fence_token {token!r} of {what} {object_id} "
                             "is not an integer")
        highest = self.highest(object_id)
        if highest is not None and token < highest:
            raise FencedCall(f"local driver: {what} {object_id}: fence token {token} is "
                             f"older than {highest}, already accepted; nothing was changed")
        if highest is None or token > highest:
            write_atomic(self.tokens / f"{object_id}.json", json.dumps({"token": token}))
