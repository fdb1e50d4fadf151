"""The daemon's database, opened once it answers: tried again while it
does not, as ``[database]`` says, and a stop ends the wait."""

from __future__ import annotations

import threading
from collections.abc import Callable

import tenacity
from oslo_config import cfg
from oslo_log import log as logging
from sharemgr.db.engine import Database, DatabaseUnavailable
from sharemgr.manager import config

LOG = logging.getLogger(__name__)


def _sleep_until(stopping: threading.Event | None) -> Callable[[float], None]:
    """tenacity's sleep: cut short by a stop."""
    if stopping is None:
        return tenacity.nap.sleep

    def sleep(seconds: float) -> None:
        stopping.wait(seconds)

    return sleep


def open_database(conf: cfg.ConfigOpts, stopping: threading.Event | None = None) -> Database:
    """The database, answering: while it does not, tried again up to
    ``[database] max_retries`` times, ``retry_interval`` apart (a stop
    ends the wait)."""
    opts = conf.database
    db = Database(
        config.database_url(conf),
        connect_timeout=opts.connect_timeout,
        pool_size=opts.max_pool_size,
        max_overflow=opts.max_overflow,
        pool_timeout=opts.pool_timeout,
        recycle=opts.connection_recycle_time,
        idle_transaction_timeout=opts.idle_transaction_timeout,
        create=False,  # only 'sharectl db sync' makes one (an empty file said "revision None")
    )
    db.retry = config.retry_policy(conf)
    db.max_events_per_stack = conf.max_events_per_stack
    stop: tenacity.stop.stop_base = tenacity.stop_never if opts.max_retries < 0 else \
        tenacity.stop_after_attempt(opts.max_retries + 1)
    if stopping is not None:
        stop = stop | tenacity.stop_when_event_set(stopping)

    def again(state: tenacity.RetryCallState) -> None:
        LOG.warning("%s; trying again in %ss (try %s of %s)",
                    state.outcome.exception() if state.outcome else None,
                    opts.retry_interval, state.attempt_number + 1,
                    "unlimited" if opts.max_retries < 0 else opts.max_retries + 1)

    for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(DatabaseUnavailable), stop=stop,
            wait=tenacity.wait_fixed(opts.retry_interval), before_sleep=again, reraise=True,
            sleep=_sleep_until(stopping)):
        with attempt:
            db.check()
    return db
