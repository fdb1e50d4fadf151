"""The check-resource workflow in one process (tests/unit/stack_rig.py): real
database, coordination, dummy driver and share operations; the test decides
which engine runs which check when. Create, update in place, replace and
delete; what a check reports to its successors and when, and what it reads
(the failures, crashes, locks and watchdog: test_worker_recovery.py)."""

from __future__ import annotations

import collections

import pytest
from sharemgr.convergence import lifecycle
from sharemgr.convergence import physical as phys
from sharemgr.db import api, stack_work, stacks

from tests.unit.stack_rig import V1, _add, _creates, _one_each, _status


def test_create_update_in_place_replace_and_delete(rig):
    e = rig.engine()
    rig.create("web", V1)
    e.pump()
    assert _status(rig, "web") == ("CREATE", "COMPLETE")
    rows = rig.rows("web")
    share = rows["data"][0]
    assert {r["kind"] for r in rig.objects()} == {"share", "snapshot"}
    assert rig.objects()[0]["name"].startswith("web-data-")

    # Grow the share in place, add a resource.
    rig.update("web", _add(V1.replace("size: 1", "size: 3"),
                           "logs: {type: share, properties: {size: 1, proto: CIFS}}"))
    e.pump()
    assert _status(rig, "web") == ("UPDATE", "COMPLETE")
    rows = rig.rows("web")
    assert rows["data"][0].id == share.id and rows["data"][0].physical_id == share.physical_id
    assert rows["data"][0].properties["size"] == 3
    assert [m for m, _ in _creates(rig)].count("create_share") == 2
    assert any(c["method"] == "extend_share" for c in rig.calls())

    # proto changes: replace (new share first), the snapshot follows its share.
    rig.update("web", V1.replace("proto: NFS", "proto: CIFS"))
    e.pump()
    assert _status(rig, "web") == ("UPDATE", "COMPLETE")
    rows = rig.rows("web")
    assert set(rows) == {"data", "snap"} and all(len(v) == 1 for v in rows.values())
    assert rows["data"][0].physical_id != share.physical_id
    methods = [c["method"] for c in rig.calls()]
    last_create = max(i for i, m in enumerate(methods) if m == "create_share")
    assert methods.index("delete_share") > last_create  # old share deleted after the new one
    assert _one_each(rig) == ["web-data", "web-snap"]

    rig.start("web", "DELETE")
    e.pump()
    assert _status(rig, "web") == ("DELETE", "COMPLETE")
    assert rig.objects() == []
    assert stacks.stack_get_by_name(rig.db, "web") is None


def test_outputs_and_progress(rig, monkeypatch):
    from sharemgr.convergence import actions, worker

    # No chaining: each check is its own request, so one step is one node.
    monkeypatch.setattr(worker, "CHAIN_LIMIT", 0)
    e = rig.engine()
    rig.create("web", V1)
    stack = rig.stack("web")
    assert str(actions.progress(rig.db, stack)) == "0/2"
    e.step(1)
    assert str(actions.progress(rig.db, rig.stack("web"))) == "1/2"  # data made, snap not yet
    e.pump()
    shown = actions.show(rig.db, rig.stack("web"))
    assert shown["progress"] == "2/2"
    instance = phys.observe(rig.db, "share", rig.rows("web")["data"][0].physical_id)
    assert shown["outputs"]["path"] == instance.attributes["export_locations"][0]["path"]


def test_a_new_rows_clean_up_ends_with_its_create(rig):
    """Two independent shares: each create's report also runs the row's own
    clean-up node (nothing to clean up) in its transaction, so no clean-up
    node needs a request, and every check recorded its own request done."""
    e = rig.engine()
    rig.create("pair", """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
""")
    assert e.pump() == 2  # one check per create; none for the clean-up nodes
    assert _status(rig, "pair") == ("CREATE", "COMPLETE")
    checks = rig.checks()
    assert sorted(c.args["is_update"] for c in checks) == [True, True]
    assert {c.status for c in checks} == {"done"} and not any(c.error for c in checks)
    assert _one_each(rig, ("share",)) == ["pair-a", "pair-b"]


