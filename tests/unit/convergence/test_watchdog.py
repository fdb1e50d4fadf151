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
    monkeypatch.setattr(watchdog.time, "thread_time", lambda: 0.0)  # runs that waited
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


def test_a_run_that_spent_cpu_spaces_the_next_past_the_cap(monkeypatch):
    """The cap is for runs that waited; a run that spent its time on the
    CPU (a large stack's rows and graph) spaces the next by SPACING times
    that time, so the watchdog stays within 1/SPACING of a core."""
    clock, cpu = [100.0], [5.0]
    runs = []
    dog = watchdog.Watchdog(None, None, "e1", None)  # type: ignore[arg-type]
    dog.arm()

    def run_once():
        runs.append(clock[0])
        clock[0] += 3.0  # 3 s, of which 2.5 s on the CPU
        cpu[0] += 2.5
        return {}

    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(watchdog.time, "thread_time", lambda: cpu[0])
    monkeypatch.setattr(dog, "run_once", run_once)
    dog.run_safely()
    started = runs[-1]
    clock[0] = started + watchdog.MAX_SPACING_SECONDS + 1  # past the cap
    dog.run_safely()
    assert len(runs) == 1
    clock[0] = started + watchdog.SPACING * 2.5
    dog.run_safely()
    assert len(runs) == 2


def test_a_run_takes_no_write_lock(rig):
    """The watchdog reads every open check and every point of a traversal
    at each run: on SQLite a read begun as a write (BEGIN IMMEDIATE) held
    every engine's writes up for the whole of it. A run while another
    connection holds the write lock finishes before that lock is let go."""
    import sqlite3
    import threading

    e = rig.engine()
    rig.create("web", "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}}\n"
               "  b: {type: share, properties: {size: 1, proto: NFS}}\n")
    assert rig.db.dialect == "sqlite"
    writer = sqlite3.connect(rig.db.engine.url.database, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    def release() -> None:
        writer.execute("ROLLBACK")
        released.set()

    # Let go in any case: a run that waits for the lock then ends too.
    timer = threading.Timer(20.0, release)
    timer.start()
    try:
        counts = e.watchdog.run_once()
        assert not released.is_set(), "the run waited for the write lock"
        assert counts["retriggered"] == 0  # the leaves' checks are pending: live
    finally:
        timer.cancel()
        if not released.is_set():
            release()
        writer.close()


def test_a_stack_times_out_by_the_databases_clock_not_the_engines(rig, monkeypatch):
    """A traversal's start is written by the database's clock and the
    watchdog judges the timeout by it: an engine whose own clock runs two
    minutes ahead leaves a stack whose one minute has just begun alone
    (it failed the stack when each engine's clock decided), and fails it
    once the database's clock is past the timeout."""
    import datetime

    from sharemgr.convergence import actions
    from sharemgr.db import api, models, stacks

    e = rig.engine()
    text = "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}}\n"
    actions.create(rig.db, "web", actions.load_template(text, rig.backends),
                   disable_rollback=True, timeout_seconds=60)
    ahead = models.utcnow() + datetime.timedelta(minutes=2)
    monkeypatch.setattr(models, "utcnow", lambda: ahead)
    assert e.watchdog.run_once()["timed_out"] == 0
    assert rig.stack("web").status == "IN_PROGRESS"
    monkeypatch.undo()
    # A minute and more ago by the database's clock: timed out.
    stack = rig.stack("web")
    with rig.db.session() as session:
        assert api.conditional_update_tx(session, models.Stack, stack.id, {}, {
            "traversal_started_at": stack.traversal_started_at
            - datetime.timedelta(seconds=61)})
    assert e.watchdog.run_once()["timed_out"] == 1
    failed = stacks.stack_get_by_name(rig.db, "web")
    assert (failed.status, failed.status_reason) == (
        "FAILED", "Stack CREATE timed out after 1 minute(s)")
