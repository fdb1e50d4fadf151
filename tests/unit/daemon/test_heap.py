"""The engine's collector settings (daemon/heap.py): set at start, and what
start-up made frozen once it is up, not when it failed. Each case runs in
an interpreter of its own: freezing pytest's heap would outlive the test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import gc, json, sys
    from sharemgr.daemon import heap, service

    class Fake:
        conf = None
        cut_short = False
        def __init__(self, fails):
            self.fails = fails
            self.stopping = type("E", (), {"is_set": staticmethod(lambda: False)})()
        def start(self):
            if self.fails:
                raise service.StartupError("no database")
        def wait(self):
            pass
        def stop(self):
            pass

    heap.tune()
    before = gc.get_freeze_count()
    fails = sys.argv[1] == "fails"
    if fails:
        Fake.conf = type("C", (), {"log_file": None, "use_journal": False,
                                   "use_syslog": False})()
    code = service.serve(Fake(fails))
    print(json.dumps({"code": code, "threshold": gc.get_threshold(),
                      "frozen_before": before, "frozen": gc.get_freeze_count()}))
""")


def _probe(case: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, case], capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_engine_that_started_freezes_what_start_up_made():
    from sharemgr.daemon import heap

    got = _probe("starts")
    assert got["code"] == 0
    assert tuple(got["threshold"]) == heap.THRESHOLDS
    assert got["frozen_before"] == 0
    # Every module the engine imported, among them.
    assert got["frozen"] > 10_000


def test_an_engine_that_could_not_start_freezes_nothing():
    got = _probe("fails")
    assert got["code"] == 1
    assert got["frozen"] == 0