def test_a_report_takes_the_next_pending_check_when_the_engine_may_claim(rig):
    """Three independent shares. While the engine may not claim (stopping,
    out of the group: the daemon's ``may_claim``), a check runs alone. Once
    it may, a check's report takes the oldest pending check in its own
    transaction and runs it next in its thread: the rest of the stack
    through one claim, every check recorded done by this engine."""
    e = rig.engine()
    rig.create("three", """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
  c: {type: share, properties: {size: 1, proto: NFS}}
""")
    allowed = [False]
    e.stacks.take_checks_when(lambda: allowed[0])
    assert e.step(1) == 1
    assert len(rig.checks("pending")) == 2 and len(rig.checks("done")) == 1
    allowed[0] = True
    assert e.step(1) == 1
    assert _status(rig, "three") == ("CREATE", "COMPLETE")
    checks = rig.checks()
    assert len(checks) == 3 and {(c.status, c.engine_id, c.error) for c in checks} == {
        ("done", e.engine_id, None)}
    assert _one_each(rig, ("share",)) == ["three-a", "three-b", "three-c"]


def test_a_successor_is_not_claimed_while_the_engine_may_not_claim(rig):
    """A chain of two. While the engine may not claim (stopping, out of the
    group), the first check's report leaves the successor it made ready
    pending for any engine, as the request loop would, rather than run it
    next in its thread: a peer that counts this engine gone would abandon
    that request and run the node again. Once it may, the successor runs."""
    e = rig.engine()
    rig.create("pair", _chain(2))
    allowed = [False]
    e.stacks.take_checks_when(lambda: allowed[0])
    assert e.step(1) == 1
    pending = rig.checks("pending")
    assert len(pending) == 1 and pending[0].engine_id is None
    assert len(rig.checks("running")) == 0 and len(rig.checks("done")) == 1
    allowed[0] = True
    assert e.pump() == 1
    assert _status(rig, "pair") == ("CREATE", "COMPLETE")


def test_a_create_sees_its_resource_as_written_not_read_back(rig, monkeypatch):
    """A share's create records its attributes from the rows it inserted
    with the changes its operation wrote (``phys.observe_after``): no read
    of the share afterwards, and the attributes are those a read gives."""
    from sharemgr.common import vocab
    from sharemgr.manager import kinds

    reads = []
    read_share = kinds._OBSERVERS[vocab.SHARE]
    monkeypatch.setitem(kinds._OBSERVERS, vocab.SHARE,
                        lambda db, pid: reads.append(pid) or read_share(db, pid))
    e = rig.engine()
    rig.create("pair", _chain(2))
    e.pump()
    assert _status(rig, "pair") == ("CREATE", "COMPLETE")
    assert reads == []
    for name, (row,) in rig.rows("pair").items():
        seen = read_share(rig.db, row.physical_id)
        assert seen.state == phys.OK, name
        assert row.attributes == dict(seen.attributes), name
        assert row.attributes["export_locations"], name


@pytest.mark.parametrize("own_lease", [False, True])
def test_a_creates_request_is_written_with_its_lease(rig, monkeypatch, own_lease):
    """With leases on, a stack's begin writes its operation's request with
    the default lease, and the call writes it no more; a method with a
    lease of its own still has it written as its call starts."""
    from sharemgr.db import leases as db_leases
    from sharemgr.db import models
    from sharemgr.manager import leases

    writes = []
    set_tx = db_leases._lease_set_tx
    monkeypatch.setattr(db_leases, "_lease_set_tx",
                        lambda *a: writes.append(a[-1]) or set_tx(*a))
    e = rig.engine()
    e.operations.leases = leases.Leases(3600, {"create_share": 600} if own_lease else {}, 60)
    rig.create("pair", _chain(2))
    e.pump()
    assert _status(rig, "pair") == ("CREATE", "COMPLETE")
    ops = [r for r in api.query(rig.db, models.Request, {"action": "create"})
           if r.resource_type == "share_instance"]
    assert len(ops) == 2 and {r.status for r in ops} == {"done"}
    assert all(r.lease_expires_at is not None for r in ops)
    assert len(writes) == (2 if own_lease else 0)


def _chain(n):
    """A template of ``n`` shares, each depending on the one before."""
    return "resources:\n" + "".join(
        f"  s{i}: {{type: share, properties: {{size: 1, proto: NFS}}"
        + (f", depends_on: [s{i - 1}]" if i else "") + "}\n" for i in range(n))


