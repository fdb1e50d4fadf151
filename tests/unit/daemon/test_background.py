"""daemon/background.py: a task with a thread and a clock of its own runs on
time while another periodic task holds the periodic thread; an offloaded
task, which the periodic thread starts, does not."""
from __future__ import annotations

import threading
import time

from sharemgr.daemon.background import Background


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_alone_task_runs_while_the_periodic_thread_is_held():
    bg = Background()
    held, release = threading.Event(), threading.Event()

    def heartbeat_to_a_silent_database():
        held.set()
        release.wait(10)

    alone, offloaded = [], []
    bg.every(0.01, "heartbeat", heartbeat_to_a_silent_database)
    bg.every(0.02, "membership", lambda: alone.append(1), alone=True)
    bg.every(0.02, "backend_stats", lambda: offloaded.append(1), offload=True)
    bg.start_periodics()
    try:
        assert held.wait(5)
        before_alone, before_offloaded = len(alone), len(offloaded)
        _wait(lambda: len(alone) >= before_alone + 10)
        # The periodic thread is still held: what it starts has not run since.
        assert not release.is_set() and len(offloaded) <= before_offloaded + 1
    finally:
        release.set()
        bg.stop()
    stopped = len(alone)
    time.sleep(0.1)
    assert len(alone) == stopped  # the stop ends the task's thread
