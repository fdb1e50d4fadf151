"""The watchdog's periodic task spaces its runs by their cost
(convergence/watchdog.py, ``SPACING``; its runs themselves:
test_worker_recovery.py)."""

from __future__ import annotations

from sharemgr.convergence import watchdog


def test_a_long_run_delays_the_next_one_in_proportion(monkeypatch):
    clock = [100.0]
    runs = []
    dog = watchdog.Watchdog(None, None, "e1", None)  # type: ignore[arg-type]
    dog.arm()

    def run_once():
        runs.append(clock[0])
        clock[0] += durations.pop(0)
        return {}

    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(dog, "run_once", run_once)
    durations = [0.01, 1.0, 0.01, 10.0, 0.01]
    dog.run_safely()  # 10 ms: the next at once (a small stack is watched every period)
    clock[0] += 5
    dog.run_safely()  # 1 s: the next no sooner than 20 s after it started
    started = runs[-1]
    for wait in (5, 10, 15):
        clock[0] = started + wait
        dog.run_safely()
    assert len(runs) == 2
    clock[0] = started + watchdog.SPACING * 1.0
    dog.run_safely()
    assert len(runs) == 3
    # A run a stalled database held 10 s: the next within the cap, not 200 s
    # later (a faults run's stack waited three minutes for it).
    clock[0] += 5
    dog.run_safely()
    started = runs[-1]
    clock[0] = started + watchdog.MAX_SPACING_SECONDS - 1
    dog.run_safely()
    assert len(runs) == 4
    clock[0] = started + watchdog.MAX_SPACING_SECONDS
    dog.run_safely()
    assert len(runs) == 5