def _fan_out(leaves):
    """A template of a share ``sink`` that the shares ``leaves`` depend on."""
    return "resources:\n" + "".join(
        f"  {n}: {{type: share, properties: {{size: 1, proto: NFS}}, depends_on: [sink]}}\n"
        for n in leaves) + "  sink: {type: share, properties: {size: 1, proto: NFS}}\n"


@pytest.mark.parametrize("limit, cleanup_checks", [(64, 0), (2, 2)])
def test_clean_up_nodes_with_nothing_to_do_report_where_they_become_ready(
        rig, monkeypatch, limit, cleanup_checks):
    """A chain of 6 shares: each row's clean-up waits for its own update and
    for the clean-up of the row that requires it, so the clean-ups run
    after the last create, from s5's down to s0's. None has anything to do:
    each is reported for in the transaction that made it ready, none gets a
    check request. With INLINE_LIMIT 2 a transaction reports for two of them
    and the next waits as a check, whose own report goes on down the chain:
    s5's and s4's from s5's create, s3's check with s2's and s1's, s0's
    check."""
    from sharemgr.convergence import points

    monkeypatch.setattr(points, "INLINE_LIMIT", limit)
    e = rig.engine()
    rig.create("chain", _chain(6))
    e.pump()
    assert _status(rig, "chain") == ("CREATE", "COMPLETE")
    checks = rig.checks()
    assert sorted(c.args["is_update"] for c in checks).count(False) == cleanup_checks
    assert len(checks) == 6 + cleanup_checks
    assert {c.status for c in checks} == {"done"} and not any(c.error for c in checks)
    assert _one_each(rig, ("share",)) == [f"chain-s{i}" for i in range(6)]


def test_a_run_of_clean_ups_reads_its_rows_once(rig, monkeypatch):
    """The clean-ups of a chain of 6, made ready one after another in one
    transaction (s5's by its create, then s4's … s0's), read whether their
    rows are free in one statement, asked for all five when s4's is."""
    asked = []
    read = stack_work.free_and_current_tx
    monkeypatch.setattr(stack_work, "free_and_current_tx",
                        lambda session, rids: asked.append(list(rids)) or read(session, rids))
    e = rig.engine()
    rig.create("chain", _chain(6))
    e.pump()
    assert _status(rig, "chain") == ("CREATE", "COMPLETE")
    rows = rig.rows("chain")
    assert asked == [[rows[f"s{i}"][0].id for i in (4, 3, 2, 1, 0)]]
    assert not [c for c in rig.checks() if not c.args["is_update"]]


def test_a_clean_up_with_work_is_not_reported_for(rig):
    """A chain whose middle share is replaced: the old row's clean-up
    deletes it (a check of its own), while the clean-ups of the rows the
    traversal keeps are reported for where they become ready."""
    e = rig.engine()
    rig.create("chain", _chain(3))
    e.pump()
    old = rig.rows("chain")["s1"][0].physical_id
    rig.update("chain", _chain(3).replace(
        "s1: {type: share, properties: {size: 1, proto: NFS}",
        "s1: {type: share, properties: {size: 1, proto: CIFS}"))
    e.pump()
    assert _status(rig, "chain") == ("UPDATE", "COMPLETE")
    assert [m for m, _name in _creates(rig)].count("delete_share") == 1
    assert phys.observe(rig.db, "share", old).state == phys.GONE
    traversal = rig.stack("chain").current_traversal
    cleanups = [c for c in rig.checks() if c.args["traversal"] == traversal
                and not c.args["is_update"]]
    assert len(cleanups) == 1  # the replaced row's
    assert _one_each(rig, ("share",)) == [f"chain-s{i}" for i in range(3)]


