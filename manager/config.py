"""Configuration options of sharemgr (oslo.config).

Every option is registered here so that ``oslo-config-generator`` (entry point
``oslo.config.opts``, namespace ``sharemgr``) produces ``etc/sharemgr.conf.sample``.
oslo.config validates a value only when it is read, so ``load()`` reads every
registered option once and turns the first bad value into one clear error.
"""

from __future__ import annotations

import configparser
import os
import socket

from oslo_config import cfg, iniparser, types
from oslo_log import _options as oslo_log_options  # the opts of its oslo.config.opts entry point
from sharemgr.common.version import version
from sharemgr.db import retry
from sharemgr.drivers import options as driver_options

CONF = cfg.CONF

ENV_CONFIG_FILE = "SHAREMGR_CONFIG"

default_opts = [
    cfg.HostnameOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<hostname>",
        help="Name of this host. Resources belong to '<host>@<backend>'; several "
        "share-manager processes may serve the same host (Active/Active).",
    ),
    *driver_options.common_opts,
    cfg.FloatOpt(
        "heartbeat_interval",
        default=10.0,
        min=0.1,
        max=60.0,
        help="Seconds between updates of this engine's row in the services table "
        "(its heartbeat_at, shown by 'sharectl service list'; whether an engine "
        "is alive is its coordination membership, not this).",
    ),
    cfg.IntOpt(
        "graceful_shutdown_timeout",
        default=60,
        min=0,
        max=3600,
        mutable=True,
        help="Seconds a stopping manager waits for running driver calls to finish.",
    ),
    cfg.FloatOpt(
        "backend_setup_retry_interval",
        default=2.0,
        min=0.1,
        max=3600.0,
        mutable=True,
        help="Seconds before the first retry of a backend whose do_setup or "
        "check_for_setup_error failed; each further retry waits twice as long, "
        "up to backend_setup_retry_max_interval. The other backends serve "
        "meanwhile; 'sharectl service list' shows the backend 'failed' with the "
        "reason until its set-up passes.",
    ),
    cfg.FloatOpt(
        "backend_setup_retry_max_interval",
        default=60.0,
        min=0.1,
        max=86400.0,
        mutable=True,
        help="Longest wait between two set-up tries of a failed backend.",
    ),
    cfg.FloatOpt(
        "outage_retry_max_interval",
        default=30.0,
        min=0.1,
        max=3600.0,
        help="Longest wait between two tries of the request loop or a periodic "
        "task while the database or the coordination backend is unreachable "
        "(the wait starts at the loop's own interval and doubles).",
    ),
]

database_opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help="SQLAlchemy URL of the database. Default: SQLite file "
        "'$state_path/sharemgr.sqlite'. Use postgresql+psycopg2:// or "
        "mysql+pymysql:// for many machines.",
    ),
    cfg.IntOpt(
        "connect_timeout",
        default=10,
        min=1,
        max=600,
        help="Seconds to wait for the database to answer when connecting.",
    ),
    cfg.IntOpt(
        "max_pool_size",
        default=10,
        min=1,
        max=1000,
        help="Connections kept in the pool (PostgreSQL and MariaDB).",
    ),
    cfg.IntOpt(
        "max_overflow",
        min=0,
        max=10000,
        help="Connections opened beyond max_pool_size when all are busy, "
        "closed when returned (PostgreSQL and MariaDB). Default: twice "
        "max_pool_size.",
    ),
    cfg.IntOpt(
        "pool_timeout",
        default=30,
        min=1,
        max=3600,
        help="Seconds a database call waits for a connection of the pool "
        "before it fails (PostgreSQL and MariaDB).",
    ),
    cfg.IntOpt(
        "connection_recycle_time",
        default=3600,
        min=-1,
        help="Seconds after which a pooled connection is replaced before its "
        "next use (below the server's or a proxy's idle timeout, e.g. "
        "MariaDB's wait_timeout); -1: never (PostgreSQL and MariaDB).",
    ),
    cfg.IntOpt(
        "max_retries",
        default=0,
        min=-1,
        help="How many more times share-manager tries to connect when the "
        "database does not answer at start, retry_interval apart; -1: until "
        "it answers; 0: it stops at once with one line (a supervisor such as "
        "systemd restarts it).",
    ),
    cfg.IntOpt(
        "retry_interval",
        default=10,
        min=1,
        max=3600,
        help="Seconds between the connection tries at start (max_retries).",
    ),
    cfg.IntOpt(
        "db_max_retries",
        default=20,
        min=-1,
        help="How many times a transaction the database ended for a deadlock, "
        "a serialization failure or a lock wait timeout is run again; -1: "
        "without end.",
    ),
    cfg.FloatOpt(
        "db_retry_interval",
        default=1.0,
        min=0.01,
        max=60.0,
        help="Seconds (at most, with jitter) before a lost transaction runs again.",
    ),
    cfg.BoolOpt(
        "db_inc_retry_interval",
        default=True,
        help="Whether the wait doubles at each retry, up to db_max_retry_interval.",
    ),
    cfg.FloatOpt(
        "db_max_retry_interval",
        default=10.0,
        min=0.01,
        max=600.0,
        help="The longest wait between the retries of a lost transaction.",
    ),
]

