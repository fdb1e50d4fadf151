"""Pause and partition faults (issue 27), the short version CI runs: one
fault of each kind (an engine frozen, preferably inside a driver call; cut
from Redis; from PostgreSQL; from both) on two engines, then every
invariant (tests/functional/faults.py, doc/chaos.rst). ``SHAREMGR_FAULTS``
and ``SHAREMGR_FAULTS_SEED`` override the count and the seed (random by
default, printed); ``make faults`` runs the long version."""

from __future__ import annotations

import json
import os
import random

import pytest

from tests.functional import faults


@pytest.mark.long(75)
def test_pauses_and_partitions_two_engines(tmp_path, pg_url, redis_url):
    env = os.environ.get("SHAREMGR_FAULTS_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(10**9)
    count = int(os.environ.get("SHAREMGR_FAULTS", "4"))
    print(f"faults seed {seed}; reproduce: python -m tests.functional.faults --faults {count} "
          f"--seed {seed}")
    summary = faults.run(faults.Options(faults=count, seed=seed, root=tmp_path / "faults",
                                        db_url=pg_url, redis_url=redis_url))
    print(json.dumps(summary, indent=2, default=str))
    assert sum(summary["faults"].values()) == count
    assert not summary["violations"], (f"seed {seed}: " + "\n".join(summary["violations"]))


def test_a_stack_failed_by_a_fault_is_a_violation():
    """The run's stack invariant reads the reasons the engine writes when an
    operation is cut (not its own failure): planted rows are reported,
    a stack failed for another reason is not."""
    world = {
        "stacks": [{"id": "s1", "name": "a", "action": "CREATE", "status": "FAILED",
                    "status_reason": "Resource CREATE failed: data: create of share instance "
                                     "x: not calling the driver: its membership expired"},
                   {"id": "s2", "name": "b", "action": "UPDATE", "status": "FAILED",
                    "status_reason": "Resource UPDATE failed: data: size 1 < 2"}],
        "rows": [{"id": 7, "name": "data", "action": "UPDATE", "status": "FAILED",
                  "status_reason": "data: extend of share instance y changed while the "
                                   "driver worked (taken over); outcome not written"},
                 {"id": 8, "name": "data", "action": "CREATE", "status": "COMPLETE",
                  "status_reason": None}],
    }
    found = faults.fault_failures(world)
    assert len(found) == 2
    assert found[0].startswith("stack a #s1") and found[1].startswith("stack row data #7")
