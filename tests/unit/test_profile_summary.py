"""benchmarks/profile_summary.py: where a py-spy profile's samples went."""

from __future__ import annotations

from benchmarks import profile_summary


def test_samples_are_split_into_idle_and_busy_by_package(tmp_path):
    raw = tmp_path / "engine.txt"
    raw.write_text(
        "_bootstrap (threading.py:1002);run (sharemgr/manager/runner.py:90);"
        "execute (sqlalchemy/engine/base.py:1400);execute (sqlite3/dbapi2.py:1) 6\n"
        "_bootstrap (threading.py:1002);check (sharemgr/convergence/worker.py:250) 3\n"
        "_bootstrap (threading.py:1002);wait (threading.py:320) 90\n"
        "_bootstrap (threading.py:1002);emit (logging/__init__.py:1100) 1\n"
        "not a sample line\n")
    out = profile_summary.summarize(raw, top=2)
    assert (out["samples"], out["idle_samples"], out["busy_samples"]) == (100, 90, 10)
    assert out["busy_percent_by_package"] == {
        "database driver (sqlite3, psycopg2, pymysql)": 60.0, "convergence engine": 30.0,
        "logging": 10.0}
    assert list(out["busy_percent_by_top_function"]) == [
        "execute (sqlite3/dbapi2.py:1)", "check (sharemgr/convergence/worker.py:250)"]


def test_a_method_waiting_is_idle_whatever_its_class(tmp_path):
    """py-spy writes a method as ``Class.method``: a thread blocked in
    ``Condition.wait`` or ``Queue.get`` waits, it does not work."""
    raw = tmp_path / "engine.txt"
    raw.write_text(
        "_bootstrap (threading.py:1002);Condition.wait (threading.py:331) 7\n"
        "_bootstrap (threading.py:1002);Queue.get (queue.py:180) 2\n"
        "_bootstrap (threading.py:1002);Worker.check (sharemgr/convergence/worker.py:250) 1\n"
        "_bootstrap (threading.py:1002);LRUCache.get (sqlalchemy/util/_collections.py:5) 1\n")
    out = profile_summary.summarize(raw, top=2)
    assert (out["idle_samples"], out["busy_samples"]) == (9, 2)
