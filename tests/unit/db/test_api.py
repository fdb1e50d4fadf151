"""DB API on SQLite, PostgreSQL and MariaDB: the same tests on each."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sharemgr.db import api, migration, models, request_queue, services
from sharemgr.db.engine import Database, DatabaseUnavailable


def _instance(db, status="creating", host="h@dummy"):
    share = models.Share(size=1, share_proto="NFS", name="s")
    inst = models.ShareInstance(share_id=share.id, host=host, status=status)
    with db.session() as session:
        session.add(share)
        session.flush()
        inst.share_id = share.id
        session.add(inst)
    return inst


def test_schema_at_head(db):
    assert migration.current(db) == migration.head()


def test_conditional_update_wins_once(db):
    inst = _instance(db)
    assert api.conditional_update(
        db, models.ShareInstance, inst.id, {"status": "creating"}, {"status": "available"}
    )
    # The second writer expected the old status and must learn it lost.
    assert not api.conditional_update(
        db, models.ShareInstance, inst.id, {"status": "creating"}, {"status": "error"}
    )
    assert api.get(db, models.ShareInstance, inst.id).status == "available"


def test_conditional_update_accepts_a_set_of_statuses(db):
    inst = _instance(db, status="deleting")
    assert api.conditional_update(
        db, models.ShareInstance, inst.id, {"status": ("deleting", "error_deleting")},
        {"status": "deleted"},
    )


def test_conditional_update_shapes_share_one_statement_and_each_still_checks(db):
    # The statement is built once per shape (db/api._update_stmt): equal,
    # IN and IS NULL tests, a value given and a value plus one in SQL.
    a, b = _instance(db, status="creating"), _instance(db, status="deleting")
    stmt = api._update_stmt(models.ShareInstance.__table__, (("status", "eq"),),
                            (("status", False), ("updated_at", False)))
    for inst, seen in ((a, "creating"), (b, "deleting")):
        assert api.conditional_update(db, models.ShareInstance, inst.id, {"status": seen},
                                      {"status": "available"})
        assert api._update_stmt(models.ShareInstance.__table__, (("status", "eq"),),
                                (("status", False), ("updated_at", False))) is stmt
    assert not api.conditional_update(db, models.ShareInstance, a.id, {"status": "creating"},
                                      {"status": "error"})
    assert not api.conditional_update(db, models.ShareInstance, a.id,
                                      {"status": ["creating", "deleting"]}, {"status": "error"})
    assert api.conditional_update(db, models.ShareInstance, a.id,
                                  {"status": ["available", "deleting"], "share_server_id": None},
                                  {"status": "error"})
    assert not api.conditional_update(db, models.ShareInstance, b.id,
                                      {"share_server_id": "elsewhere"}, {"status": "error"})
    assert [api.get(db, models.ShareInstance, i).status for i in (a.id, b.id)] == [
        "error", "available"]


def test_plus_one_adds_in_sql(db):
    share = models.Share(size=1, share_proto="NFS", name="s")
    api.add_all(db, [share])
    for size in (2, 3):
        assert api.conditional_update(db, models.Share, share.id, {"size": size - 1},
                                      {"size": api.PLUS_ONE})
    assert not api.conditional_update(db, models.Share, share.id, {"size": 1},
                                      {"size": api.PLUS_ONE})
    assert api.get(db, models.Share, share.id).size == 3


def test_the_hot_statements_skip_the_orm():
    # One mapped attribute in a WHERE makes the session run a statement on
    # the table through the ORM's bulk machinery (what these are built to skip).
    from sharemgr.db import sync_points

    built = [api._update_stmt(models.StackResource.__table__,
                              (("status", "eq"), ("engine_id", "null")),
                              (("status", False), ("atomic_key", True))),
             sync_points._GET, sync_points._GET_LOCKED, sync_points._CAS]
    assert [dict(s._propagate_attrs) for s in built] == [{}] * len(built)


def test_a_second_update_follows_only_a_first_that_won(db):
    # A backup's outcome and its share's release (manager/operations.py).
    a, b = _instance(db, status="backup_creating"), _instance(db, status="backup_creating")
    first = (models.ShareInstance, a.id, {"status": "backup_creating"}, {"status": "available"})
    then = (models.ShareInstance, b.id, {"status": "backup_creating"}, {"status": "available"})
    assert api.conditional_update_then(db, first, then)
    assert [api.get(db, models.ShareInstance, i).status for i in (a.id, b.id)] == [
        "available", "available"]
    c = _instance(db, status="backup_creating")
    lost = (models.ShareInstance, a.id, {"status": "backup_creating"}, {"status": "error"})
    follow = (models.ShareInstance, c.id, {"status": "backup_creating"}, {"status": "error"})
    assert not api.conditional_update_then(db, lost, follow)
    assert api.get(db, models.ShareInstance, c.id).status == "backup_creating"
    # The second may lose on its own: the first stays.
    d = _instance(db, status="backup_creating")
    assert api.conditional_update_then(
        db, (models.ShareInstance, d.id, {"status": "backup_creating"}, {"status": "available"}),
        (models.ShareInstance, a.id, {"status": "backup_creating"}, {"status": "error"}))
    assert api.get(db, models.ShareInstance, d.id).status == "available"


def test_soft_delete_hides_row(db):
    inst = _instance(db)
    api.conditional_update(
        db, models.ShareInstance, inst.id, {"status": "creating"},
        {"status": "deleted", "deleted_at": models.utcnow()},
    )
    assert api.get(db, models.ShareInstance, inst.id) is None
    assert api.get(db, models.ShareInstance, inst.id, include_deleted=True).status == "deleted"
    assert api.query(db, models.ShareInstance, {"host": "h@dummy"}) == []


def test_request_claim_is_exclusive(db):
    with db.session() as session:
        for i in range(6):
            api.request_add_tx(session, "share", f"r{i}", "create", "h@dummy")
        api.request_add_tx(session, "share", "other", "create", "other@dummy")
    first = api.request_claim(db, ["h@dummy"], "e1", limit=4)
    second = api.request_claim(db, ["h@dummy"], "e2", limit=4)
    assert len(first) == 4 and len(second) == 2
    assert not {r.id for r in first} & {r.id for r in second}
    assert api.request_claim(db, ["h@dummy"], "e3", limit=4) == []
    assert api.request_finish(db, first[0].id, "e1", "done")
    # Only the claiming engine may finish a request.
    assert not api.request_finish(db, first[1].id, "e2", "done")


def test_many_requests_in_one_insert_are_claimed_in_order(db):
    """``requests_add_tx``: pending requests of many rows in one INSERT, each
    with its own args, claimed oldest first like those added one by one."""
    seen: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *a: seen.append(a[2].split()[0]))
    with db.session() as session:
        added = api.requests_add_tx(session, "stack_resource", "check_resource",
                                    [(str(i), {"n": i}) for i in range(5)], host="h@dummy")
    assert added == 5 and seen.count("INSERT") == 1
    claimed = api.request_claim(db, ["h@dummy"], "e1", limit=10)
    assert [(r.resource_id, r.args) for r in claimed] == [(str(i), {"n": i}) for i in range(5)]
    assert {r.status for r in claimed} == {"running"} and all(r.created_at for r in claimed)
    with db.session() as session:
        assert api.requests_add_tx(session, "share", "create", []) == 0


def test_a_report_takes_the_oldest_pending_hostless_checks(db):
    """``take_checks_tx``: in the caller's transaction, the oldest pending
    check_resource requests without a host, up to its limit, running for
    this engine; never another action, a request for a host, or one already
    taken."""
    with db.session() as session:
        api.request_add_tx(session, "share", "s", "create", None)
        api.request_add_tx(session, "stack_resource", "1", "check_resource", "*@dummy")
        api.requests_add_tx(session, "stack_resource", "check_resource",
                            [(str(i), {"resource_id": i}) for i in (2, 3, 4, 5)])
    with db.session() as session:
        (first,) = request_queue.take_checks_tx(session, "e1")
    with db.session() as session:
        more = request_queue.take_checks_tx(session, "e2", 5)
        assert request_queue.take_checks_tx(session, "e2", 5) == []
    assert (first.resource_id, first.args, first.status, first.engine_id) == (
        "2", {"resource_id": 2}, "running", "e1")
    assert [(r.resource_id, r.engine_id, r.status) for r in more] == [
        (str(i), "e2", "running") for i in (3, 4, 5)]
    # Rolled back with its transaction: the check stays pending.
    for r in more:
        assert api.request_finish(db, r.id, "e2", "done")
    with db.session() as session:
        api.request_add_tx(session, "stack_resource", "6", "check_resource", None)
    with pytest.raises(RuntimeError), db.session() as session:
        assert request_queue.take_checks_tx(session, "e1", 3) != []
        raise RuntimeError("the report failed")
    left = api.request_claim(db, [], "e3", limit=10)
    assert [(r.action, r.resource_id) for r in left] == [("create", "s"),
                                                         ("check_resource", "6")]


def test_services(db):
    services.service_register(db, "h", "share-manager", "h.1")
    assert services.service_heartbeat(db, "h.1")
    services.service_stopped(db, "h.1")
    assert [s.engine_id for s in services.service_list(db)] == ["h.1"]
    assert services.service_list(db, include_stopped=False) == []


def test_unreachable_database_is_one_line():
    db = Database("postgresql+psycopg2://nobody:secret@127.0.0.1:1/none", connect_timeout=2)
    with pytest.raises(DatabaseUnavailable) as err:
        db.check()
    text = str(err.value)
    assert "\n" not in text and "secret" not in text and "127.0.0.1:1" in text


@pytest.mark.parametrize("writers", [8])
def test_concurrent_conditional_updates_postgresql(pg_url, writers):
    """Many threads race to move one row out of 'creating': exactly one wins."""
    db = Database(pg_url, pool_size=writers)
    migration.upgrade(db)
    for _ in range(5):
        inst = _instance(db)
        barrier = threading.Barrier(writers)
        wins = []

        def race(n, inst_id=inst.id, barrier=barrier, wins=wins):
            barrier.wait()
            if api.conditional_update(
                db, models.ShareInstance, inst_id, {"status": "creating"},
                {"status": f"available-{n}"},
            ):
                wins.append(n)

        threads = [threading.Thread(target=race, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert api.get(db, models.ShareInstance, inst.id).status == f"available-{wins[0]}"
    db.dispose()


def test_migrations_match_models(db):
    """The schema alembic builds is the schema the models describe."""
    with db.engine.connect() as conn:
        assert migration.schema_diff(conn) == []


def test_upgrade_keeps_data_and_purged_ids_never_return(sqlite_url):
    """0003 rebuilds two tables on SQLite with rows referencing them; after it
    a purged row's id is not handed out again."""
    import sqlalchemy as sa

    db = Database(sqlite_url)
    migration.upgrade(db, "0002")
    with db.session() as s:
        t = models.StackTemplate(template={"resources": {}})
        s.add(t)
        s.flush()
        # Core, naming only the columns 0002 has (the ORM would write later ones).
        stack_id = "stack-x"
        s.execute(sa.insert(models.Stack.__table__).values(
            id=stack_id, name="x", action="CREATE", status="COMPLETE", template_id=t.id,
            current_deps={}, disable_rollback=False))
        s.add(models.StackResource(stack_id=stack_id, name="r", type="share",
                                   template_id=t.id, properties={}, attributes={},
                                   requires=[]))
    migration.upgrade(db)
    with db.session() as s:
        row = s.scalars(sa.select(models.StackResource)).one()
        old_id = row.id
        s.delete(row)
    with db.session() as s:
        new = models.StackResource(stack_id=stack_id, name="r2", type="share",
                                   properties={}, attributes={}, requires=[])
        s.add(new)
        s.flush()
        assert new.id > old_id
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    db.dispose()


