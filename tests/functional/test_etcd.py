"""etcd as the coordination backend (issue 44): a 3-member cluster behind
an ``etcd gateway`` (tests/functional/etcd_cluster.py), tooz's etcd3gw
driver, and engines on PostgreSQL.

tooz's etcd lock keeps saying it is held after its lease expired (a holder
paused past ``lock_timeout``), and every attempt leaves a lease behind
until its TTL; sharemgr asks the lease (manager/coordination.py)."""

from __future__ import annotations

import contextlib
import time

import pytest
from sharemgr.manager.coordination import STOP_WAIT

from tests.functional.harness import Deployment, wait_until
from tests.functional.netfault import Proxy


def _coordinator(url: str, member: str, heartbeat: bool = True):
    from sharemgr.manager.coordination import Coordinator

    coordinator = Coordinator(url, member)
    coordinator.start(heartbeat=heartbeat)
    return coordinator


def test_a_lock_lost_in_a_pause_is_noticed_and_attempts_leave_no_lease(etcd_cluster):
    """A holder whose lease ran out (no heartbeat for longer than the
    lock's TTL: a paused engine) is told its lock is gone before its next
    driver call (it was told it still held it), and the peer takes it; a
    failed attempt and a release leave no lease on etcd (each left one for
    its TTL)."""
    url = etcd_cluster.url(lock=2)
    paused = _coordinator(url, "paused", heartbeat=False)
    peer = _coordinator(url, "peer")
    try:
        before = etcd_cluster.leases()
        with paused.hold(b"sharemgr-share-1"):
            assert paused.still_holds(b"sharemgr-share-1")
            with peer.try_lock(b"sharemgr-share-1") as got:
                assert not got
            assert etcd_cluster.leases() == before + 1  # the holder's only
            wait_until(lambda: not paused.still_holds(b"sharemgr-share-1"), timeout=15,
                       what="the paused holder sees its lock gone")


            def taken() -> bool:
                with peer.try_lock(b"sharemgr-share-1") as got:
                    return got

            wait_until(taken, timeout=10, what="the peer takes the expired lock")
        wait_until(lambda: etcd_cluster.leases() == before, timeout=5,
                   what="no lease left behind")
    finally:
        paused.stop()
        peer.stop()


def test_hold_with_a_timeout_says_timeout(etcd_cluster):
    """tooz's etcd lock raises tenacity's RetryError when a blocking acquire
    runs out of time; the coordinator says what every driver says."""
    holder = _coordinator(etcd_cluster.url(), "holder")
    waiter = _coordinator(etcd_cluster.url(), "waiter")
    try:
        with holder.hold(b"sharemgr-share-2"):
            with pytest.raises(TimeoutError), waiter.hold(b"sharemgr-share-2", timeout=1):
                pass
    finally:
        holder.stop()
        waiter.stop()


def _through_proxy(etcd_cluster, **kw):
    """A proxy in front of the gateway and tooz's URL through it."""
    proxy = Proxy(etcd_cluster.gateway_port)
    proxy.start()
    return proxy, etcd_cluster.url(**kw).replace(f":{etcd_cluster.gateway_port}",
                                                 f":{proxy.port}")


def test_a_lock_whose_release_failed_is_free_again_after_its_ttl(etcd_cluster):
    """The holder's release, and the revoke of its lease, fail while etcd
    is unreachable: once etcd is back the lock is free within its TTL
    (tooz's etcd driver went on renewing it on every heartbeat: the lock
    was held for ever by an engine that had let it go)."""
    proxy, url = _through_proxy(etcd_cluster, lock=3)
    holder = _coordinator(url, "holder")
    peer = _coordinator(etcd_cluster.url(), "peer")
    try:
        with holder.hold(b"sharemgr-share-3"):
            proxy.cut()
        proxy.start()

        def taken() -> bool:
            with peer.try_lock(b"sharemgr-share-3") as got:
                return got

        wait_until(taken, timeout=15, what="the peer takes the lock the holder let go")
    finally:
        holder.stop()
        peer.stop()