coordination_opts = [
    cfg.StrOpt(
        "backend_url",
        secret=True,
        help="tooz coordination URL for locks and engine membership. Default: "
        "'file://$state_path/coordination'. Use redis://HOST:PORT for many "
        "machines. The file backend needs '?timeout=N' for dead members to expire; "
        "sharemgr adds it from 'membership_timeout' when absent.",
    ),
    cfg.IntOpt(
        "membership_timeout",
        default=10,
        min=2,
        max=600,
        help="Seconds without heartbeat after which an engine counts as dead.",
    ),
]

manager_opts = [
    cfg.IntOpt(
        "request_workers",
        default=8,
        min=1,
        max=256,
        help="Threads that carry out claimed requests: each backend has this many "
        "of its own (unless its group sets request_workers), and this engine's "
        "requests without a backend have this many more.",
    ),
    cfg.FloatOpt(
        "request_poll_interval",
        default=0.2,
        min=0.01,
        max=60.0,
        help="Seconds between looks for pending requests right after work; "
        "idle, the look slows down (doubling) to request_poll_max_interval.",
    ),
    cfg.FloatOpt(
        "request_poll_max_interval",
        default=5.0,
        min=0.01,
        max=600.0,
        help="Longest wait between looks for pending requests when idle. On "
        "SQLite and PostgreSQL a new request wakes the engines at once (a "
        "file beside the database; LISTEN/NOTIFY); on MariaDB this bounds how "
        "long an idle engine takes to start one.",
    ),
    cfg.IntOpt(
        "message_ttl",
        default=2592000,
        min=1,
        help="Seconds a user message (sharectl message list: a request that failed "
        "or was abandoned) is kept; 30 days by default, as Manila's.",
    ),
    cfg.IntOpt(
        "message_reap_interval",
        default=86400,
        min=1,
        help="Seconds between deletions of expired user messages (expired ones are "
        "never listed meanwhile).",
    ),
    cfg.IntOpt(
        "backup_continue_interval",
        default=2,
        min=1,
        max=3600,
        help="Seconds between create_backup_continue/restore_backup_continue runs.",
    ),
    cfg.FloatOpt(
        "backend_stats_interval",
        default=60.0,
        min=0.1,
        max=86400.0,
        help="Seconds between refreshes of each backend's get_share_stats() report "
        "(capabilities and pools) into the database; the first is right after the "
        "backend's set-up. Intake refuses what the last report rules out.",
    ),
]

reconcile_opts = [
    cfg.BoolOpt(
        "startup_reconciliation_enabled",
        default=True,
        help="After start (once ensure-resources is done) settle every resource of "
        "this host that a crash left in a transient status; also what a dead peer "
        "engine of this host left. False: no automatic pass ('sharectl reconcile "
        "run' still works).",
    ),
    cfg.IntOpt(
        "startup_reconciliation_wait_seconds",
        default=10,
        min=0,
        max=86400,
        help="Seconds to wait after ensure-resources before the startup "
        "reconciliation pass begins.",
    ),
    cfg.IntOpt(
        "reconciliation_workers",
        default=4,
        min=1,
        max=64,
        help="Resources of one stage reconciled in parallel.",
    ),
    cfg.IntOpt(
        "operation_lease_seconds",
        default=3600,
        min=0,
        max=604800,
        help="Seconds a driver call of an operation may run before the operation "
        "counts as stuck (its lease expires) although its engine is alive; the "
        "periodic reconciliation pass then settles its resource. 0: no lease, an "
        "operation of a live engine is never stuck.",
    ),
    cfg.Opt(
        "operation_lease_seconds_by_method",
        type=types.Dict(value_type=types.Float(min=0)),
        default={},
        help="Per driver method lease seconds overriding operation_lease_seconds, "
        "as 'method:seconds,...', e.g. 'create_share:600,extend_share:1800' "
        "(0: no lease for that method).",
    ),
    cfg.IntOpt(
        "operation_heartbeat_seconds",
        default=60,
        min=0,
        max=86400,
        help="While a driver call runs, its engine renews the operation's lease "
        "this many seconds ahead (every third of it), never past the call's "
        "deadline (operation_lease_seconds): an operation whose engine no longer "
        "runs its call (a lost thread) is stuck after this long. 0: no renewal, "
        "the lease is the deadline alone.",
    ),
    cfg.IntOpt(
        "periodic_reconciliation_interval",
        default=60,
        min=0,
        max=86400,
        help="Seconds between looks for operations of this host whose lease has "
        "expired (one indexed query); when some are found a reconciliation pass "
        "(trigger 'periodic') settles them. 0: off.",
    ),
    cfg.IntOpt(
        "drift_check_interval",
        default=0,
        min=0,
        max=604800,
        help="Seconds between drift checks: each backend is asked about this "
        "host's available shares (the batch status method where the driver has "
        "one) and for objects no share claims (list_shares), and what disagrees "
        "is recorded and handled by drift_policy. 0 (the default): only on "
        "demand ('sharectl reconcile drift').",
    ),
    cfg.Opt(
        "drift_policy",
        type=types.Dict(value_type=types.String(choices=("report", "error", "correct"))),
        default={},
        help="What a drift check does about each kind of drift, as "
        "'kind:policy,...'. Kinds: missing (report|error), size, "
        "export_locations (report|error|correct), orphan (report). report "
        "(the default of every kind): record and log it; error: also set the "
        "share instance to error; correct: write the backend's value into the "
        "database.",
    ),
    cfg.IntOpt(
        "peer_reconciliation_grace_seconds",
        default=5,
        min=0,
        max=3600,
        help="Seconds after a peer engine of this host leaves the membership "
        "group before this engine reconciles what it left.",
    ),
]

