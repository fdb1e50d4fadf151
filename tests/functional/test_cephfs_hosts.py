"""Two hosts, one cephfs backend (issue 43): two engines in network
namespaces of their own drive one Ceph cluster through pauses, a partition
and a SIGKILL mid-clone; then database = cluster, no object's lock held by
two engines at once, tokens accepted in order (tests/functional/cephfs_hosts.py)."""

from __future__ import annotations

import json

import pytest

from tests.functional import cephfs_hosts, hosts
from tests.functional.ceph_cluster import PACKAGES, missing
from tests.functional.ceph_shared import _unavailable

pytestmark = pytest.mark.functional


@pytest.mark.long(200)
def test_two_engines_on_two_hosts_drive_one_cluster(tmp_path, pg_url, redis_url):
    hosts.require_hosts()
    if missing():
        _unavailable(f"Ceph tests need {', '.join(missing())} (Debian packages {PACKAGES})")
    summary = cephfs_hosts.run(tmp_path / "run", pg_url, redis_url)
    print(json.dumps(summary, indent=2, default=str))
    assert not summary["violations"], "\n".join(summary["violations"] + summary["log"])
    counts = summary["counts"]
    # The faults came while calls ran, and each kind of call was made.
    assert counts["fenced calls"] > 0 and counts.get("kill mid-clone True"), counts
    assert counts.get("pause in call True") and counts.get("partition in call True"), counts
