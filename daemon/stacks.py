"""Every thread's stack in the log, on SIGUSR2 (the signal OpenStack's
report uses): what a running engine, or one that does not stop, waits on,
without a debugger.

A Python-level handler, run by the main thread with the interpreter lock:
faulthandler's dump of all threads reads other threads' frames from inside
the signal and crashed an engine that was busy."""

from __future__ import annotations

import sys
import threading
import traceback

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


def log_stacks(_signum: int = 0, _frame: object = None) -> None:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = [f"thread {names.get(ident, '?')} ({ident}):\n"
             + "".join(traceback.format_stack(frame))
             for ident, frame in sys._current_frames().items()]
    LOG.warning("the stacks of %d threads (SIGUSR2):\n%s", len(parts), "\n".join(parts))