stack_opts = [
    cfg.IntOpt(
        "stack_timeout_minutes",
        default=60,
        min=0,
        max=525600,
        help="Timeout of a stack traversal (create, update, delete, rollback) when "
        "neither 'sharectl stack create/update --timeout' nor the template's "
        "'timeout' gives one, as Heat's stack_action_timeout. On expiry the "
        "traversal fails ('timed out') and rolls back unless the stack disables "
        "rollback. 0: no timeout.",
    ),
    cfg.FloatOpt(
        "stack_watchdog_interval",
        default=5.0,
        min=0.5,
        max=3600,
        help="Seconds between the stack watchdog's runs: it fails traversals past "
        "their timeout and retriggers graph nodes that are ready but have no live "
        "check request (a crash, a dead engine's lock).",
    ),
]

health_opts = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="Serve /healthcheck and /metrics (Prometheus) over HTTP from "
        "share-manager. Off by default: the endpoint has no authentication.",
    ),
    cfg.HostAddressOpt(
        "bind_host",
        default="127.0.0.1",
        help="Address the health endpoint listens on. Loopback by default; "
        "expose it only to a network the monitoring system is on.",
    ),
    cfg.PortOpt(
        "port",
        default=8786,
        help="TCP port of the health endpoint. 0: any free port (the daemon "
        "logs the one it got).",
    ),
    cfg.FloatOpt(
        "check_timeout",
        default=2.0,
        min=0.1,
        max=60.0,
        help="Seconds /healthcheck waits for the database and the coordination "
        "backend to answer before it reports them failed.",
    ),
    cfg.StrOpt(
        "disable_by_file",
        help="While this file exists the engine is drained: /readiness answers 503 "
        "(a load balancer or an orchestrator sends it nothing new) and "
        "/healthcheck still answers for the process.",
    ),
]

GROUPS: dict[str | None, list[cfg.Opt]] = {
    None: default_opts + manager_opts + reconcile_opts + stack_opts,
    "database": database_opts,
    "coordination": coordination_opts,
    "health": health_opts,
}


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


def validate_group(conf: cfg.ConfigOpts, group: str) -> None:
    """Read every option of one group (e.g. a backend group after a driver
    registered its options) so a bad value fails now."""
    attr = conf[group]
    for opt_name in list(attr):
        try:
            getattr(attr, opt_name)
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise _bad_value(conf, group, opt_name, exc)


def _read_all(conf: cfg.ConfigOpts) -> None:
    """Read every registered option so that a bad value fails now, not later."""
    for name in list(conf):
        try:
            value = conf[name]
        except (cfg.ConfigFileValueError, ValueError) as exc:
            raise _bad_value(conf, "DEFAULT", name, exc)
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            validate_group(conf, name)


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every registered option (e.g. after a reload); raises
    ConfigError with one line for the first bad value."""
    _read_all(conf)


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
    to judge. Call it once every driver has registered its options."""
    out = []
    for path in conf.config_file or []:
        parser = _Assignments()
        try:
            with open(path) as f:
                parser.parse(f)
        except (OSError, iniparser.ParseError):
            continue  # load() already refused a file it could not parse
        for section, name, line in parser.found:
            if section != "DEFAULT" and section not in conf:
                continue
            known = set(conf if section == "DEFAULT" else conf[section])
            if name.replace("-", "_") not in known and name not in _deprecated_names(section):
                out.append(f"{path}:{line}: [{section}] {name}")
    return out