def test_insert_rows_parents_first_with_their_defaults(db):
    """``insert_rows_tx`` (a stack's begin) writes new objects as plain
    INSERTs: a child given before its parent still follows it (the foreign
    keys are enforced on every database here), an unset key is made by its
    default or the database and set on the object, other defaults apply."""
    share = models.Share(id=models.new_id(), size=1, share_proto="NFS")
    inst = models.ShareInstance(share_id=share.id, host="h@dummy", status="creating")
    req = models.Request(resource_type="share_instance", resource_id="x", action="create")
    with db.session() as session:
        api.insert_rows_tx(session, [req, inst, share])
    assert inst.id is not None and isinstance(req.id, int)
    got = api.get(db, models.ShareInstance, inst.id)
    assert (got.share_id, got.export_locations, got.access_rules_status) == (share.id, [],
                                                                            "active")
    assert got.created_at is not None
    assert api.get(db, models.Request, req.id).status == "pending"


def _updates(db) -> list[str]:
    """The UPDATEs the database is sent from now on (SQLite's multi-row one
    begins with its WITH)."""
    sent: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *a: sent.append(a[2]) if " ".join(a[2].split()).startswith(
                        ("UPDATE", "WITH given")) else None)
    return sent


def test_transitions_of_the_same_change_apply_together_and_each_row_is_checked(db):
    # db/reconcile.transitions: the one-change groups of one shape are one
    # UPDATE … RETURNING (PostgreSQL, SQLite), one by one elsewhere; the
    # outcome per group is the same either way.
    from sharemgr.db import reconcile as db_rec

    rows = [_instance(db) for _ in range(4)]
    api.conditional_update(db, models.ShareInstance, rows[1].id, {}, {"status": "error"})
    change = ({"status": "creating"}, {"status": "available"})
    groups = [[(models.ShareInstance, r.id, *change)] for r in rows[:3]]
    groups.append([(models.ShareInstance, rows[2].id, *change)])  # named twice: in order
    groups.append([(models.ShareInstance, rows[3].id, {"status": "creating"},
                    {"status": "error"})])
    assert db_rec.transitions(db, groups) == [True, False, True, False, True]
    assert [api.get(db, models.ShareInstance, r.id).status for r in rows] == [
        "available", "error", "available", "error"]
    # A shape of many rows, one of which changed meanwhile.
    more = [_instance(db) for _ in range(5)]
    api.conditional_update(db, models.ShareInstance, more[3].id, {}, {"status": "deleting"})
    updates = _updates(db)
    applied = db_rec.transitions(db, [[(models.ShareInstance, r.id, *change)] for r in more])
    assert applied == [True, True, True, False, True]
    assert len(updates) == (5 if db.dialect == "mysql" else 1)
    assert api.get(db, models.ShareInstance, more[3].id).status == "deleting"


