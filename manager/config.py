"""Configuration options of sharemgr (oslo.config).

Every option (declared in ``options.py``) is registered here so that
``oslo-config-generator`` (entry point ``oslo.config.opts``, namespace
``sharemgr``) produces ``etc/sharemgr.conf.sample``.
oslo.config validates a value only when it is read, so ``load()`` reads every
registered option once and turns the first bad value into one clear error.
"""

from __future__ import annotations

import configparser
import difflib
import os
import urllib.parse

from oslo_config import cfg, iniparser
from oslo_log import _options as oslo_log_options  # the opts of its oslo.config.opts entry point
from sharemgr.common.version import version
from sharemgr.db import retry
from sharemgr.drivers import options as driver_options
from sharemgr.manager.options import GROUPS

CONF = cfg.CONF

ENV_CONFIG_FILE = "SHAREMGR_CONFIG"

def register_opts(conf: cfg.ConfigOpts = CONF) -> None:
    """Register every static option on ``conf`` (safe to call twice)."""
    for group, opts in GROUPS.items():
        conf.register_opts(opts, group=group)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """Options for oslo-config-generator. Backend options are shown under the
    placeholder group ``[backend]``: copy them into each group named in
    ``enabled_share_backends``."""
    from sharemgr.drivers import dummy

    result: list[tuple[str | None, list[cfg.Opt]]] = [
        (group or "DEFAULT", list(opts)) for group, opts in GROUPS.items()]
    result.append(("backend", driver_options.backend_opts + dummy.dummy_opts))
    return result


class ConfigError(Exception):
    """A user's configuration mistake: printed as one line, exit code 2."""


def retry_policy(conf: cfg.ConfigOpts = CONF) -> retry.Policy:
    """``[database]``'s retries of transactions that lost a conflict."""
    opts = conf.database
    return retry.Policy(opts.db_max_retries, opts.db_retry_interval,
                        opts.db_inc_retry_interval, opts.db_max_retry_interval)


def database_url(conf: cfg.ConfigOpts = CONF) -> str:
    return conf.database.connection or "sqlite:///" + os.path.join(
        conf.state_path, "sharemgr.sqlite"
    )


def coordination_url(conf: cfg.ConfigOpts = CONF) -> str:
    url = conf.coordination.backend_url or "file://" + os.path.join(
        conf.state_path, "coordination"
    )
    timeout = conf.coordination.membership_timeout
    if url.startswith("etcd3+"):
        return _with_defaults(url, {
            "executor": "synchronous", "membership_timeout": str(timeout),
            # Locks expire with the membership (tooz refreshes both at each
            # heartbeat), and no call to etcd outlasts it: a partitioned
            # engine hears that it is cut off before its peers act.
            "lock_timeout": str(timeout), "timeout": str(etcd_call_timeout(timeout))})
    if url.startswith(("file://", "redis")) and "executor=" not in url:
        # sharemgr waits on every tooz result at once; tooz's default thread
        # pool only adds a 1 s idle wait to every coordinator stop.
        url += ("&" if "?" in url else "?") + "executor=synchronous"
    if url.startswith("file://") and "timeout=" not in url:
        url += ("&" if "?" in url else "?") + f"timeout={timeout}"
    elif url.startswith("redis"):
        if "membership_timeout=" not in url:
            url += ("&" if "?" in url else "?") + f"membership_timeout={timeout}"
        if "lock_timeout=" not in url:
            # A dead engine's Redis locks expire with its membership (tooz
            # refreshes held locks on every heartbeat), so the pass that finds
            # the engine dead also finds its locks free.
            url += f"&lock_timeout={timeout}"
    return url


def etcd_call_timeout(membership_timeout: int) -> int:
    """Seconds an etcd call may take. tooz's heart refreshes the leases
    every half TTL and retries a failed refresh a second later: a refresh
    stuck in a leader election must give up, and its retry land, before
    the membership runs out (a call as long as the TTL lost it). Whole
    seconds (tooz's option); below 5 s of TTL one second is the least."""
    return max(1, (membership_timeout - 2) // 3)


def _with_defaults(url: str, defaults: dict[str, str]) -> str:
    """``url`` with the query arguments of ``defaults`` it does not set."""
    parts = urllib.parse.urlsplit(url)
    given = {k for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)}
    extra = [(k, v) for k, v in defaults.items() if k not in given]
    query = "&".join(q for q in (parts.query, urllib.parse.urlencode(extra)) if q)
    return urllib.parse.urlunsplit(parts._replace(query=query))


