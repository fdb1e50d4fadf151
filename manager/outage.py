"""What counts as an outage of the database or the coordination backend
(back-off and logging: common/outage.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from sharemgr.common.outage import Backoff
from sharemgr.db.engine import DatabaseUnavailable
from sqlalchemy import exc as sa_exc

__all__ = ["Backoff", "backing_off", "is_outage"]

# OperationalError: connection refused or lost, server gone, lock timeout;
# InterfaceError: a connection closed under the driver. Other DBAPI errors
# (integrity, data, programming) are bugs, not outages.
_OUTAGE_TYPES = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
                 sa_exc.TimeoutError, DatabaseUnavailable, ConnectionError)


def _coordination_outages() -> tuple[type, ...]:
    """tooz's errors, and redis-py's connection errors (tooz's Redis driver
    lets them through unwrapped: run_watchers), of the libraries this
    process has loaded: one it never imported raised nothing. So the
    commands that never coordinate (sharectl's stack commands reach this
    module) do not import tooz and redis-py for it."""
    found: list[type] = []
    coordination = sys.modules.get("tooz.coordination")
    if coordination is not None:
        found.append(coordination.ToozError)
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        found += [redis_errors.ConnectionError, redis_errors.TimeoutError]
    return tuple(found)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database or the coordination backend is away."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, _OUTAGE_TYPES + _coordination_outages())


def backing_off(backoff: Backoff, fn: Callable[[], object]) -> None:
    """Run ``fn``: an outage it meets goes to ``backoff`` (the process's one
    WARNING, no traceback; the caller skips runs until ``retry_at``), any
    other exception goes on; a success after failures is the INFO."""
    try:
        fn()
    except Exception as exc:
        if not is_outage(exc):
            raise
        backoff.failed(exc)  # while handling it: the WARNING takes its first line
        return
    backoff.recovered()