def test_transitions_with_each_rows_own_values(db):
    # A healthy pass writes each share's export locations: on PostgreSQL and
    # SQLite one UPDATE … FROM (VALUES …) for the lot, on MariaDB one per row.
    from sharemgr.db import reconcile as db_rec

    rows = [_instance(db) for _ in range(4)]
    api.conditional_update(db, models.ShareInstance, rows[2].id, {}, {"status": "error"})
    places = [[{"path": f"10.0.0.{i}:/s", "is_admin_only": False}] for i in range(4)]
    groups = [[(models.ShareInstance, r.id, {"status": "creating"},
                {"status": "available", "export_locations": where})]
              for r, where in zip(rows, places, strict=True)]
    updates = _updates(db)
    assert db_rec.transitions(db, groups) == [True, True, False, True]
    assert len(updates) == (4 if db.dialect == "mysql" else 1)
    got = [api.get(db, models.ShareInstance, r.id) for r in rows]
    assert [g.status for g in got] == ["available", "available", "error", "available"]
    assert [g.export_locations for g in got] == [places[0], places[1], [], places[3]]


def test_rows_statement_is_built_once_and_each_call_stamps_its_own_time(db):
    # db/api._update_rows_stmt: one statement object per shape (its cache key
    # computed once); the time it stamps and the fence it bumps are the
    # call's, not the first call's.
    if not db.update_returning:
        pytest.skip("MariaDB updates row by row (no UPDATE … RETURNING)")
    rows = [_instance(db) for _ in range(4)]
    api._update_rows_stmt.cache_clear()
    stamps = []
    for part, (seen, new) in zip((rows[:2], rows[2:]), (("creating", "available"),
                                                        ("creating", "error")), strict=True):
        with db.session() as session:
            won = api.conditional_update_rows_tx(
                session, models.ShareInstance, [(r.id, {"status": seen}, {"status": new})
                                                for r in part])
        assert won == {r.id for r in part}
        got = [api.get(db, models.ShareInstance, r.id) for r in part]
        assert {g.status for g in got} == {new} and {g.fence for g in got} == {
            part[0].fence + 1}
        stamps.append({g.updated_at for g in got})
        time.sleep(0.01)
    built = api._update_rows_stmt.cache_info()
    assert (built.misses, built.hits) == (1, 1)
    assert len(stamps[0]) == len(stamps[1]) == 1 and min(stamps[1]) > max(stamps[0])