def test_a_successor_gets_only_the_attributes_it_reads(rig, monkeypatch):
    """SyncPoint data carries the ids of every predecessor but only the
    attributes some resource reads with get_attr (Template.referenced_attributes):
    c reads a's name, nothing of b's; the get_attr still resolves."""
    from sharemgr.convergence import worker as worker_mod

    monkeypatch.setattr(worker_mod, "CHAIN_LIMIT", 0)  # c's check waits as a request
    e = rig.engine()
    rig.create("refs", """
resources:
  a: {type: share, properties: {size: 1, proto: NFS}}
  b: {type: share, properties: {size: 1, proto: NFS}}
  c: {type: share, properties: {size: 1, proto: NFS, name: {get_attr: [a, name]}},
      depends_on: [b]}
""")
    e.step(2)  # a and b
    rows = rig.rows("refs")
    (check,) = [r for r in rig.checks("pending") if r.args["resource_id"] == rows["c"][0].id]
    passed = {v["name"]: v for v in check.args["input_data"].values()}
    assert set(passed) == {"a", "b"}
    assert set(passed["a"]["attributes"]) == {"name"} and passed["b"]["attributes"] == {}
    assert passed["b"]["physical_id"] == rows["b"][0].physical_id
    e.pump()
    assert _status(rig, "refs") == ("CREATE", "COMPLETE")
    a = phys.observe(rig.db, "share", rig.rows("refs")["a"][0].physical_id)
    assert rig.rows("refs")["c"][0].properties["name"] == a.attributes["name"]


def _is_batch(work) -> bool:
    """Whether a transaction's work is a batch of reports after the end's
    (``Reporter._report_later``'s ``batch_tx``)."""
    return getattr(work, "func", work).__name__ == "batch_tx"


def test_a_wide_fan_out_reports_in_batches_and_completes(rig, monkeypatch):
    """A share that 12 shares depend on: its update reports to 13 points
    (the 12 updates, its own clean-up), the first REPORT_IN_ONE with its
    end, the rest in further transactions of up to REPORT_IN_ONE; each
    successor is queued once and the stack completes. A failing batch
    transaction is retried one report at a time."""
    e = rig.engine()
    leaves = [f"l{i}" for i in range(12)]
    rig.create("fan", _fan_out(leaves))
    real, calls = lifecycle.in_one_transaction, []

    def in_one_transaction(db, work):
        if _is_batch(work):  # a batch after the end's transaction
            calls.append(work)
            if len(calls) == 1:  # the first fails once: written one by one
                raise RuntimeError("deadlock detected")
        return real(db, work)

    monkeypatch.setattr(lifecycle, "in_one_transaction", in_one_transaction)
    e.pump()
    assert _status(rig, "fan") == ("CREATE", "COMPLETE")
    assert len(calls) == 1  # 13 points: 8 with the end, 5 in one batch
    updates = collections.Counter(c.args["resource_id"] for c in rig.checks()
                                  if c.args["is_update"])
    assert len(updates) == len(leaves) + 1 and set(updates.values()) == {1}
    assert {c.status for c in rig.checks()} == {"done"}
    assert _one_each(rig, ("share",)) == sorted(f"fan-{n}" for n in [*leaves, "sink"])


def _pumped_losing_one_deadlock(e, monkeypatch, caplog, hit) -> None:
    """``e`` runs every check; the first reporting transaction ``hit(work)``
    picks is chosen as a deadlock's victim (PostgreSQL's 40P01). Asserts
    it was, and that it cost one WARNING line with no traceback."""
    import logging

    import sqlalchemy as sa

    class Deadlock(Exception):
        pgcode = "40P01"

    real, lost = lifecycle.in_one_transaction, list[object]()

    def in_one_transaction(db, work):
        if hit(work) and not lost:
            lost.append(work)
            raise sa.exc.OperationalError("UPDATE sync_points", {}, Deadlock(
                "deadlock detected"))
        return real(db, work)

    monkeypatch.setattr(lifecycle, "in_one_transaction", in_one_transaction)
    with caplog.at_level(logging.WARNING, logger="sharemgr.convergence.ends_apart"):
        e.pump()
    assert lost
    lines = [r for r in caplog.records if r.name == "sharemgr.convergence.ends_apart"]
    assert [r.levelname for r in lines] == ["WARNING"], [r.getMessage() for r in lines]
    assert "lost a conflict" in lines[0].getMessage() and lines[0].exc_info is None


