"""The dummy driver's replica lifecycle and revert: ``promote_replica``,
``update_replica_state``, ``revert_to_snapshot`` (Manila's), through the same
call path as every dummy call (``DummyCalls._op``: gates, failures, crash
points). A replica's state is the backend object's ``replica_state``
(``sharemgr-dummy-backend set ID replica_state=out_of_sync`` changes it
behind the manager's back)."""

from __future__ import annotations

from sharemgr.common import vocab
from sharemgr.drivers import base
from sharemgr.drivers.dummy_access import apply_rules
from sharemgr.drivers.dummy_calls import SHARE_KINDS, DummyCalls
from sharemgr.drivers.exceptions import InvalidShareRequest


class DummyReplicas(DummyCalls):
    def promote_replica(self, replica_list: list[base.Replica], replica: base.Replica,
                        access_rules: list[base.AccessRule],
                        share_server: base.ShareServer | None = None
                        ) -> list[base.ReplicaState]:
        with self._op("promote_replica", replica) as tx:
            promoted = self._need(tx, replica["id"], SHARE_KINDS, "replica")
            states: list[base.ReplicaState] = []
            for other in replica_list:
                if other["id"] == replica["id"]:
                    continue
                obj = tx.get(other["id"], SHARE_KINDS)
                if obj is not None and other.get("replica_state") == vocab.REPLICA_ACTIVE:
                    tx.update(obj["id"], replica_state=vocab.REPLICA_IN_SYNC)
                    states.append({"id": obj["id"], "replica_state": vocab.REPLICA_IN_SYNC})
            # The new active serves the share's rules (Manila's promote
            # contract: the manager hands them in for that).
            apply_rules(tx, promoted, replica, access_rules)
            tx.update(replica["id"], replica_state=vocab.REPLICA_ACTIVE)
            states.append({"id": replica["id"], "replica_state": vocab.REPLICA_ACTIVE})
            return states

    def update_replica_state(self, replica_list: list[base.Replica], replica: base.Replica,
                             access_rules: list[base.AccessRule],
                             share_server: base.ShareServer | None = None) -> str | None:
        with self._op("update_replica_state", replica, write=False) as tx:
            obj = self._need(tx, replica["id"], SHARE_KINDS, "replica")
            return obj["replica_state"] or vocab.REPLICA_IN_SYNC

    def revert_to_snapshot(self, snapshot: base.Snapshot,
                           share_access_rules: list[base.AccessRule],
                           snapshot_access_rules: list[base.AccessRule],
                           share_server: base.ShareServer | None = None) -> None:
        with self._op("revert_to_snapshot", snapshot) as tx:
            snap = self._need(tx, snapshot.get("id"), ("snapshot",), "snapshot")
            share = self._need(tx, snap["share_instance_id"], SHARE_KINDS, "share")
            if not snap["size"]:
                raise InvalidShareRequest(f"dummy backend: snapshot {snap['id']} has no size")
            details = dict(share["details"] or {})
            details["reverted_to"] = snap["id"]
            tx.update(share["id"], size=snap["size"], details=details)
