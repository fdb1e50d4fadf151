"""share-manager's signals are acted on by a thread of their own
(daemon/signals.py): a signal that lands while the main thread holds a
lock its action needs does not block the main thread for ever."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

# Run in a process of its own: signal handlers and the wakeup fd are the
# whole process's.
SCRIPT = textwrap.dedent("""
    import signal, threading
    from sharemgr.daemon import signals

    stopping = threading.Event()
    {install}
    # The main thread inside the first SIGTERM's Event.set (it holds the
    # event's lock) when the second SIGTERM lands.
    with stopping._cond:
        signal.raise_signal(signal.SIGTERM)
        print("the main thread goes on", flush=True)
    assert stopping.wait(10), "the stop was never acted on"
    print("stopping", flush=True)
""")

THREAD = "signals.watch({signal.SIGTERM: lambda _s: stopping.set()})"
IN_HANDLER = "signal.signal(signal.SIGTERM, lambda _s, _f: stopping.set())"


@dataclasses.dataclass
class Ran:
    returncode: int | None  # None: still running at the timeout (killed)
    stdout: str
    stderr: str


def _text(out: str | bytes | None) -> str:
    return out.decode() if isinstance(out, bytes) else out or ""


def _run(install: str, timeout: float) -> Ran:
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT.format(install=install)],
                              capture_output=True, text=True, timeout=timeout)
        return Ran(done.returncode, done.stdout, done.stderr)
    except subprocess.TimeoutExpired as exc:
        return Ran(None, _text(exc.stdout), _text(exc.stderr))


def test_a_signal_inside_the_stop_does_not_block_the_main_thread():
    out = _run(THREAD, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["the", "main", "thread", "goes", "on", "stopping"]


def test_the_same_signal_acted_on_in_its_handler_blocks_for_ever():
    """What the thread is for: the same sequence with the action in the
    Python handler never gets past the signal."""
    out = _run(IN_HANDLER, timeout=5)
    assert out.returncode is None, (out.returncode, out.stdout, out.stderr)
    assert "goes on" not in out.stdout


def test_sigusr2_logs_every_threads_stack(caplog):
    import logging
    import threading

    from sharemgr.daemon import signals

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="a-waiting-thread")
    worker.start()
    try:
        with caplog.at_level(logging.WARNING):
            signals.log_stacks()
    finally:
        stop.set()
        worker.join()
    [record] = [r for r in caplog.records if "(SIGUSR2)" in r.getMessage()]
    text = record.getMessage()
    assert "thread a-waiting-thread" in text and "thread MainThread" in text
    assert "in wait" in text  # the waiting thread's frame


def test_the_stacks_are_read_with_the_garbage_collector_off(monkeypatch):
    """CPython 3.11's sys._current_frames() makes frame objects while it
    holds the runtime's thread-list lock; a collection then that frees a
    threading.local takes that lock too and hangs the process (a pytest
    worker hung in this module's test). The collector is off meanwhile,
    and on again after."""
    import gc
    import sys

    from sharemgr.daemon import signals

    real, seen = sys._current_frames, []

    def current_frames():
        seen.append(gc.isenabled())
        return real()

    monkeypatch.setattr(sys, "_current_frames", current_frames)
    assert gc.isenabled()
    signals.log_stacks()
    assert seen == [False] and gc.isenabled()
