"""Transactions that lose a conflict are run again.

PostgreSQL ends one of two transactions that wait on each other
(deadlock, SQLSTATE 40P01) or cannot be serialized (40001); MariaDB and
Galera end a deadlock (1213, Galera's certification conflict too) or a
lock wait that timed out (1205). The transaction was rolled back whole,
so running the function that opened it again is safe: the decorated
functions of db/ each open their own transactions and do nothing outside
them. Functions that run in their caller's transaction (``*_tx``) are not
decorated: the caller owns the transaction and retries it whole.

The retries follow oslo.db's ``wrap_db_retry`` and its option names
(``[database] db_max_retries``, ``db_retry_interval``,
``db_inc_retry_interval``, ``db_max_retry_interval``), with tenacity and
jitter, so that the two transactions do not collide again in step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

import tenacity
from oslo_log import log as logging
from sqlalchemy import exc as sa_exc

if TYPE_CHECKING:
    from sharemgr.db.engine import Database
    from sqlalchemy.orm import Session

LOG = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_PG_CODES = frozenset({"40P01", "40001"})
_MYSQL_CODES = frozenset({1213, 1205})


def is_conflict(exc: BaseException) -> bool:
    """Whether the database ended the transaction for a deadlock, a
    serialization failure or a lock wait timeout (run it again)."""
    if not isinstance(exc, sa_exc.DBAPIError) or exc.connection_invalidated:
        return False
    orig = exc.orig
    code = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    if code is not None:
        return code in _PG_CODES
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] in _MYSQL_CODES


class Policy:
    """How often and how far apart (``[database]`` db_* options)."""

    def __init__(self, max_retries: int = 20, interval: float = 1.0,
                 increase: bool = True, max_interval: float = 10.0) -> None:
        self.max_retries = max_retries
        self.interval = interval
        self.increase = increase
        self.max_interval = max(interval, max_interval)

    def wait(self) -> tenacity.wait.wait_base:
        if self.increase:
            return tenacity.wait_random_exponential(multiplier=self.interval,
                                                    max=self.max_interval)
        return tenacity.wait_random(0, self.interval)

    def stop(self) -> tenacity.stop.stop_base:
        return tenacity.stop_never if self.max_retries < 0 else \
            tenacity.stop_after_attempt(self.max_retries + 1)


def _log(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    lines = str(getattr(exc, "orig", exc)).strip().splitlines()
    LOG.info("%s: the database ended the transaction (%s); running it again (try %d)",
             getattr(state.fn, "__qualname__", "transaction"), lines[0] if lines else exc,
             state.attempt_number + 1)


def retry_on_conflict(fn: Callable[Concatenate[Database, P], R]
                      ) -> Callable[Concatenate[Database, P], R]:
    """Run ``fn(db, ...)`` again while it loses a conflict, by ``db.retry``
    (a :class:`Policy`)."""

    @functools.wraps(fn)
    def run(db: Database, *args: P.args, **kwargs: P.kwargs) -> R:
        policy: Policy = db.retry
        return first_then_retry(
            is_conflict, lambda: tenacity.Retrying(
                retry=tenacity.retry_if_exception(is_conflict), wait=policy.wait(),
                stop=policy.stop(), before_sleep=_log, reraise=True),
            fn, db, *args, **kwargs)

    return run


def first_then_retry(retried: Callable[[BaseException], bool],
                     retrying: Callable[[], tenacity.Retrying],
                     fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``retrying()(fn, ...)``, its first try made before the ``Retrying``
    is built: building it cost more than many a transaction it wrapped
    (11 us, several per stack node), and almost every call ends at its first
    try. A first try that fails with an error ``retried`` takes counts as
    tenacity's first: the same counts, waits and logs."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if not retried(exc):
            raise
        pending = [exc]

    @functools.wraps(fn)
    def again(*args: P.args, **kwargs: P.kwargs) -> R:
        if pending:
            raise pending.pop()
        return fn(*args, **kwargs)

    return retrying()(again, *args, **kwargs)


def in_own_transaction(fn: Callable[Concatenate[Session, P], R]
                       ) -> Callable[Concatenate[Database, P], R]:
    """A ``*_tx`` function as one of its own: ``fn(session, ...)`` in a
    transaction it opens, run again while it loses a conflict. The pair
    (``end`` and ``end_tx``) is then written once."""

    @functools.wraps(fn)
    def run(db: Database, *args: P.args, **kwargs: P.kwargs) -> R:
        with db.session() as session:
            return fn(session, *args, **kwargs)

    return retry_on_conflict(run)
