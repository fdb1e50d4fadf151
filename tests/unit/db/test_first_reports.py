"""Many SyncPoints' first reports in one statement (db/first_reports.py), on
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid

import pytest
from sharemgr.db import first_reports, stacks, sync_points

from tests.unit import statements

T1, T2 = str(uuid.uuid4()), str(uuid.uuid4())


def _get(db, *key):
    with db.session() as session:
        return sync_points.get_tx(session, *key)


def test_first_reports_write_each_point_still_at_key_0_in_one_statement(db):
    """Each point at key 0 gets its ``{sender: data}`` and key 1; one already
    written (its sender reporting again) and one of another traversal are
    left as they are and not named; MariaDB writes nothing (None: the
    caller goes one by one)."""
    with db.session() as session:
        stack = stacks.stack_create_tx(session, f"s-{uuid.uuid4().hex[:6]}")
        sync_points.create_tx(session, stack.id, T1, [(1, False), (2, True), (3, False)],
                              reported={("3", False): {"3:update": "old"}})
        sync_points.create_tx(session, stack.id, T2, [(4, False)], include_stack=False)
    with statements.sent(db, "UPDATE", "WITH") as sent, db.session() as session:
        written = first_reports.first_reports_tx(session, T1, [
            (1, False, {"1:update": None}), (2, True, {"9:update": {"size": 2}}),
            (3, False, {"3:update": "new"}), (4, False, {"4:update": None})])
    if db.dialect == "mysql":
        assert written is None and sent == []
        return
    assert written == {("1", False), ("2", True)} and len(sent) == 1
    got = [_get(db, e, t, u) for e, t, u in ((1, T1, False), (2, T1, True), (3, T1, False),
                                             (4, T2, False))]
    assert [(p.atomic_key, p.input_data) for p in got] == [
        (1, {"1:update": None}), (1, {"9:update": {"size": 2}}), (1, {"3:update": "old"}),
        (0, {})]


def test_a_few_first_reports_look_their_points_up_by_key_on_postgresql(db):
    """PostgreSQL reads the rows of a JSON document as 100 and a new
    traversal's points as a few: joined on them alone, it hashed every point
    of the table, or scanned the traversal's and the document once per
    point. ``given_rows.looked_up`` has it find each point by its key,
    whether or not its statistics know the traversal."""
    if db.dialect != "postgresql":
        pytest.skip("a PostgreSQL planner's choice")
    with db.session() as session:
        stack = stacks.stack_create_tx(session, f"s-{uuid.uuid4().hex[:6]}")
        sync_points.create_tx(session, stack.id, T1, [(i, u) for i in range(4000)
                                                      for u in (False, True)])
    with statements.sent(db, "WITH given") as sent, db.session() as session:
        assert first_reports.first_reports_tx(session, T1, [
            (7, False, {"7:update": None}), (8, False, {"8:update": None})]) == {
            ("7", False), ("8", False)}
    (statement, parameters), = sent
    for analyze in (False, True):
        with db.engine.connect() as conn:
            if analyze:
                conn.exec_driver_sql("ANALYZE sync_points")
                conn.commit()
            plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement,
                                                                 parameters))
        assert "on sync_points_pkey" in plan and "Seq Scan on sync_points" not in plan, plan
