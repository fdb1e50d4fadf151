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

from tests.functional import faults


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
