"""A backend's host string taken apart (manager/hosts.py): the backend that
serves it, and the host without its pool."""

from __future__ import annotations

import pytest
from sharemgr.manager import hosts


@pytest.mark.parametrize("host, backend, without_pool", [
    ("node1@lvm#pool-a", "lvm", "node1@lvm"),
    ("node1@lvm", "lvm", "node1@lvm"),
    ("node1@ceph#a#b", "ceph", "node1@ceph"),  # only the first '#' starts the pool
    ("node1", "", "node1"),  # no backend named
])
def test_a_host_names_its_backend_and_its_pool(host, backend, without_pool):
    assert hosts.backend_of(host) == backend
    assert hosts.host_of(host) == without_pool
