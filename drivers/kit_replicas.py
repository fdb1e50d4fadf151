"""The conformance kit's checks of revert and the replica lifecycle
(``revert_to_snapshot``, ``promote_replica``, ``update_replica_state``):
mixed into ``DriverConformanceTests``; a driver that lacks a method is skipped,
naming it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sharemgr.common import vocab
from sharemgr.drivers.base import Replica, Share
from sharemgr.drivers.kit_calls import Kit
from sharemgr.drivers.kit_report import fail, method_name

REPLICA_STATES = (vocab.REPLICA_ACTIVE, vocab.REPLICA_IN_SYNC, vocab.REPLICA_OUT_OF_SYNC,
                  vocab.REPLICA_ERROR)


class ReplicaChecks:
    """Checks of revert to snapshot and of replicas' promotion and state."""

    def test_revert_to_snapshot_returns_the_share_to_the_snapshot(self, kit: Kit) -> None:
        share = kit.create_share(size=1)
        snap = kit.snapshot_dict(share)
        kit.create_call(snap, "create_snapshot", snap, kit.server, what="a snapshot of a share")
        kit.ok("revert_to_snapshot", snap, [], [], kit.server,
               what="a share to its latest snapshot")
        # Idempotent: a revert retried finds the share reverted.
        kit.ok("revert_to_snapshot", snap, [], [], kit.server,
               what="a share reverted to that snapshot already")
        status = kit.status("get_share_status", share, "a share reverted to a snapshot")
        if status is not None and (status["status"], status.get("size", 1)) != (vocab.AVAILABLE, 1):
            fail(f"after {method_name(kit.driver, 'revert_to_snapshot')}, get_share_status "
                 f"reports {status!r}; the share must be available at the snapshot's size (1)")

    def test_revert_to_an_unknown_snapshot_is_a_driver_error(self, kit: Kit) -> None:
        share = kit.create_share(size=1)
        kit.expect_error("revert_to_snapshot", kit.snapshot_dict(share), [], [], kit.server,
                         what="a snapshot the backend never had")

    def _replicated(self, kit: Kit) -> tuple[Share, Replica]:
        share = kit.create_share(size=1)
        replica = kit.replica_dict(share)
        kit.create_call(replica, "create_replica", replica, share, kit.server,
                        what="a new replica")
        share["replica_state"] = vocab.REPLICA_ACTIVE
        return share, replica

    def test_promote_replica_answers_the_new_states(self, kit: Kit) -> None:
        share, replica = self._replicated(kit)
        name = method_name(kit.driver, "promote_replica")
        answer = kit.ok("promote_replica", [share, replica], replica, [], kit.server,
                        what="a replica of a share")
        if answer is None:
            return
        if not isinstance(answer, Sequence) or isinstance(answer, str) or not all(
                isinstance(a, Mapping) and a.get("replica_state") in REPLICA_STATES
                and a.get("id") in (share["id"], replica["id"]) for a in answer):
            fail(f"{name} returned {answer!r}; it must return None or a list of "
                 "{'id': <a replica's id>, 'replica_state': ...}")
        states = {a["id"]: a["replica_state"] for a in answer}
        if states.get(replica["id"], vocab.REPLICA_ACTIVE) != vocab.REPLICA_ACTIVE:
            fail(f"{name} says the promoted replica is {states[replica['id']]!r}, not 'active'")
        if states.get(share["id"]) == vocab.REPLICA_ACTIVE:
            fail(f"{name} leaves the old active replica 'active' too")

    def test_update_replica_state_answers_a_state(self, kit: Kit) -> None:
        share, replica = self._replicated(kit)
        state = kit.ok("update_replica_state", [share, replica], replica, [], kit.server,
                       what="a replica of a share")
        if state not in (None, *REPLICA_STATES[1:]):
            fail(f"{method_name(kit.driver, 'update_replica_state')} returned {state!r}; it "
                 "must return 'in_sync', 'out_of_sync', 'error' or None")

    def test_update_replica_state_of_an_unknown_replica_is_not_found(self, kit: Kit) -> None:
        share = kit.create_share(size=1)
        share["replica_state"] = vocab.REPLICA_ACTIVE
        replica = kit.replica_dict(share)
        kit.expect_not_found("update_replica_state", [share, replica], replica, [], kit.server,
                             what="a replica the backend never had")
