"""The chaos's settings: its two setups, the engines' options, the driver
methods it crashes, delays and reads, and a run's options and result."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sharemgr.common import vocab

SETUPS = ("sqlite", "servers")
PG_ADMIN = os.environ.get("SHAREMGR_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHAREMGR_TEST_REDIS", "redis://127.0.0.1:6379")

# Short liveness and waits so that a run is fast: a dead engine is known dead
# after 2 s (membership_timeout, the minimum; on Redis also its locks' expiry),
# which the startup pass waits for.
ENGINE_OPTIONS = {
    "DEFAULT": {
        "startup_reconciliation_wait_seconds": "2",
        "peer_reconciliation_grace_seconds": "1",
        "graceful_shutdown_timeout": "5",
        "request_workers": "4",
        "reconciliation_workers": "4",
    },
    "coordination": {"membership_timeout": "2"},
}

CREATE_METHODS = frozenset({
    "create_share", "create_share_from_snapshot", "create_snapshot", "create_replica",
    "create_share_group", "create_share_group_snapshot", "setup_server", "create_backup",
})
DELETE_METHODS = frozenset({
    "delete_share", "delete_snapshot", "delete_replica", "delete_share_group",
    "delete_share_group_snapshot", "teardown_server", "delete_backup",
})
# Where the dummy driver may be told to crash (dummy_crash_before/after).
# (Weighted by repetition toward the methods a run calls most; the status
# methods run in reconciliation passes, after a crash.)
CRASH_METHODS = (
    "create_share", "create_share", "create_share", "create_share_from_snapshot",
    "delete_share", "delete_share", "delete_share", "extend_share", "shrink_share",
    "create_snapshot", "create_snapshot", "delete_snapshot", "delete_snapshot",
    "create_replica", "delete_replica", "get_share_status", "get_share_status",
    "get_snapshot_status", "get_replica_status",
)
DELAY_METHODS = (
    "create_share", "create_share_from_snapshot", "delete_share", "extend_share",
    "shrink_share", "create_snapshot", "delete_snapshot", "create_replica", "delete_replica",
    "get_share_status",
)
# Calls that change nothing on the backend (the status reads, the listing).
READ_METHODS = frozenset({
    "get_share_status", "get_snapshot_status", "get_replica_status", "get_share_group_status",
    "get_share_group_snapshot_status", "get_share_statuses", "get_snapshot_statuses",
    "get_replica_statuses", "get_share_group_statuses", "get_share_group_snapshot_statuses",
    "list_shares", "ensure_shares", "get_backend_info", "check_for_setup_error", "do_setup",
})
FAIL_METHODS = ("extend_share", "create_snapshot.s", "create_replica.m", "delete_snapshot.m",
                "create_share_from_snapshot.s")

MANUAL_SHARE = re.compile(r"^m\d+$")
STACK_NAME = re.compile(r"^s\d+$")
STACK_MADE = re.compile(r"^(s\d+)-([a-z]+\d*(?:\.\d+)?)-")  # a group member: grp3.1


def kept_resource(name: str | None) -> bool:
    """Made by a stack for a resource with ``deletion_policy: retain``
    (templates.py names them ``keep<N>``): it may outlive its stack."""
    m = STACK_MADE.match(name or "")
    return m is not None and m.group(2).startswith("keep")


ENGINE_ID = re.compile(r"share-manager starting: engine (\S+?),")
ERROR_STATUSES = vocab.ERROR_STATUSES

# A run's narrative: writes one stamped line.
Log = Callable[[str], None]


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def parse_time(text: str) -> datetime.datetime:
    stamp = datetime.datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)


# ---------------------------------------------------------------------------
# Options and results


@dataclasses.dataclass
class Options:
    kills: int = 30  # SIGKILLs plus crash-point exits before the killing stops
    seed: int | None = None
    setup: str = "sqlite"  # sqlite: one engine, file locks; servers: PG + Redis, two engines
    root: Path | None = None  # state, logs, report; a temporary folder when None
    db_url: str | None = None  # servers: an empty database (made and dropped when None)
    redis_url: str | None = None
    workers: int = 3  # threads firing sharectl (each call takes ~1 s to start)
    kill_interval: tuple[float, float] = (1.0, 4.0)  # seconds between two kills
    restart_delay: tuple[float, float] = (0.0, 1.5)  # a dead engine is restarted after
    settle_timeout: float = 90.0
    max_stacks: int = 6
    max_manual_shares: int = 10
    max_duration: float | None = None  # safety cap of the chaos phase (default from kills)
    keep: bool = True  # keep ``root`` (False: removed after a run without violations)
    teardown: bool = True  # at the end, delete every stack and check nothing is left
    echo: bool = False  # narrate on stderr


@dataclasses.dataclass
class Result:
    seed: int
    setup: str
    engines: int
    kills: dict[str, int]
    operations: dict[str, Any]
    stacks: dict[str, Any]
    time: dict[str, float]
    violations: list[str]
    notes: list[str]
    root: str
    reproduce: str

    def summary(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def report(self) -> str:
        lines = [f"chaos seed {self.seed}, setup {self.setup} ({self.engines} engine(s)): "
                 f"{len(self.violations)} violation(s)",
                 f"reproduce: {self.reproduce}",
                 f"state, logs and chaos-report.json: {self.root}"]
        lines += [f"  - {v}" for v in self.violations]
        if self.notes:
            lines.append("notes:")
            lines += [f"  * {n}" for n in self.notes]
        return "\n".join(lines)


def reproduce_command(opts: Options, seed: int) -> str:
    cmd = (f"{sys.executable} -m tests.functional.chaos --kills {opts.kills} --seed {seed} "
           f"--setup {opts.setup}")
    default = Options()
    if tuple(opts.kill_interval) != default.kill_interval:
        cmd += f" --kill-interval {opts.kill_interval[0]:g} {opts.kill_interval[1]:g}"
    if opts.workers != default.workers:
        cmd += f" --workers {opts.workers}"
    return cmd