def test_a_report_that_loses_a_deadlock_is_written_step_by_step_with_a_warning(
        rig, monkeypatch, caplog):
    """PostgreSQL picks a node's report transaction as a deadlock's victim
    (seen in the fault run: a stack's points purged while its nodes report).
    A conflict, not a bug: one WARNING line, no traceback, and the steps do
    the same work (the stack completes, each node checked once)."""
    e = rig.engine()
    rig.create("fan", _fan_out(["l0", "l1"]))
    _pumped_losing_one_deadlock(e, monkeypatch, caplog,
                                lambda work: getattr(work, "__name__", "") == "report")
    assert _status(rig, "fan") == ("CREATE", "COMPLETE")
    updates = collections.Counter(c.args["resource_id"] for c in rig.checks()
                                  if c.args["is_update"])
    assert set(updates.values()) == {1}


def test_a_later_batch_of_reports_that_loses_a_deadlock_is_one_warning(
        rig, monkeypatch, caplog):
    """The reports past the first transaction's (a node with more than
    ``REPORT_IN_ONE`` successors) lost a deadlock (the 400-fault run, seed
    5252: a stack's points purged meanwhile): one WARNING line, no
    traceback, and the reports are written one by one."""
    import functools

    from sharemgr.convergence import points

    e = rig.engine()
    rig.create("fan", _fan_out([f"l{i}" for i in range(points.REPORT_IN_ONE + 2)]))
    _pumped_losing_one_deadlock(e, monkeypatch, caplog,
                                lambda work: isinstance(work, functools.partial))
    assert _status(rig, "fan") == ("CREATE", "COMPLETE")


def test_the_watchdog_leaves_a_node_alone_while_it_is_still_reporting(rig, monkeypatch):
    """A wide fan-out's later batches are written after the node's request
    is done: the node looks ready, unreported and without a live request.
    The watchdog, run between two of those batches, sees it as reporting
    (Worker.reporting) and retriggers nothing; afterwards nothing is left
    marked, and the stack completes with one check per node."""
    e = rig.engine()
    leaves = [f"l{i}" for i in range(20)]
    rig.create("fan", _fan_out(leaves))
    real, seen = lifecycle.in_one_transaction, []

    def in_one_transaction(db, work):
        if _is_batch(work) and not seen:  # the first later batch
            seen.append((e.worker.reporting(), e.watchdog.run_once()))
        return real(db, work)

    monkeypatch.setattr(lifecycle, "in_one_transaction", in_one_transaction)
    e.pump()
    assert _status(rig, "fan") == ("CREATE", "COMPLETE")
    (reporting, counts), = seen
    sink = rig.rows("fan")["sink"][0].id
    assert [n for _s, _t, n in reporting] == [(sink, True)]
    assert counts["retriggered"] == 0
    assert e.worker.reporting() == set()
    updates = collections.Counter(c.args["resource_id"] for c in rig.checks()
                                  if c.args["is_update"])
    assert set(updates.values()) == {1} and len(rig.checks()) == len(leaves) + 1


def test_a_traversals_template_or_graph_is_loaded_once_however_many_ask():
    import threading

    from sharemgr.convergence.worker import _Cache

    cache: _Cache[str] = _Cache(4)
    started, release, loads = threading.Event(), threading.Event(), []

    def load():
        loads.append(1)
        started.set()
        release.wait(10)
        return "graph"

    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("t1", load)))
               for _ in range(4)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert got == ["graph"] * 4 and len(loads) == 1


def test_a_report_cut_by_the_database_leaves_no_row_held_by_the_engine(rig, monkeypatch):
    """A database failover between a node's act and its report: the report's
    transaction fails, and so does the step-by-step end after it. The
    engine must not go on believing one of its checks holds the row (found
    in a many-host run: every later check bailed on "locked by live engine"
    — itself — and the stack never ended); the watchdog's retrigger takes
    the leaked lock over and the stack completes."""
    from sharemgr.db import stack_work
    from sqlalchemy import exc as sa_exc

    e = rig.engine()
    rig.create("one", "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}}\n")
    real_tx, real_end, cut = lifecycle.in_one_transaction, stack_work.end, []
    away = sa_exc.OperationalError("COMMIT", {}, Exception("server closed the connection"))

    def in_one_transaction(db, work):
        if not cut:
            cut.append("report")
            raise away
        return real_tx(db, work)

    def end(*args, **kwargs):
        if cut == ["report"]:
            cut.append("end")
            raise away
        return real_end(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "in_one_transaction", in_one_transaction)
    monkeypatch.setattr(stack_work, "end", end)
    e.pump()
    assert cut == ["report", "end"]
    row = rig.rows("one")["a"][0]
    assert not e.worker.holds(row.id)
    for _ in range(3):
        e.watchdog.run_once()
        e.pump()
        if _status(rig, "one") == ("CREATE", "COMPLETE"):
            break
    assert _status(rig, "one") == ("CREATE", "COMPLETE")
    assert _one_each(rig, ("share",)) == ["one-a"]


