"""The names of the tooz locks sharemgr takes, apart from the coordinator
(manager/coordination.py), so that what only names a lock (the resource
kinds, sharectl's commands) does not import tooz."""

from __future__ import annotations


def resource_lock_name(resource_type: str, resource_id: str) -> bytes:
    """The lock an operation on one resource holds (Operations.locked)."""
    return f"sharemgr-{resource_type}-{resource_id}".encode()
