"""Every driver call's latency, by backend, method and outcome, into
``sharemgr_driver_call_duration_seconds``: the loader wraps the methods of
the driver interface on each driver it constructs, so the calls of
operations, reconciliation passes, drift checks and periodic reports are
all timed in one place, whatever the driver. The same place counts the
calls each thread began (``BEGUN.count``): an operation that meets the
database away before its first driver call knows nothing reached the
backend."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sharemgr.common import metrics
from sharemgr.drivers.base import ShareDriver

# Set up by the loader itself, not called by operations.
_NOT_CALLS = frozenset({"do_setup", "check_for_setup_error"})



class _Begun(threading.local):
    """The driver calls this thread has begun so far (``count``), read as
    an attribute where each operation reads it: a function call there would
    cost more than the count."""

    count = 0


BEGUN = _Begun()

P = ParamSpec("P")
R = TypeVar("R")

# dir(), not vars(): ShareDriver inherits its method groups (drivers/base.py).
METHODS = tuple(sorted(
    name for name in dir(ShareDriver)
    if not name.startswith("_") and callable(getattr(ShareDriver, name))
    and name not in _NOT_CALLS))


def _timed(method: Callable[P, R], backend: str, name: str) -> Callable[P, R]:
    histogram = {outcome: metrics.DRIVER_CALL_SECONDS.labels(backend, name, outcome)
                 for outcome in ("ok", "error")}

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        BEGUN.count += 1
        started = time.monotonic()
        outcome = "error"  # any exception, ShareResourceNotFound included
        try:
            result = method(*args, **kwargs)
            outcome = "ok"
            return result
        finally:
            histogram[outcome].observe(time.monotonic() - started)

    return call


def time_calls(driver: ShareDriver, backend: str) -> ShareDriver:
    """Wrap ``driver``'s interface methods (on the instance: checks of what
    a driver class implements look at the class and are unchanged)."""
    for name in METHODS:
        method = getattr(driver, name, None)
        if method is not None:  # a stand-in that lacks one (a test's fake)
            setattr(driver, name, _timed(method, backend, name))
    return driver
