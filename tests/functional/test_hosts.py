"""Many hosts (issue 44), the short version CI runs: three engines on hosts
of their own (network namespaces on a bridge), PostgreSQL primary and
synchronous standby, etcd behind a gateway; a few faults drawn from every
kind (tests/functional/hosts.py, doc/chaos.rst "Many hosts"), then every
invariant. ``SHAREMGR_HOSTS`` and ``SHAREMGR_HOSTS_SEED`` override the count
and the seed (random by default, printed); ``make hosts`` runs the long
version."""

from __future__ import annotations

import json
import os
import random

import pytest

from tests.functional import hosts
from tests.functional.clocks import faked_clock
from tests.functional.etcd_cluster import require_etcd
from tests.functional.faults import Options
from tests.functional.pg_pair import require_pg_binaries


@pytest.mark.long(240)
def test_faults_on_three_hosts(tmp_path):
    """The run makes its own servers: a PostgreSQL pair, an etcd cluster."""
    hosts.require_hosts()
    require_etcd()
    require_pg_binaries()
    faked_clock(tmp_path / "probe")  # libfaketime is there (skip or fail otherwise)
    env = os.environ.get("SHAREMGR_HOSTS_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(10**9)
    count = int(os.environ.get("SHAREMGR_HOSTS", "4"))
    print(f"hosts seed {seed}; reproduce: python -m tests.functional.hosts --faults {count} "
          f"--seed {seed}")
    summary = hosts.run(Options(faults=count, seed=seed, root=tmp_path / "hosts"))
    print(json.dumps(summary, indent=2, default=str))
    assert sum(summary["faults"].values()) == count
    assert not summary["violations"], (f"seed {seed}: " + "\n".join(summary["violations"]))