def test_rows_of_own_values_store_what_a_plain_update_would(db):
    # db/given_rows.py: the rows go as one JSON document. Each type comes
    # back as a plain UPDATE stores it (a datetime, JSON, an integer, NULL),
    # and batches of different sizes are one statement text (compiled once).
    import datetime

    if not db.update_returning:
        pytest.skip("MariaDB updates row by row (no UPDATE … RETURNING)")
    when = datetime.datetime(2026, 12, 6, 7, 8, 9, 123456)
    plain, batch = _instance(db), [_instance(db) for _ in range(3)]
    values = {"status": "available", "updated_at": when, "pending_size": 7,
              "export_locations": [{"path": "h:/s", "preferred": True}], "progress": None,
              "drift": None}
    expected = {"status": "creating"}
    api.conditional_update(db, models.ShareInstance, plain.id, expected, values)
    sent = _updates(db)
    for part in (batch[:1], batch[1:] + [plain]):
        with db.session() as session:
            won = api.conditional_update_rows_tx(
                session, models.ShareInstance, [(r.id, expected, values) for r in part])
        assert won == ({r.id for r in part} - {plain.id})
    assert len(sent) == 2 and sent[0] == sent[1]
    stored = [api.get(db, models.ShareInstance, r.id) for r in [plain, *batch]]
    assert {(s.status, s.updated_at, s.pending_size, s.progress, str(s.export_locations))
            for s in stored} == {("available", when, 7, None, str(values["export_locations"]))}
    # A JSON column's None as the plain UPDATE stores it (JSON's null, not
    # SQL's NULL), read raw.
    table = models.ShareInstance.__table__
    with db.engine.connect() as conn:
        raw = dict(conn.execute(sa.select(table.c.id, table.c.drift.is_(None)).where(
            table.c.id.in_([plain.id, *(r.id for r in batch)]))).all())
    assert set(raw.values()) == {raw[plain.id]}


