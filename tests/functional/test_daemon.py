"""The share-manager daemon starts, shows as alive, stops cleanly, and refuses
bad configuration with one clear line."""

from __future__ import annotations

import signal

import pytest

from tests.functional.harness import wait_until

pytestmark = pytest.mark.functional


def one_error_line(out) -> str:
    """The one error line of a command's output (no traceback); test_driver_manager too."""
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if "ERROR" in line or "error:" in line]
    assert len(errors) == 1, text
    return errors[0]


def _up_and_down(d):
    d.sync()
    engine = d.start()
    services = d.json("service", "list")
    assert len(services) == 1 and services[0]["alive"] is True
    assert services[0]["host"] == d.host
    assert engine.terminate() == 0
    # Stopped: gone from the group and marked stopped in the table.
    assert d.json("service", "list") == []
    stopped = d.json("service", "list", "--all")
    assert stopped[0]["stopped_at"] and stopped[0]["alive"] is False


def test_embedded_default_up_and_down(deployment):
    _up_and_down(deployment(backends={}))


def test_postgresql_and_redis_up_and_down(deployment, pg_url, redis_url):
    _up_and_down(deployment(db_url=pg_url, coordination_url=redis_url, backends={}))


def test_mariadb_up_and_down(deployment, mysql_url):
    _up_and_down(deployment(db_url=mysql_url, backends={}))


@pytest.mark.parametrize(
    "section,option,value",
    [
        ("DEFAULT", "startup_reconciliation_wait_seconds", "abc"),
        ("DEFAULT", "startup_reconciliation_wait_seconds", "-5"),
        ("database", "connect_timeout", "ten"),
        ("DEFAULT", "startup_reconciliation_enabled", "perhaps"),
    ],
)
def test_bad_config_value_is_one_line(deployment, tmp_path, section, option, value):
    d = deployment(backends={})
    bad = d.write_config(tmp_path / "bad.conf", **{section: {option: value}})
    out = d.run_manager(config=bad)
    assert out.returncode == 2
    line = one_error_line(out)
    assert option in line and value in line


def test_missing_config_file(deployment, tmp_path):
    d = deployment(backends={})
    out = d.run_manager(config=tmp_path / "nope.conf")
    assert out.returncode == 2
    assert "nope.conf" in one_error_line(out)


def _unreachable_database(d, tmp_path, user: str):
    """A config file naming a PostgreSQL server nobody listens for."""
    return d.write_config(
        tmp_path / "bad.conf",
        database={"connection": f"postgresql+psycopg2://{user}@127.0.0.1:1/sm",
                  "connect_timeout": "2"},
    )


def test_unreachable_database_is_one_line(deployment, tmp_path):
    d = deployment(backends={})
    out = d.run_manager(config=_unreachable_database(d, tmp_path, "sm:hunter2"))
    assert out.returncode == 1
    line = one_error_line(out)
    assert "127.0.0.1:1" in line
    assert "hunter2" not in out.stdout + out.stderr


def test_unreachable_redis_is_one_line(deployment, tmp_path):
    d = deployment(backends={})
    d.sync()
    bad = d.write_config(
        tmp_path / "bad.conf", coordination={"backend_url": "redis://:s3cret@127.0.0.1:1"}
    )
    out = d.run_manager(config=bad)
    assert out.returncode == 1
    assert "127.0.0.1:1" in one_error_line(out)
    assert "s3cret" not in out.stdout + out.stderr


def test_schema_not_synced(deployment):
    d = deployment(backends={})
    out = d.run_manager()
    assert out.returncode == 1
    assert "sharectl db sync" in one_error_line(out)


def test_sharectl_reports_unreachable_database(deployment, tmp_path):
    d = deployment(backends={})
    bad = _unreachable_database(d, tmp_path, "sm")
    out = d.sharectl("service", "list", config=bad, check=False)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "127.0.0.1:1" in out.stderr


def test_an_unknown_coordination_backend_is_one_line(deployment, tmp_path):
    d = deployment(backends={})
    d.sync()
    bad = d.write_config(tmp_path / "bad.conf", coordination={"backend_url": "bogus://foo"})
    out = d.run_manager(config=bad)
    assert out.returncode == 1
    assert "bogus" in one_error_line(out)
    assert "Could not load" not in out.stdout + out.stderr
    out = d.sharectl("service", "list", config=bad, check=False)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "bogus" in out.stderr


