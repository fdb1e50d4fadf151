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
        "&timeout=6")


def test_backend_names_must_fit_host_columns(tmp_path):
    path = tmp_path / "sm.conf"
    path.write_text(f"[DEFAULT]\nenabled_share_backends = {'b' * 129}\n")
    with pytest.raises(config.ConfigError, match="1 to 128 characters, got 129"):
        config.load([], config_file=str(path), conf=cfg.ConfigOpts())


def test_unknown_options_in_known_groups_are_named_with_file_and_line(tmp_path):
    text = ("[DEFAULT]\nstate_path = /tmp/x\n\nstartup_reconcilation_enabled = false\n"
            "log-config-append = /dev/null\n"  # a dashed name is the option
            "log_config = /dev/null\n"  # a deprecated name of an oslo.log option
            "[dummy]\ndummy_fail_method = x\ndummy_fail_methods = y\n"
            "[keystone_authtoken]\nanything = 1\n")
    conf = _load(tmp_path, text)
    from sharemgr.drivers.dummy import DummyDriver

    conf.register_opts(DummyDriver.driver_opts, group="dummy")  # as the loader does
    path = conf.config_file[0]
    assert config.unknown_options(conf) == [
        f"{path}:4: [DEFAULT] startup_reconcilation_enabled",
        f"{path}:8: [dummy] dummy_fail_method",
    ]


def test_a_redis_url_without_the_extra_says_which_to_install(monkeypatch):
    """redis-py is the 'redis' extra: without it a redis:// backend is one
    line naming the extra (and the password masked)."""
    import sys

    from sharemgr.manager.coordination import CoordinationUnavailable, Coordinator

    monkeypatch.setitem(sys.modules, "redis", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "tooz.drivers.redis", raising=False)
    with pytest.raises(CoordinationUnavailable) as info:
        Coordinator("redis://:hunter2@127.0.0.1:6379", "h.e1")
    message = str(info.value)
    assert "pip install 'sharemgr[redis]'" in message and "hunter2" not in message, message