def test_own_values_too_long_for_their_column_are_refused(db):
    # SQLite keeps any length: its one-statement path checks the values the
    # engine's hook checks in a plain UPDATE; the servers refuse them
    # themselves. Nothing is written.
    from sharemgr.db import reconcile as db_rec

    rows = [_instance(db) for _ in range(2)]
    groups = [[(models.ShareInstance, r.id, {"status": "creating"},
                {"status": "available", "task_state": t})]
              for r, t in zip(rows, ["ok", "x" * 300], strict=True)]
    with pytest.raises(sa.exc.DataError) as refused:
        db_rec.transitions(db, groups)
    if db.dialect == "sqlite":
        assert "too long for column share_instances.task_state" in str(refused.value)
    assert [api.get(db, models.ShareInstance, r.id).status for r in rows] == ["creating"] * 2


def test_taking_many_rows_is_one_update_per_status(db):
    # The reconciliation takes its batch's rows (their tokens bumped) in one
    # UPDATE … RETURNING per status seen (PostgreSQL, SQLite); a row whose
    # status moved is left out; MariaDB takes them one by one.
    from sharemgr.db import leases as db_leases

    rows = [_instance(db) for _ in range(5)]
    api.conditional_update(db, models.ShareInstance, rows[4].id, {}, {"status": "extending"})
    api.conditional_update(db, models.ShareInstance, rows[3].id, {}, {"status": "error"})
    seen = {r.id: "creating" for r in rows[:4]} | {rows[4].id: "extending"}
    before = {r.id: api.get(db, models.ShareInstance, r.id).fence for r in rows}
    updates = _updates(db)
    taken = db_leases.take_rows(db, models.ShareInstance, seen)
    assert sorted(taken) == sorted(r.id for r in (*rows[:3], rows[4]))
    assert {i: t.fence for i, t in taken.items()} == {i: before[i] + 1 for i in taken}
    assert len(updates) == (5 if db.dialect == "mysql" else 2)
    assert api.get(db, models.ShareInstance, rows[3].id).fence == before[rows[3].id]


