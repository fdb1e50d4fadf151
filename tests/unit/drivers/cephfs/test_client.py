"""The cephfs driver's client and its librados bridge, run for real
(rados_bridge.py in a process of its own) against a stand-in ``rados``
module: answers by id, errors as errno, timeouts, a bridge that dies."""

from __future__ import annotations

import errno
import sys
import threading
import time

import pytest
from sharemgr.drivers.cephfs.client import CephCallFailed, CephClient

FAKE_RADOS = '''
import json, os, time

class Error(Exception):
    errno = 110

class Rados:
    def __init__(self, conffile, clustername, name):
        self.name = name
    def connect(self, timeout=0):
        if os.environ.get("FAKE_RADOS_DOWN"):
            raise Error("no monitors")
    def mgr_command(self, cmd, inbuf, timeout=0, target=None):
        c = json.loads(cmd)
        p = c["prefix"]
        if p == "slow":
            time.sleep(c["seconds"])
            return 0, json.dumps({"slept": c["seconds"]}).encode(), ""
        if p == "missing":
            return -2, b"", "Error ENOENT: subvolume 'x' does not exist"
        if p == "die":
            os._exit(3)
        return 0, json.dumps({"echo": c, "me": self.name}).encode(), ""
    mon_command = mgr_command
    def shutdown(self):
        pass
'''


@pytest.fixture
def client(tmp_path, monkeypatch):
    (tmp_path / "rados.py").write_text(FAKE_RADOS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    made = CephClient(sys.executable, "/etc/ceph/ceph.conf", "ceph", "manila", timeout=2)
    yield made
    made.close()


def test_a_command_answers_its_json(client):
    answer = client.mgr("fs subvolume info", vol_name="v", sub_name="s")
    assert answer == {"echo": {"prefix": "fs subvolume info", "format": "json",
                               "vol_name": "v", "sub_name": "s"}, "me": "client.manila"}


def test_an_error_is_its_errno(client):
    with pytest.raises(CephCallFailed, match="does not exist") as caught:
        client.mgr("missing")
    assert caught.value.missing and caught.value.code == errno.ENOENT


def test_calls_of_many_threads_run_at_once(client):
    """Each call waits for its own answer, not for the calls before it."""
    client.mgr("warm up")
    answers: dict[int, object] = {}

    def call(i: int) -> None:
        answers[i] = client.mgr("slow", seconds=1.0 if i == 0 else 0.0)

    slow = threading.Thread(target=call, args=(0,))
    slow.start()
    time.sleep(0.2)
    call(1)
    assert 0 not in answers  # the quick call came back while the slow one ran
    slow.join()
    assert answers == {0: {"slept": 1.0}, 1: {"slept": 0.0}}


def test_a_call_past_its_timeout_fails_and_the_next_works(client):
    with pytest.raises(CephCallFailed, match="no answer") as caught:
        client.mgr("slow", seconds=10)
    assert caught.value.code == errno.ETIMEDOUT
    assert client.mgr("slow", seconds=0) == {"slept": 0}


def test_a_bridge_that_dies_fails_its_calls_and_is_started_again(client):
    with pytest.raises(CephCallFailed, match="exited") as caught:
        client.mgr("die")
    assert caught.value.code == errno.EPIPE
    assert client.mgr("slow", seconds=0) == {"slept": 0}


def test_a_cluster_that_cannot_be_reached_says_so(client, monkeypatch):
    monkeypatch.setenv("FAKE_RADOS_DOWN", "1")
    with pytest.raises(CephCallFailed, match="cannot connect: no monitors"):
        client.mgr("anything")


def test_a_python_without_rados_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no rados.py there
    made = CephClient(sys.executable, "/etc/ceph/ceph.conf", "ceph", "manila", timeout=2)
    with pytest.raises(CephCallFailed, match="no rados"):
        made.mgr("anything")
