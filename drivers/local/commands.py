"""Running the host's commands: argument lists only, never a shell, and a
failure reported as one driver error naming the command."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

from sharemgr.drivers.exceptions import ShareBackendException

LOG = logging.getLogger(__name__)

# Long enough for mkfs/resize2fs/e2fsck of a large image, short enough that a
# hung command (a stuck mount) ends as a driver error rather than a hung call.
DEFAULT_TIMEOUT = 600.0


class CommandFailed(ShareBackendException):
    """An external command exited non-zero (or could not run)."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 detail: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
        self.last_line = lines[-1] if lines else ""
        code = "did not run" if returncode is None else f"exited {returncode}"
        super().__init__(
            f"command {' '.join(self.argv)} {code}: {self.last_line or '(no stderr)'}"
            + (f" ({detail})" if detail else ""))


def run(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, check: bool = True,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (a list: no shell) and return its completed process.

    :raises CommandFailed: the command is missing, timed out or (with
        ``check``) exited non-zero.
    """
    argv = [str(a) for a in argv]
    argv[0] = resolve(argv[0])
    LOG.debug("running %s", argv)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             input=input_text, stdin=None if input_text is not None
                             else subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise CommandFailed(argv, None, f"not found: {exc.filename}") from None
    except subprocess.TimeoutExpired:
        raise CommandFailed(argv, None, f"timed out after {timeout:g}s") from None
    if check and out.returncode != 0:
        raise CommandFailed(argv, out.returncode, out.stderr or out.stdout)
    return out


# The sbin folders too: a service started without them on PATH (cron, a
# unit file) still finds mkfs.ext4, losetup, smbd.
SEARCH_PATH = os.pathsep.join(
    [*os.environ.get("PATH", "").split(os.pathsep),
     "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])


def resolve(program: str) -> str:
    """The full path of ``program`` (unchanged when not found: running it
    then fails with a clear 'not found')."""
    return shutil.which(program, path=SEARCH_PATH) or program


def missing(programs: Sequence[str]) -> list[str]:
    """The programs of ``programs`` not found."""
    return [p for p in programs if shutil.which(p, path=SEARCH_PATH) is None]