def test_statements_for_computed_values_built_per_call_are_bounded():
    """``conditional_update_tx`` keeps a statement per Computed expression
    (each meant to be a module's constant). Expressions built per call get
    a statement each, right for its expression, and the kept ones stay
    bounded instead of holding every expression ever passed."""
    import sqlalchemy as sa
    from sharemgr.db import api as db_api
    from sharemgr.db import models

    table = models.Share.__table__
    for i in range(3 * db_api._COMPUTED_MAX):
        expr = table.c.size + sa.literal_column(str(100000 + i))
        stmt = db_api._computed_stmt(table, (), (), {"size": expr})
        assert f"{100000 + i}" in str(stmt), (i, str(stmt))
        assert len(db_api._COMPUTED_STMTS) <= db_api._COMPUTED_MAX


def test_rows_expected_null_are_updated_together_and_each_is_checked(db):
    # A stack's batch takes its rows' locks together: each row expected with
    # no holder (NULL) and its own key. On PostgreSQL and SQLite one UPDATE;
    # a row held meanwhile is not matched, on every database.
    rows = [_instance(db) for _ in range(3)]
    api.conditional_update(db, models.ShareInstance, rows[1].id, {},
                           {"replica_state": "in_sync"})
    groups = [[(models.ShareInstance, r.id, {"replica_state": None, "status": "creating"},
                {"status": "available", "host": f"h{i}@dummy"})]
              for i, r in enumerate(rows)]
    updates = _updates(db)
    with db.session() as session:
        together = api.applied_together_tx(session, groups)
        applied = [together[i] if i in together else
                   api.conditional_update_tx(session, *g[0]) for i, g in enumerate(groups)]
    assert applied == [True, False, True]
    assert len(updates) == (3 if db.dialect == "mysql" else 1)
    got = [api.get(db, models.ShareInstance, r.id) for r in rows]
    assert [(g.status, g.host) for g in got] == [
        ("available", "h0@dummy"), ("creating", "h@dummy"), ("available", "h2@dummy")]
