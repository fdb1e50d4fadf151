"""Which subvolume a share instance is, for shares taken over by manage.

A share the driver creates is the subvolume named by its instance id. A
managed one keeps the name it had (Ceph cannot rename a subvolume), so the
driver keeps instance id -> subvolume name where every engine of the
backend, on any host, reads it: the omap of one RADOS object per backend,
``<group>.names``, beside the fencing objects (metadata pool, namespace
``sharemgr``). Unmanage leaves ``released.<name>`` -> the id it had, so a
later manage of that subvolume clears what the earlier share left (its NFS
export). A name is looked up on each call that needs it (one omap read)
and kept once found: an id's subvolume never changes while the id lives."""

from __future__ import annotations

import threading

from sharemgr.drivers.cephfs.client import CephClient
from sharemgr.drivers.exceptions import InvalidShareRequest

NAMESPACE = "sharemgr"
RELEASED = "released."


class Names:
    def __init__(self, ceph: CephClient, group: str) -> None:
        self.ceph = ceph
        self.group = group
        self.pool = ""
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def setup(self, pool: str) -> None:
        self.pool = pool

    def _fields(self) -> dict[str, object]:
        return {"pool": self.pool, "namespace": NAMESPACE, "obj": f"{self.group}.names"}

    def of(self, instance_id: str) -> str:
        """The subvolume of ``instance_id`` (its id unless it was managed)."""
        with self._lock:
            if instance_id in self._known:
                return self._known[instance_id]
        name = self.ceph.omap("get", {**self._fields(), "keys": [instance_id]}).get(instance_id)
        if name is None:
            return instance_id
        with self._lock:
            self._known[instance_id] = name
        return name

    def ids_by_name(self) -> dict[str, str]:
        """Managed shares: subvolume name -> instance id."""
        return {name: ident for ident, name in self.ceph.omap("get", self._fields()).items()
                if not ident.startswith(RELEASED)}

    def adopt(self, instance_id: str, name: str) -> str | None:
        """Record ``instance_id`` as subvolume ``name``; the id an earlier
        share of it had, when it was unmanaged (its leftovers to clear).

        :raises InvalidShareRequest: another share instance has it.
        """
        everything = self.ceph.omap("get", self._fields())
        holders = [i for i, n in everything.items()
                   if n == name and not i.startswith(RELEASED) and i != instance_id]
        if holders:
            raise InvalidShareRequest(f"cephfs: subvolume {name} is share instance "
                                      f"{holders[0]}'s")
        if name != instance_id:
            self.ceph.omap("set", {**self._fields(), "keys": [instance_id], "values": [name]})
        with self._lock:
            self._known[instance_id] = name
        return everything.get(RELEASED + name)

    def cleared(self, name: str) -> None:
        """The earlier share's leftovers of ``name`` are gone."""
        self.ceph.omap("rm", {**self._fields(), "keys": [RELEASED + name]})

    def release(self, instance_id: str) -> None:
        """Unmanage: the id no longer names its subvolume."""
        name = self.of(instance_id)
        self.ceph.omap("set", {**self._fields(), "keys": [RELEASED + name],
                               "values": [instance_id]})
        self.forget(instance_id)

    def forget(self, instance_id: str) -> None:
        """The id is gone (deleted or unmanaged)."""
        self.ceph.omap("rm", {**self._fields(), "keys": [instance_id]})
        with self._lock:
            self._known.pop(instance_id, None)
