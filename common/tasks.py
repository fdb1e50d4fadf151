"""Futures and threads whose exceptions are never lost.

An exception raised in a function given to ``executor.submit`` lives in the
future until someone calls ``result()``; if nobody does, it vanishes without
a line in the log (that is how the peer takeover failed unseen on
PostgreSQL). A thread's exception goes to stderr through
``threading.excepthook``, outside oslo.log (not in the log file, no
timestamp). Every future and thread of the daemon goes through here instead.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

ErrorHook = Callable[[BaseException], None]
ExcInfo = tuple[type[BaseException], BaseException, types.TracebackType | None]
T = TypeVar("T")


def log_failure(fut: futures.Future[T], what: str, on_error: ErrorHook | None = None) -> None:
    """Done-callback: log the future's exception with its traceback, then
    give it to ``on_error`` (e.g. to record a failed pass). A cancelled or
    successful future is left alone."""
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is None:
        return
    LOG.error("%s failed: %s: %s", what, type(exc).__name__, exc,
              exc_info=(type(exc), exc, exc.__traceback__))
    if on_error is not None:
        try:
            on_error(exc)
        except Exception:  # the hook must not hide the first failure
            LOG.exception("recording the failure of %s failed too", what)


# The arguments are passed on as they are (a ParamSpec cannot have the
# keyword-only 'what' after them).
def submit_logged(executor: futures.Executor, fn: Callable[..., T], *args: object, what: str,
                  on_error: ErrorHook | None = None, **kwargs: object) -> futures.Future[T]:
    """``executor.submit(fn, *args, **kwargs)``; if ``fn`` raises, the
    exception is logged with its traceback (``what`` names the work in the
    line) and passed to ``on_error``, whether or not anyone waits for the
    result."""
    fut = executor.submit(fn, *args, **kwargs)
    fut.add_done_callback(lambda f: log_failure(f, what, on_error))
    return fut


def start_thread(target: Callable[..., object], *args: object, name: str,
                 daemon: bool = True, on_error: ErrorHook | None = None) -> threading.Thread:
    """Start a thread whose exception, if it ends with one, is logged with
    its traceback through oslo.log (and passed to ``on_error``)."""

    def run() -> None:
        try:
            target(*args)
        except BaseException as exc:
            LOG.error("thread %s died: %s: %s", name, type(exc).__name__, exc,
                      exc_info=(type(exc), exc, exc.__traceback__))
            if on_error is not None:
                try:
                    on_error(exc)
                except Exception:
                    LOG.exception("recording the death of thread %s failed", name)

    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    return thread


def log_periodic_failure(cb: Callable[..., object], kind: str, spacing: float,
                         exc_info: ExcInfo | tuple[None, None, None],
                         traceback: str | None = None) -> None:
    """``on_failure`` for ``futurist.periodics.PeriodicWorker``: a periodic
    task's exception with its traceback, through oslo.log like every other
    (futurist's default logs through its own logger)."""
    name = getattr(cb, "__qualname__", None) or repr(cb)
    etype, exc, tb = exc_info
    if etype is not None and exc is not None and tb is not None:
        LOG.error("periodic task %s (every %.1fs) failed: %s: %s", name, spacing,
                  etype.__name__, exc, exc_info=(etype, exc, tb))
    else:
        LOG.error("periodic task %s (every %.1fs) failed:\n%s", name, spacing, traceback)

