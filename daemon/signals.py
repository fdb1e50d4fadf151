"""share-manager's signals, acted on by a thread of their own.

A Python signal handler runs in the main thread between two of its
bytecodes, and a second signal's handler runs inside the first's. A
handler that sets a ``threading.Event`` or logs can so block for ever on a
lock its own thread holds: two SIGTERMs in a row left an engine stopping
for ever inside ``Event.set``. Here the handlers do nothing; the C-level
handler writes the signal's number to a pipe (``signal.set_wakeup_fd``),
and the ``signals`` thread reads it and acts, one signal at a time, where
taking a lock is safe.

SIGUSR2 logs every thread's stack (the signal OpenStack's report uses):
what a running engine, or one that does not stop, waits on."""

from __future__ import annotations

import gc
import logging as logging_std
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable

from oslo_log import log as logging
from sharemgr.common import tasks

LOG = logging.getLogger(__name__)


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler: nothing (the pipe carries the signal)."""


def watch(actions: dict[int, Callable[[int], object]]) -> threading.Thread:
    """Act on each signal of ``actions`` on the ``signals`` thread; call
    from the main thread (``set_wakeup_fd`` is its alone)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a full pipe drops a byte, never blocks a handler
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in actions:
        signal.signal(signum, _noted)

    def loop() -> None:
        while True:
            for signum in os.read(read_end, 64):
                action = actions.get(signum)
                if action is None:
                    continue
                try:
                    action(signum)
                except Exception:  # the next signal must still be acted on
                    LOG.exception("acting on signal %s failed", signum)

    return tasks.start_thread(loop, name="signals")


def end_process(code: int, why: str) -> None:
    """End the process now, whatever its other threads do: a driver call
    that outlived ``graceful_shutdown_timeout`` would keep it up for ever
    (its thread is joined at exit) and write its outcome after the engine
    said it had stopped and left the group. Its resource is then settled as
    after a crash. The log is flushed first."""
    LOG.warning("%s: ending the process (exit %s)", why, code)
    logging_std.shutdown()
    os._exit(code)


def _current_frames() -> dict[int, types.FrameType]:
    """``sys._current_frames()`` with the garbage collector off. CPython 3.11
    makes the frame objects while it holds the runtime's thread-list lock;
    a collection that runs then and frees a ``threading.local`` needs that
    lock too, and the process hangs (CPython gh-106883; seen in CI: a test
    of this module hung its pytest worker)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def log_stacks(_signum: int = 0) -> None:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = [f"thread {names.get(ident, '?')} ({ident}):\n"
             + "".join(traceback.format_stack(frame))
             for ident, frame in _current_frames().items()]
    LOG.warning("the stacks of %d threads (SIGUSR2):\n%s", len(parts), "\n".join(parts))


def stacks_on_usr2() -> None:
    """SIGUSR2 logs the stacks in a process whose signals another loop owns
    (an engine process under cotyledon, which holds ``set_wakeup_fd``): the
    handler only writes a byte to a pipe of its own, and a thread of its own
    logs. Call from the main thread."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def noted(_signum: int, _frame: object) -> None:
        try:
            os.write(write_end, b"!")
        except BlockingIOError:  # one already waits: its stacks will do
            pass

    def loop() -> None:
        while os.read(read_end, 64):
            log_stacks()

    signal.signal(signal.SIGUSR2, noted)
    tasks.start_thread(loop, name="stacks")