COPY_STACK = """
resources:
  data: {type: share, properties: {size: 1, proto: NFS}}
  snap: {type: snapshot, properties: {share: {get_resource: data}}}
  copy: {type: share, properties: {size: 1, proto: NFS, snapshot: {get_resource: snap}}}
  late: {type: snapshot, properties: {share: {get_resource: copy}}}
"""


@pytest.mark.parametrize("ends", ["available", "error"])
def test_a_share_still_copying_after_its_create_completes_with_its_copy(rig, ends):
    """A create from a snapshot answered creating_from_snapshot: the
    resource is complete (and its dependents start) only once the status
    poll ended the copy; a copy that failed fails the resource."""
    import threading

    from sharemgr.common import vocab
    from sharemgr.manager import clone_poll

    e = rig.engine()
    driver = e.drivers["dummy"]
    made = driver.create_share_from_snapshot
    answered = threading.Event()

    def copying(share, snapshot, share_server=None):
        made(share, snapshot, share_server)
        answered.set()
        return {"status": vocab.CREATING_FROM_SNAPSHOT, "export_locations": []}

    driver.create_share_from_snapshot = copying
    rig.create("cp", COPY_STACK, disable_rollback=True)
    pump = threading.Thread(target=e.pump)
    pump.start()
    assert answered.wait(30)
    pump.join(1.5)
    assert pump.is_alive(), "the stack went on while the copy was still going on"
    assert rig.rows("cp")["late"][0].physical_id is None
    status = driver.get_share_status
    driver.get_share_status = (lambda share, share_server=None: {"status": ends}) \
        if ends == "error" else status
    clone_poll.poll_clones(e.operations, e.hosts)
    pump.join(60)
    assert not pump.is_alive()
    if ends == "available":
        assert _status(rig, "cp") == ("CREATE", "COMPLETE")
        assert rig.rows("cp")["late"][0].physical_id is not None
    else:
        assert _status(rig, "cp") == ("CREATE", "FAILED")
        assert rig.rows("cp")["late"][0].physical_id is None


def test_a_share_a_check_creates_is_inserted_taken_and_not_taken_again(rig, monkeypatch):
    """A stack's begin writes the new share instance taken (its first token)
    with its request: the call re-reads it without a take's UPDATE and calls
    with that token. One taken by someone else meanwhile is taken back, as
    any call takes its row."""
    import sqlalchemy as sa
    from sharemgr.db import leases as db_leases
    from sharemgr.db import models

    e = rig.engine()
    tokens: list[int] = []
    real = e.drivers["dummy"].create_share

    def create(share, *args, **kwargs):
        tokens.append(share["fence_token"])
        return real(share, *args, **kwargs)

    monkeypatch.setattr(e.drivers["dummy"], "create_share", create)
    sent: list[str] = []
    sa.event.listen(rig.db.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    one = "resources:\n  a: {type: share, properties: {size: 1, proto: NFS}}\n"
    rig.create("one", one)
    e.pump()
    assert _status(rig, "one") == ("CREATE", "COMPLETE") and tokens == [1]
    assert not [q for q in sent if q.startswith("UPDATE share_instances SET fence=")]

    begin = stack_work.begin

    def begun_then_taken(db, *args, **kwargs):
        begun = begin(db, *args, **kwargs)
        for inst in api.query(db, models.ShareInstance, {"status": "creating"}):
            db_leases.take_rows(db, models.ShareInstance, {inst.id: "creating"})
        return begun

    monkeypatch.setattr(stack_work, "begin", begun_then_taken)
    rig.create("two", one)
    e.pump()
    assert _status(rig, "two") == ("CREATE", "COMPLETE") and tokens == [1, 3]

