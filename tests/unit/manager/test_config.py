"""Configuration: the sample is current, bad values fail at load, URLs hide secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from oslo_config import cfg
from sharemgr.manager import config
from sharemgr.manager.coordination import safe_url

ROOT = Path(__file__).resolve().parents[3]


def test_sample_config_is_current(tmp_path):
    out = tmp_path / "sample.conf"
    gen = Path(sys.executable).parent / "oslo-config-generator"
    subprocess.run(
        [str(gen), "--config-file", str(ROOT / "etc/sharemgr-config-generator.conf"),
         "--output-file", str(out)],
        check=True, cwd=ROOT,
    )
    current = (ROOT / "etc/sharemgr.conf.sample").read_text()
    assert out.read_text() == current, "etc/sharemgr.conf.sample is stale: run 'make genconfig'"


def test_every_option_has_help():
    for group, opts in config.list_opts():
        for opt in opts:
            assert opt.help, f"[{group}] {opt.name} has no help"


def _load(tmp_path, text):
    f = tmp_path / "s.conf"
    f.write_text(text)
    return config.load([], config_file=str(f), conf=cfg.ConfigOpts())


def test_defaults_are_embedded(tmp_path):
    conf = _load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}\n")
    assert config.database_url(conf) == f"sqlite:///{tmp_path}/sharemgr.sqlite"
    assert config.coordination_url(conf) == (
        f"file://{tmp_path}/coordination?executor=synchronous&timeout=10")
    assert conf.enabled_share_backends == ["dummy"]
    assert conf.startup_reconciliation_enabled is True
    assert conf.startup_reconciliation_wait_seconds == 10


def test_backend_groups_are_registered(tmp_path):
    conf = _load(tmp_path, "[DEFAULT]\nenabled_share_backends = a,b\n[a]\nshare_driver = dummy\n")
    assert conf.a.share_driver == "dummy" and conf.b.share_driver is None
    assert conf.b.driver_handles_share_servers is False


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[DEFAULT]\nstartup_reconciliation_wait_seconds = abc\n", "'abc'"),
        ("[DEFAULT]\nrequest_workers = 0\n", "request_workers"),
        ("[coordination]\nmembership_timeout = 1\n", "membership_timeout"),
        ("[DEFAULT]\nenabled_share_backends = x\n[x]\ndriver_handles_share_servers = maybe\n",
         "[x] driver_handles_share_servers"),
        ("[DEFAULT\nhost = a\n", "cannot parse"),
        ("[DEFAULT]\nstate_path = relative/dir\n", "must be an absolute path"),
    ],
)
def test_bad_values_fail_at_load(tmp_path, text, needle):
    with pytest.raises(config.ConfigError) as err:
        _load(tmp_path, text)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_redis_url_gets_membership_timeout(tmp_path):
    conf = _load(tmp_path, "[coordination]\nbackend_url = redis://:pw@h:6379\n")
    url = "redis://:pw@h:6379?executor=synchronous&membership_timeout=10&lock_timeout=10"
    assert config.coordination_url(conf) == url
    assert safe_url(url).startswith("redis://:***@h:6379?")


def test_etcd_url_gets_the_timeouts_it_does_not_set(tmp_path):
    """Membership, lock and call timeouts from membership_timeout; one the
    URL sets is kept (``lock_timeout=`` is not ``timeout=``)."""
    conf = _load(tmp_path, "[coordination]\nbackend_url = etcd3+http://gw:2379?lock_timeout=4"
                           "\nmembership_timeout = 6\n")
    assert config.coordination_url(conf) == (
        "etcd3+http://gw:2379?lock_timeout=4&executor=synchronous&membership_timeout=6"
        "&timeout=1")


def test_an_etcd_call_ends_in_time_for_its_heartbeat_retry():
    """tooz beats every half TTL and retries a second after a failed beat:
    a beat stuck in a leader election for the whole call timeout is retried
    before the membership's TTL runs out."""
    for ttl in range(5, 601):
        call = config.etcd_call_timeout(ttl)
        assert call >= 1 and ttl / 2 + call + 1 < ttl, ttl
    assert config.etcd_call_timeout(2) == 1


def test_a_reload_with_a_bad_value_changes_nothing(tmp_path):
    """SIGHUP with a file whose mutable option cannot be read: the reload
    fails with one line and every option keeps its value, the good new ones
    too (all or nothing). Before, oslo.config had swapped the bad value in:
    the next graceful stop failed reading it, and the engine said it had
    stopped while a driver call still ran. A later good reload applies."""
    conf = _load(tmp_path, "[DEFAULT]\ngraceful_shutdown_timeout = 30\n"
                           "backend_setup_retry_interval = 5\n")
    path = tmp_path / "s.conf"
    path.write_text("[DEFAULT]\ngraceful_shutdown_timeout = abc\n"
                    "backend_setup_retry_interval = 7\n")
    with pytest.raises(config.ConfigError, match="graceful_shutdown_timeout"):
        config.reload(conf)
    assert (conf.graceful_shutdown_timeout, conf.backend_setup_retry_interval) == (30, 5)
    config.validate(conf)  # every option still reads
    path.write_text("[DEFAULT]\ngraceful_shutdown_timeout = 45\n"
                    "backend_setup_retry_interval = 7\n")
    config.reload(conf)
    assert (conf.graceful_shutdown_timeout, conf.backend_setup_retry_interval) == (45, 7)


def test_a_failing_reload_calls_no_hook_and_reads_the_immutable_options(tmp_path):
    """oslo.config calls the mutate hooks while it reloads: oslo.log's turned
    debug logging on for a reload that then failed on another option. And a
    bad value of an option only a restart changes passed the reload (it is
    not read), the next start then failing on it."""
    conf = _load(tmp_path, "[DEFAULT]\ndebug = false\ngraceful_shutdown_timeout = 30\n")
    called = []
    conf.register_mutate_hook(lambda conf, changed: called.append(dict(changed)))
    path = tmp_path / "s.conf"
    path.write_text("[DEFAULT]\ndebug = true\ngraceful_shutdown_timeout = abc\n")
    with pytest.raises(config.ConfigError, match="graceful_shutdown_timeout"):
        config.reload(conf)
    assert called == [] and conf.debug is False
    path.write_text("[DEFAULT]\ndebug = false\nrequest_workers = abc\n")
    with pytest.raises(config.ConfigError, match="request_workers"):
        config.reload(conf)
    assert called == []
    path.write_text("[DEFAULT]\ndebug = true\ngraceful_shutdown_timeout = 30\n")
    config.reload(conf)
    assert conf.debug is True and len(called) == 1


def test_typos_in_the_files_are_named(tmp_path):
    """What the daemon warns of at start (each line then 'unknown option,
    ignored'): an option no one registered in one of our groups, and a
    section whose name is a near miss of ours (``[databse]``: its
    ``connection`` would be ignored, the daemon quietly on SQLite). Another
    program's section is not ours to judge."""
    conf = _load(tmp_path, "[DEFAULT]\nhots = a\n[databse]\nconnection = sqlite://\n"
                           "[keystone_authtoken]\nauth_url = http://x\n")
    path = tmp_path / "s.conf"
    assert config.unknown_options(conf) == [
        f"{path}:2: [DEFAULT] hots",
        f"{path}:4: [databse] connection (a section of no option: [database]?)"]