def test_sharectl_on_a_database_never_synced_says_what_to_do(deployment):
    d = deployment(backends={})
    out = d.sharectl("share", "list", check=False)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        out.stderr.strip()] and "run 'sharectl db sync'" in out.stderr
    assert "SELECT" not in out.stderr and "Traceback" not in out.stderr
    # Not made either: a sharectl started in another folder than the
    # daemon's (the default state_path) would read an empty one of its own.
    assert "no database at " in out.stderr and not (d.state / "sharemgr.sqlite").exists()
    # Nor does share-manager make one (an empty file, then "revision None").
    started = d.run_manager()
    assert started.returncode == 1 and "no database at " in one_error_line(started)
    assert not (d.state / "sharemgr.sqlite").exists()
    # Its log in a file: the line is on the terminal too (it was only there).
    logged = d.write_config(d.root / "logged.conf",
                            DEFAULT={"log_file": str(d.root / "manager.log")})
    started = d.run_manager(config=logged)
    assert started.returncode == 1 and started.stderr.startswith(
        "share-manager: cannot start: no database at "), started.stderr
    assert "no database at " in (d.root / "manager.log").read_text()
    d.sync()
    assert d.sharectl("share", "list", "-f", "json").stdout.strip() == "[]"


def test_wait_says_at_once_when_no_engine_serves_the_host(deployment):
    d = deployment()
    d.sync()
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--host", "elsewhere",
                     "--wait", "--timeout", "1", "-f", "json", check=False)
    assert out.returncode == 1
    assert "no live share-manager serves elsewhere@dummy" in out.stderr
    assert "still creating after 1s" in out.stderr
    assert [s["host"] for s in d.json("share", "list")] == ["elsewhere@dummy"]
    # Without --wait too: a host named by hand that no engine serves (a typo?).
    out = d.sharectl("share", "create", "1", "--proto", "NFS", "--host", "elsewhere",
                     check=False)
    assert out.returncode == 0
    assert "no live share-manager serves elsewhere@dummy" in out.stderr
    bad = d.sharectl("share", "create", "1", "--proto", "NFS", "--host", "a@b", check=False)
    assert bad.returncode == 2 and "invalid host" in bad.stderr


def test_a_database_late_at_start_is_waited_for(deployment, pg_url, redis_url):
    """[database] max_retries / retry_interval (oslo.db's names): the
    database refuses at start (a proxy not listening yet); share-manager
    says so and tries again until it answers, then comes up."""
    from sqlalchemy.engine import make_url

    from tests.functional.netfault import Proxy

    proxy = Proxy(make_url(pg_url).port or 5432)
    d = deployment(db_url=pg_url, coordination_url=redis_url, backends={})
    d.sync()
    via = make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)
    late = d.write_config(d.root / "late.conf", database={
        "connection": via, "max_retries": "-1", "retry_interval": "1", "connect_timeout": "2"})
    engine = d.start(config=late, wait=False)
    engine.wait_for_log("trying again in 1s (try 2 of unlimited)")
    assert engine.proc.poll() is None
    proxy.start()
    try:
        engine.wait_for_log("share-manager up")
        assert engine.terminate() == 0
    finally:
        proxy.cut()

    # Asked to stop while it waits: stopped as asked (exit 0), no error.
    waiting = d.start(config=late, wait=False)
    waiting.wait_for_log("trying again in 1s")
    assert waiting.terminate() == 0
    assert "stopped before it was up" in waiting.text() and " ERROR " not in waiting.text()

    # A bounded number of tries: then the one line, exit code 1.
    bounded = d.write_config(d.root / "bounded.conf", database={
        "connection": via, "max_retries": "1", "retry_interval": "1", "connect_timeout": "2"})
    out = d.run_manager(config=bounded)
    assert out.returncode == 1
    assert "try 2 of 2" in out.stdout + out.stderr
    assert f"127.0.0.1:{proxy.port}" in one_error_line(out)


def test_sigusr2_writes_every_threads_stack_and_the_engine_goes_on(deployment):
    """An operator's look at what a running engine waits on: SIGUSR2 writes
    each thread's stack to its log; the engine keeps serving."""
    d = deployment()
    d.sync()
    engine = d.start()
    engine.proc.send_signal(signal.SIGUSR2)
    wait_until(lambda: "(SIGUSR2)" in engine.text(), what="the stacks in the log")
    assert "thread MainThread" in engine.text().split("(SIGUSR2)", 1)[1]
    d.sharectl("share", "create", "1", "--proto", "NFS", "--wait")
    assert engine.proc.poll() is None
    assert engine.terminate(timeout=30) == 0