def test_locks_lost_in_a_partition_cost_no_heartbeat_after_it(etcd_cluster):
    """An engine cut off from etcd for longer than the locks' TTL loses the
    locks it held, releases them (each release finds its lock gone), and
    joins the group again. Its heartbeat must not renew those locks any
    more: tooz's etcd driver kept every one of them and sent it a keep-alive
    on each heartbeat for ever; on a slow link forty of them made a
    heartbeat outlast the membership's TTL, and the engine fell out of the
    group again and again (the long many-host run's ``membership``)."""
    proxy, url = _through_proxy(etcd_cluster, membership=3, lock=3)
    engine = _coordinator(url, "engine")
    peer = _coordinator(etcd_cluster.url(), "peer")
    try:
        engine.join_engines()
        with contextlib.ExitStack() as held:
            for i in range(40):
                held.enter_context(engine.hold(b"sharemgr-share-lost-%d" % i))
            proxy.cut()
            time.sleep(5)  # past both TTLs: etcd expires the locks and the membership
            proxy.start()
            wait_until(lambda: not engine.still_holds(b"sharemgr-share-lost-0"), timeout=10,
                       what="the engine sees its lock gone")
        wait_until(lambda: _rejoined(engine), timeout=15, what="the engine a member again")
        proxy.delay = 0.05  # a slow link: each etcd call takes a few tenths of a second
        for _ in range(40):  # 10 s: three TTLs
            assert "engine" in peer.engines(), "the engine fell out of the group"
            time.sleep(0.25)
    finally:
        proxy.delay = 0.0
        engine.stop()
        peer.stop()


def _rejoined(engine) -> bool:
    """What the daemon's membership check does (manager/membership.py)."""
    if "engine" not in engine.engines():
        with contextlib.suppress(Exception):  # the heart has not made its new lease yet
            engine.rejoin_engines()
    return "engine" in engine.engines()


@pytest.mark.long(60)
def test_engines_keep_serving_across_an_etcd_leader_kill(etcd_cluster, pg_url, deployment):
    """Two engines coordinate through the gateway; the etcd leader is
    killed while they work: every share still ends available, both engines
    stay members (or rejoin), and the killed member comes back."""
    d: Deployment = deployment(db_url=pg_url, coordination_url=etcd_cluster.url())
    d.sync()
    d.start(name="a")
    d.start(name="b")
    shares = [d.json("share", "create", "1", "--proto", "NFS")["id"] for _ in range(4)]
    leader = etcd_cluster.leader()
    etcd_cluster.kill(leader)
    shares += [d.json("share", "create", "1", "--proto", "NFS", timeout=120)["id"]
               for _ in range(4)]
    wait_until(lambda: all(s["status"] == "available" for s in d.json("share", "list")),
               timeout=90, what="every share available after the leader kill")
    assert len(d.json("share", "list")) == len(shares)
    etcd_cluster.restart(leader)
    etcd_cluster.wait_healthy()
    wait_until(lambda: sum(1 for s in d.json("service", "list") if s["alive"]) == 2,
               timeout=60, what="both engines members of the group")


def test_an_engine_stops_while_etcd_is_away(etcd_cluster, pg_url, deployment):
    """SIGTERM while every etcd member and the gateway are gone: the engine
    stops (tooz's heart retried the heartbeat for ever and its stop waited
    for the heart, so share-manager never exited until etcd came back)."""
    d: Deployment = deployment(db_url=pg_url, coordination_url=etcd_cluster.url())
    d.sync()
    engine = d.start()
    etcd_cluster.stop()
    engine.wait_for_log("out of the engines group")
    started = time.monotonic()
    assert engine.terminate(timeout=45) == 0
    # Whether tooz's stop hangs depends on where its heart is when the
    # signal comes (a refused connection fails at once): a stop that took
    # longer than the bound says why.
    if time.monotonic() - started > STOP_WAIT + 5:
        assert "did not answer within" in engine.text()
