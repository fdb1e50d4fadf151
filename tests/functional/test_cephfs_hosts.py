"""Two hosts, one cephfs backend (issue 43): two engines in network
namespaces of their own drive one Ceph cluster through pauses, a partition
and a SIGKILL mid-clone; then database = cluster, no object's lock held by
two engines at once, tokens accepted in order (tests/functional/cephfs_hosts.py)."""

from __future__ import annotations

import json
import types

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


def test_the_lock_check_sees_an_overlap_and_a_token_going_down(tmp_path):
    """The run's fence check reports two engines inside one object's lock
    at once, and an object's tokens accepted out of order; calls one after
    the other pass (the engines' log lines, as share-manager writes them)."""

    def line(t: str, obj: str, token: int, what: str) -> str:
        return (f"2026-11-28 03:10:{t} 4242 DEBUG sharemgr.drivers.cephfs.fencing [req-1] "
                f"cephfs fence: share {obj} token {token} {what} guard fencing.py:85")

    class Log:
        def __init__(self, name: str, lines: list[str]) -> None:
            self.log = tmp_path / name
            self.log.write_text("\n".join(lines) + "\n")

        def text(self) -> str:
            return self.log.read_text()

    run = cephfs_hosts.Run(tmp_path, "postgresql://unused", "redis://unused")
    run.d = types.SimpleNamespace(engines=[
        Log("a.log", [line("01.000", "x", 1, "accepted"), line("02.000", "x", 1, "releasing"),
                      line("05.000", "y", 2, "accepted"), line("06.000", "y", 2, "releasing")]),
        Log("b.log", [line("03.000", "x", 2, "accepted"), line("04.000", "x", 2, "releasing"),
                      line("05.500", "y", 1, "accepted"), line("07.000", "y", 1, "releasing")]),
    ])
    found = run.fence_violations()
    assert len(found) == 2, found
    assert found[0].startswith("object y: a.log held its lock until") and "b.log" in found[0]
    assert found[1] == "object y: tokens accepted in the order [2, 1]"
