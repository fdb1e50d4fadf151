"""Engines: start, kill, watch, restart."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sharemgr.drivers.dummy_state import DB_NAME

from tests.functional.chaos.options import (
    CRASH_METHODS,
    DELAY_METHODS,
    ENGINE_ID,
    FAIL_METHODS,
    Log,
    Options,
    parse_time,
    utcnow,
)
from tests.functional.harness import Deployment, Engine

# Seconds an engine may take to name itself in its log before a kill may
# land in its imports anyway (one that hangs there must still be killed).
STARTUP_GRACE = 15.0


@dataclasses.dataclass
class EngineRecord:
    slot: int
    engine: Engine
    knobs: dict[str, str]
    config: str
    started: datetime.datetime
    signal_sent: str | None = None  # "kill" or "term"
    signalled_at: datetime.datetime | None = None
    ended: datetime.datetime | None = None
    how: str | None = None  # sigkill, sigterm, crash-point, exit N
    returncode: int | None = None
    spared: int = 0  # kills it was spared so that its crash point may fire
    _engine_id: str | None = None
    # When it was frozen or cut off (the faults run): its locks and leases
    # may have run out meanwhile and its work been taken over, as after a death.
    interrupted: list[tuple[datetime.datetime, datetime.datetime]] = dataclasses.field(
        default_factory=list)

    @property
    def died_at(self) -> datetime.datetime | None:
        """When it died: the SIGKILL, else when it was seen gone (a crash
        point: its last driver call; a SIGTERM it did not stop for in time,
        escalated to a SIGKILL: not the SIGTERM, after which it lived on)."""
        if self.how == "sigkill" and self.signal_sent == "kill" and self.signalled_at is not None:
            return self.signalled_at
        return self.ended

    @property
    def armed(self) -> bool:
        return any(k.startswith("dummy_crash_") for k in self.knobs)

    @property
    def engine_id(self) -> str | None:
        if self._engine_id is None:
            found = ENGINE_ID.search(self.engine.text())
            self._engine_id = found.group(1) if found else None
        return self._engine_id

    def begun(self) -> bool:
        """Past its imports: it has named itself in its log (its start up,
        ensure and reconciliation are still ahead), or it has been
        starting for longer than a start can take."""
        return self.engine_id is not None or \
            (utcnow() - self.started).total_seconds() > STARTUP_GRACE

    @property
    def alive(self) -> bool:
        return self.ended is None and self.engine.proc.poll() is None

    def describe(self) -> dict[str, Any]:
        return {"slot": self.slot, "engine_id": self.engine_id, "log": str(self.engine.log),
                "knobs": self.knobs, "started": self.started.isoformat(),
                "ended": self.ended.isoformat() if self.ended else None, "how": self.how,
                "returncode": self.returncode}


def random_knobs(rng: random.Random) -> dict[str, str]:
    knobs: dict[str, str] = {}
    if rng.random() < 0.45:
        when = rng.choice(("before", "after"))
        # '.s': only resources of stacks (named s<N>-...), '.m': only the others.
        method = rng.choice(CRASH_METHODS) + rng.choice(("", "", "", ".s", ".s", ".m"))
        knobs[f"dummy_crash_{when}"] = method
    if rng.random() < 0.75:
        methods = rng.sample(DELAY_METHODS, rng.randint(1, 4))
        knobs["dummy_method_delays"] = ",".join(
            f"{m}:{rng.choice((0.3, 0.6, 1.0, 2.0))}" for m in methods)
    if rng.random() < 0.08:
        knobs["dummy_fail_methods"] = rng.choice(FAIL_METHODS)
    return knobs


class Fleet:
    """The engine slots (one per engine that should run) and the killer."""

    def __init__(self, d: Deployment, slots: int, rng: random.Random, opts: Options,
                 log: Log, busy: Callable[[], bool] | None = None) -> None:
        self.d = d
        self.busy = busy or (lambda: True)  # is a traversal or an operation under way?
        self.rng = rng
        self.opts = opts
        self.log = log
        self.current: list[EngineRecord | None] = [None] * slots
        self.restart_at: list[float] = [0.0] * slots
        self.records: list[EngineRecord] = []
        self.counts: collections.Counter = collections.Counter()
        self.unexpected: list[str] = []
        self.generation = 0
        self.lock = threading.Lock()

    # -- one slot

    def start(self, slot: int, knobs: dict[str, str]) -> EngineRecord:
        self.generation += 1
        path = self.d.root / f"engine-{slot}-{self.generation}.conf"
        self.d.write_config(path, dummy=knobs)
        engine = self.d.start(wait=False, config=path, name=f"slot{slot}-gen{self.generation}")
        rec = EngineRecord(slot, engine, knobs, str(path), utcnow())
        with self.lock:
            self.records.append(rec)
            self.current[slot] = rec
        self.counts["starts"] += 1
        self.log(f"start slot {slot} ({engine.log.name}) knobs {knobs or 'none'}")
        return rec

    def signal(self, rec: EngineRecord, how: str) -> None:
        if rec.signal_sent is not None or rec.engine.proc.poll() is not None:
            return
        rec.signal_sent, rec.signalled_at = how, utcnow()
        sig = signal.SIGKILL if how == "kill" else signal.SIGTERM
        try:
            rec.engine.proc.send_signal(sig)
        except ProcessLookupError:
            pass
        self.log(f"{'SIGKILL' if how == 'kill' else 'SIGTERM'} slot {rec.slot} "
                 f"({rec.engine.log.name})")

    def reap(self, rec: EngineRecord) -> bool:
        """Note how an engine ended; True if it just did."""
        rc = rec.engine.proc.poll()
        if rc is None or rec.ended is not None:
            return False
        rec.ended, rec.returncode = utcnow(), rc
        if rec.signal_sent == "kill" and rc == -signal.SIGKILL:
            rec.how = "sigkill"
        elif rc == 137 and rec.armed:
            rec.how = "crash-point"
            # It crashed inside its last driver call: that is when it died.
            rec.ended = self.last_call_time(rec) or rec.ended
        elif rec.signal_sent == "term" and rc in (0, -signal.SIGTERM):
            rec.how = "sigterm"
        elif rec.signal_sent == "term" and rc == 1 and \
                "driver calls still running after graceful_shutdown_timeout" in rec.engine.text():
            rec.how = "sigterm-cut"  # calls outlived the grace: the process ended with them
        elif rec.signal_sent == "term" and rc == -signal.SIGKILL:
            rec.how = "sigkill"  # did not stop in time, escalated
        else:
            rec.how = f"exit {rc}"
            tail = "\n".join(rec.engine.text().splitlines()[-15:])
            self.unexpected.append(
                f"engine: {rec.engine.log.name} exited {rc} on its own "
                f"(knobs {rec.knobs or 'none'}); log tail:\n{tail}")
        self.counts[rec.how] += 1
        self.log(f"slot {rec.slot} ended: {rec.how}")
        return True

    def last_call_time(self, rec: EngineRecord) -> datetime.datetime | None:
        if rec.engine_id is None:
            return None
        path = Path(self.d.sections["dummy"]["dummy_state_path"]) / DB_NAME
        try:
            conn = sqlite3.connect(path, timeout=30)
            try:
                row = conn.execute("SELECT time FROM calls WHERE engine_id = ? "
                                   "ORDER BY seq DESC LIMIT 1", (rec.engine_id,)).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return None
        return parse_time(row[0]) if row else None

    @property
    def kills(self) -> int:
        return self.counts["sigkill"] + self.counts["crash-point"]

    # -- the chaos loop

    def run(self, stop: threading.Event, deadline: float) -> None:
        rng = self.rng
        lo, hi = self.opts.kill_interval
        next_kill = time.monotonic() + rng.uniform(lo, hi)
        postponed = 0
        while not stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            for slot, rec in enumerate(self.current):
                if rec is not None and self.reap(rec):
                    self.restart_at[slot] = now + rng.uniform(*self.opts.restart_delay)
                if rec is not None and rec.signal_sent == "term" and rec.ended is None and \
                        rec.signalled_at is not None and \
                        (utcnow() - rec.signalled_at).total_seconds() > 20:
                    rec.engine.proc.send_signal(signal.SIGKILL)  # stuck stopping
                if (rec is None or rec.ended is not None) and now >= self.restart_at[slot]:
                    knobs = random_knobs(rng) if rng.random() < 0.7 else {}
                    self.start(slot, knobs)
            if self.kills >= self.opts.kills:
                break
            if now >= next_kill and postponed < 6 and not self.busy() and rng.random() < 0.6:
                # Mostly kill while something is under way: wait a little.
                postponed += 1
                next_kill = now + 0.25
            elif now >= next_kill:
                postponed = 0
                live = [r for r in self.current
                        if r is not None and r.ended is None and r.signal_sent is None]
                begun = [r for r in live if r.begun()]
                if live and not begun:
                    # Only engines still importing: on a loaded machine every
                    # kill landed there (a start took over 3 s), and a run of
                    # 400 kills did 200 requests in 16 minutes. Wait for one.
                    next_kill = now + 0.25
                    time.sleep(0.05)
                    continue
                live = begun
                # An engine with a crash point is spared a few times: its own
                # crash, inside a driver call, is the better kill.
                spared = False
                for rec in [r for r in live if r.armed and r.spared < 3]:
                    if rng.random() < 0.7:
                        rec.spared += 1
                        live.remove(rec)
                        spared = True
                if live:
                    victims = live if len(live) > 1 and rng.random() < 0.15 else \
                        [rng.choice(live)]
                    how = "kill" if rng.random() < 0.8 else "term"
                    for victim in victims:
                        self.signal(victim, how)
                next_kill = now + rng.uniform(lo, hi) / (2 if spared and not live else 1)
            time.sleep(0.05)

    def calm(self, timeout: float = 60) -> None:
        """Every slot runs an engine without knobs, up and serving."""
        for rec in self.current:
            if rec is not None and rec.ended is None and rec.knobs:
                self.signal(rec, "term")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in self.current:
                if rec is not None:
                    self.reap(rec)
                    if rec.signal_sent == "term" and rec.ended is None and \
                            rec.signalled_at is not None and \
                            (utcnow() - rec.signalled_at).total_seconds() > 20:
                        rec.engine.proc.send_signal(signal.SIGKILL)
            if all(r is None or r.ended is not None or (not r.knobs and r.signal_sent is None)
                   for r in self.current):
                break
            time.sleep(0.1)
        for slot, rec in enumerate(self.current):
            if rec is None or rec.ended is not None:
                self.start(slot, {})
        for rec in self.current:
            assert rec is not None  # each slot started again above
            rec.engine.wait_for_log("share-manager up", timeout=60)

    def watch(self) -> None:
        """While settling: note engines that end (none should)."""
        for rec in self.current:
            if rec is not None:
                self.reap(rec)

    def stop_all(self) -> None:
        for rec in self.records:
            if rec.engine.proc.poll() is None:
                rec.engine.proc.send_signal(signal.SIGTERM)
        for rec in self.records:
            try:
                rec.engine.proc.wait(30)
            except subprocess.TimeoutExpired:
                rec.engine.proc.kill()
                rec.engine.proc.wait(30)
