"""Making NFS-Ganesha re-read its exports and finding what it rejected.

Ganesha takes SIGHUP as "re-read the exports", and an export whose block it
cannot read (a CLIENT it does not understand) is dropped while the others
are served: clients of that share get NFS4ERR_NOENT, and nothing but the log
says so. Ganesha 4 logs the errors of a re-read with the file and line they
are on, *after* "Reread exports complete", from the same thread; so the
driver signals twice and reads the first re-read's errors between the two
"Received SIGHUP" lines, which no other re-read can write into."""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sharemgr.drivers.local import process

RECEIVED = "Received SIGHUP"
ENDED = ("Reread exports complete", "Error while parsing new configuration file")
# 'Config File (/path/exports.conf:12): Expected a client, ...' and
# 'Config file (/path/exports.conf:12) error: syntax error'
_ERROR = re.compile(r"Config [Ff]ile \((?P<path>[^()]*):(?P<line>\d+)\)(?::| error:) ?"
                    r"(?P<text>.*)")
TIMEOUT = 10.0


@dataclass(frozen=True)
class ConfigError:
    path: str
    line: int
    text: str


def _read_from(log_file: Path, offset: int) -> str:
    try:
        with open(log_file, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _size(log_file: Path) -> int:
    try:
        return log_file.stat().st_size
    except OSError:
        return 0


def _wait_for(log_file: Path, offset: int, done: object) -> str:
    """The log from ``offset`` once ``done(text)`` holds (or the time is up:
    a server that logs nothing must not hold the backend for ever)."""
    deadline = time.monotonic() + TIMEOUT
    text = _read_from(log_file, offset)
    while not done(text) and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)
        text = _read_from(log_file, offset)
    return text


def _reread_ended(text: str, start: int) -> bool:
    return any(marker in text[start:] for marker in ENDED)


def reload(pid: int, log_file: Path) -> list[ConfigError]:
    """SIGHUP ``pid`` and return the errors its re-read logged (empty: every
    export was taken)."""
    offset = _size(log_file)
    process.signal_pid(pid, signal.SIGHUP)
    first = _wait_for(log_file, offset, lambda t: RECEIVED in t
                      and _reread_ended(t, t.index(RECEIVED)))
    if RECEIVED not in first:
        return []  # nothing logged: nothing to judge by (the caller's server logs elsewhere)
    start = first.index(RECEIVED)
    # The second re-read's "Received SIGHUP" comes after every line of the
    # first; wait for its own end too, so the exports are settled on return.
    process.signal_pid(pid, signal.SIGHUP)
    both = _wait_for(log_file, offset, lambda t: t.find(RECEIVED, start + 1) >= 0
                     and _reread_ended(t, t.find(RECEIVED, start + 1)))
    second = both.find(RECEIVED, start + 1)
    return errors_in(both[start:second if second >= 0 else len(both)])


def reread(log_file: Path, offset: int) -> list[ConfigError]:
    """Wait for a re-read that began after ``offset`` of the log (one
    someone else signalled: a watched RADOS object's notify) to end; the
    errors it logged."""
    text = _wait_for(log_file, offset, lambda t: RECEIVED in t
                     and _reread_ended(t, t.index(RECEIVED)))
    if RECEIVED not in text:
        return []
    start = text.index(RECEIVED)
    following = text.find(RECEIVED, start + 1)
    return errors_in(text[start:following if following >= 0 else len(text)])


def errors_in(text: str) -> list[ConfigError]:
    found = []
    for line in text.splitlines():
        match = _ERROR.search(line)
        if match:
            found.append(ConfigError(match["path"], int(match["line"]), match["text"].strip()))
    return found
