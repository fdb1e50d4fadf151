"""Fencing tokens kept in the cluster, where every engine's check meets
every other's (doc/cephfs_driver.rst, "Fencing").

The mgr's ``volumes`` commands carry no token, so the check runs beside
them: each backend object (share or snapshot instance id) has a RADOS
object in the file system's metadata pool, namespace ``sharemgr``, named
``<subvolume group>.<id>``. A call takes that object's exclusive lock for
``cephfs_fence_lock_seconds``, refuses a token lower than the one recorded
and records a higher one (``rados_bridge.Fences``), makes its mgr calls,
and releases the lock; while it runs, a thread renews the lock every third
of its duration. A take-over's call waits for the lock, so it cannot pass
its check between an older call's check and that call's changes, unless
the older engine stopped for longer than the lock's duration."""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import uuid
from collections.abc import Iterator, Mapping

from sharemgr.drivers.cephfs.client import CephCallFailed, CephClient
from sharemgr.drivers.exceptions import FencedCall, ShareBackendException

LOG = logging.getLogger(__name__)
NAMESPACE = "sharemgr"


class ClusterFence:
    """``guard(resource, what)``: the block runs holding the object's lock,
    its token accepted."""

    def __init__(self, ceph: CephClient, group: str, duration: int) -> None:
        self.ceph = ceph
        self.group = group
        self.duration = duration
        self.pool = ""  # the metadata pool, known once the driver is set up

    def setup(self, pool: str) -> None:
        """Use ``pool`` and check that the driver's id may write there."""
        self.pool = pool
        try:
            with self.guard({"id": "_setup", "fence_token": 0}, "set-up check"):
                pass
        except CephCallFailed as exc:
            if exc.code in (errno.EPERM, errno.EACCES):
                raise ShareBackendException(
                    f"cephfs driver: {self.ceph.argv[4]} may not write the fencing objects: "
                    f"give it osd 'allow rwx pool={pool} namespace={NAMESPACE}' "
                    "(doc/cephfs_driver.rst)") from exc
            raise

    def _fields(self, object_id: str, cookie: str) -> dict[str, object]:
        return {"pool": self.pool, "namespace": NAMESPACE, "obj": f"{self.group}.{object_id}",
                "cookie": cookie, "duration": self.duration}

    @contextlib.contextmanager
    def guard(self, resource: Mapping[str, object], what: str) -> Iterator[str]:
        """Hold ``resource``'s lock with its ``fence_token`` accepted.

        :raises FencedCall: a higher token was accepted for it before.
        """
        object_id = str(resource.get("id"))
        token = resource.get("fence_token")
        if token is None:  # a caller that fences nothing
            yield object_id
            return
        if isinstance(token, bool) or not isinstance(token, int):
            raise FencedCall(f"cephfs: fence_token {token!r} of {what} {object_id} is not "
                             "an integer")
        fields = self._fields(object_id, uuid.uuid4().hex)
        try:
            # An older holder's lock ends at most a duration after its
            # last renewal.
            self.ceph.fence("enter", {**fields, "token": token}, wait=self.duration + 1)
        except CephCallFailed as exc:
            if exc.code == errno.ESTALE:
                raise FencedCall(f"cephfs: {what} {object_id}: fence token {token} is older "
                                 f"than {exc.out}, already accepted in the cluster; nothing "
                                 "was changed") from exc
            raise
        # The two-host test reads these: a call runs between them.
        LOG.debug("cephfs fence: %s %s token %s accepted", what, object_id, token)
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(stop, fields, what, object_id),
                                   daemon=True, name=f"cephfs-fence-{object_id}")
        renewer.start()
        try:
            yield object_id
        finally:
            stop.set()
            renewer.join()
            LOG.debug("cephfs fence: %s %s token %s releasing", what, object_id, token)
            try:
                self.ceph.fence("exit", fields)
            except CephCallFailed as exc:  # it expires by itself
                LOG.warning("cephfs: %s %s: the fencing lock was not released: %s",
                            what, object_id, exc)

    def _renew(self, stop: threading.Event, fields: dict[str, object], what: str,
               object_id: str) -> None:
        while not stop.wait(self.duration / 3):
            try:
                self.ceph.fence("renew", fields)
            except Exception as exc:  # a thread's failure is logged, never lost
                LOG.error("cephfs: %s %s: the fencing lock could not be renewed (%s): "
                          "another engine may act on it once it expires", what, object_id, exc)
                return