def _raw_value(conf: cfg.ConfigOpts, group: str, name: str) -> str | None:
    """The text a config file gives for an option (the last file wins)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    for path in conf.config_file or []:
        try:
            parser.read(path)
        except configparser.Error:
            continue
    section = "DEFAULT" if group == "DEFAULT" else group
    try:
        return parser.get(section, name)
    except (configparser.Error, KeyError):
        return None


def _bad_value(conf: cfg.ConfigOpts, group: str, name: str, exc: Exception) -> ConfigError:
    reason = str(exc).split(" is not valid: ", 1)[-1].strip()
    raw = _raw_value(conf, group, name)
    shown = f" = {raw!r}" if raw is not None else ""
    return ConfigError(f"invalid value for [{group}] {name}{shown}: {reason}")


def validate_group(conf: cfg.ConfigOpts, group: str) -> dict[str, object]:
    """Read every option of one group (e.g. a backend group after a driver
    registered its options) so a bad value fails now; their values."""
    attr = conf[group]
    values: dict[str, object] = {}
    for opt_name in list(attr):
        try:
            values[opt_name] = getattr(attr, opt_name)
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise _bad_value(conf, group, opt_name, exc)
    return values


def _read_all(conf: cfg.ConfigOpts) -> dict[tuple[str | None, str], object]:
    """Read every registered option so that a bad value fails now, not later;
    every value, by (group, name), DEFAULT's group None."""
    values: dict[tuple[str | None, str], object] = {}
    for name in list(conf):
        try:
            value = conf[name]
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise _bad_value(conf, "DEFAULT", name, exc)
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            values.update({(name, opt): v for opt, v in validate_group(conf, name).items()})
        else:
            values[(None, name)] = value
    return values


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every registered option (e.g. after a reload); raises
    ConfigError with one line for the first bad value."""
    _read_all(conf)


# The values a failed reload put back, by configuration: cleared by the next one.
_PUT_BACK: dict[int, list[tuple[str | None, str]]] = {}


def reload(conf: cfg.ConfigOpts) -> None:
    """Re-read the config files (SIGHUP): the mutable options take their new
    values, all or none. A bad value raises ConfigError and every option
    keeps the value it had. The files are first read whole into a conf of
    their own, as a start reads them: oslo.config's reload calls the
    mutate hooks as it goes (oslo.log's turned debug on for a reload that
    then failed), and never reads an immutable option (a bad one passed,
    and the next start failed on it). Should a file change between that
    read and the reload, the old values are put back as overrides, which
    the next reload clears."""
    argv = [arg for path in conf.config_file or () for arg in ("--config-file", path)]
    argv += [arg for path in conf.config_dir or () for arg in ("--config-dir", path)]
    load(argv, conf=cfg.ConfigOpts(), prog=conf.prog or "sharemgr")
    before = _read_all(conf)
    for group, name in _PUT_BACK.pop(id(conf), []):
        conf.clear_override(name, group)
    try:
        conf.mutate_config_files()
        validate(conf)
    except BaseException:
        for (group, name), value in before.items():
            conf.set_override(name, value, group)
        _PUT_BACK[id(conf)] = list(before)
        raise


def load(
    argv: list[str] | None,
    config_file: str | None = None,
    conf: cfg.ConfigOpts = CONF,
    prog: str = "sharemgr",
) -> cfg.ConfigOpts:
    """Parse config files (``--config-file`` in argv, ``config_file`` or
    ``$SHAREMGR_CONFIG``), register per-backend groups and validate all values.

    Raises ConfigError with a one-line message on any mistake."""
    register_opts(conf)
    # oslo.log's options, from the module its own registration reads them
    # from: importing oslo_log.log (its formatters pull in http.client and
    # ssl) was a twentieth of a sharectl call. The daemon, which logs
    # through oslo.log, registers them with oslo.log's hooks before this.
    conf.register_cli_opts(oslo_log_options.common_cli_opts)
    conf.register_cli_opts(oslo_log_options.logging_cli_opts)
    conf.register_opts(oslo_log_options.generic_log_opts)
    conf.register_opts(oslo_log_options.log_opts)
    files = None
    if config_file:
        files = [config_file]
    elif os.environ.get(ENV_CONFIG_FILE) and not any(
        a.startswith("--config-file") or a.startswith("--config-dir") for a in (argv or [])
    ):
        files = [os.environ[ENV_CONFIG_FILE]]
    for f in files or []:
        if not os.path.isfile(f):
            raise ConfigError(f"config file not found: {f}")
    try:
        conf(argv or [], project="sharemgr", prog=prog, default_config_files=files,
             version=f"{prog or 'sharemgr'} {version()}")
    except cfg.ConfigFilesNotFoundError as exc:
        raise ConfigError(f"config file not found: {', '.join(exc.config_files)}")
    except cfg.ConfigFileParseError as exc:
        raise ConfigError(f"cannot parse config file {exc.config_file}: {exc.msg}")
    except cfg.Error as exc:
        raise ConfigError(str(exc).strip())
    try:
        backends = conf.enabled_share_backends
    except (cfg.ConfigFileValueError, ValueError) as exc:
        raise _bad_value(conf, "DEFAULT", "enabled_share_backends", exc)
    for backend in backends:
        # '<host>@<backend>#<pool>' must fit the 512 characters of a host column.
        if not 1 <= len(backend) <= 128:
            raise ConfigError("[DEFAULT] enabled_share_backends: a backend name must "
                              f"have 1 to 128 characters, got {len(backend)}")
        driver_options.register_backend_opts(conf, backend)
    _read_all(conf)
    return conf


class _Assignments(iniparser.BaseParser):
    """Where each option of a config file is set: (section, name, line)."""

    def __init__(self) -> None:
        super().__init__()
        self.section = "DEFAULT"
        self.found: list[tuple[str, str, int]] = []
        self._key_line = 0

    def _split_key_value(self, line: str) -> tuple[str, list[str]]:
        # assignment() comes once the value's continuation lines are read.
        self._key_line = self.lineno
        return super()._split_key_value(line)

    def new_section(self, section: str) -> None:
        self.section = section

    def assignment(self, key: str, value: list[str]) -> None:
        self.found.append((self.section, key, self._key_line))


def _deprecated_names(group: str) -> set[str]:
    names = set()
    for opt_group, opts in [*list_opts(), *oslo_log_options.list_opts()]:
        if (opt_group or "DEFAULT") == group:
            for opt in opts:
                names |= {d.name for d in opt.deprecated_opts if d.name}
    return names


def unknown_options(conf: cfg.ConfigOpts) -> list[str]:
    """'file:line: [group] name' of every option the config files set in a
    known group that no one registered (a typo is otherwise ignored).
    Sections no option is registered in (another program's) are not ours
    to judge, unless their name is a near miss of one of ours (``[databse]``:
    its options would be ignored, the daemon quietly on the defaults). Call
    it once every driver has registered its options."""
    out = []
    ours = [name for name in conf if isinstance(conf[name], cfg.ConfigOpts.GroupAttr)]
    for path in conf.config_file or []:
        parser = _Assignments()
        try:
            with open(path) as f:
                parser.parse(f)
        except (OSError, iniparser.ParseError):
            continue  # load() already refused a file it could not parse
        for section, name, line in parser.found:
            if section != "DEFAULT" and section not in conf:
                near = difflib.get_close_matches(section, ours, n=1, cutoff=0.8)
                if near:
                    out.append(f"{path}:{line}: [{section}] {name} (a section of no option: "
                               f"[{near[0]}]?)")
                continue
            known = set(conf if section == "DEFAULT" else conf[section])
            if name.replace("-", "_") not in known and name not in _deprecated_names(section):
                out.append(f"{path}:{line}: [{section}] {name}")
    return out
