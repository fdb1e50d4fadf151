"""The static options of sharemgr, by group (oslo.config): what
``manager/config.py`` registers and ``oslo-config-generator`` lists. A
backend's own options are in ``drivers/options.py``."""

from __future__ import annotations

import socket

from oslo_config import cfg, types
from sharemgr.drivers import options as driver_options

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
        "idle_transaction_timeout",
        default=10,
        min=0,
        max=3600,
        help="Seconds a share-manager transaction may wait on its engine between "
        "two statements before the database server ends it and releases its row "
        "locks (PostgreSQL's idle_in_transaction_session_timeout, MariaDB's "
        "idle_transaction_timeout). An engine paused or cut off inside a "
        "transaction then no longer holds up its peers, which count it as dead "
        "after [coordination] membership_timeout: keep this at or below that. "
        "0: never (the server's own setting).",
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
        "'file://$state_path/coordination'. Use redis://HOST:PORT or "
        "etcd3+http://HOST:PORT (an etcd gateway in front of the cluster's members) "
        "for many machines. The file backend needs '?timeout=N' for dead members to "
        "expire; sharemgr adds it from 'membership_timeout' when absent, and "
        "membership_timeout and lock_timeout on Redis and etcd (and timeout, each "
        "call's, on etcd).",
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
        "workers",
        default=1,
        min=1,
        max=64,
        help="Engine processes of this share-manager (a parent that starts, "
        "restarts and signals them, as Heat's num_engine_workers): each a full "
        "engine with its own membership, leases and request lanes. More than one "
        "helps on PostgreSQL or MariaDB when one engine keeps a core busy; on "
        "SQLite a second writer only waits. The health endpoint of engine "
        "process N (from 0) listens on [health] port + N. Read at start only.",
    ),
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
    cfg.IntOpt(
        "migration_continue_interval",
        default=2,
        min=1,
        max=3600,
        help="Seconds between runs of the periodic task that drives the share "
             "migrations of each backend on (migration_continue) and settles one "
             "a crash cut short (doc/migration.rst).",
    ),
    cfg.IntOpt(
        "migration_copy_bwlimit",
        default=0,
        min=0,
        help="KiB per second a host-assisted migration's copy may read and write "
             "(rsync's --bwlimit), so that moving a share does not starve the "
             "backends' clients; 0: no bound (doc/migration.rst).",
    ),
    cfg.IntOpt(
        "clone_poll_interval",
        default=5,
        min=1,
        max=3600,
        help="Seconds between runs of the status poll of shares whose create from a "
        "snapshot goes on in the backend (creating_from_snapshot after the driver's call "
        "returned): each is asked with get_share_status until it is available or failed.",
    ),
    cfg.IntOpt(
        "replica_state_update_interval",
        default=300,
        min=1,
        help="Seconds between update_replica_state calls for each secondary replica "
        "this engine serves (Manila's option); 'sharectl replica resync' asks at once.",
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
        "engine of this host left. False: no automatic pass, neither these nor the "
        "periodic one ('sharectl reconcile run' still works).",
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
    driver_options.method_seconds(
        "operation_lease_seconds_by_method",
        "Per driver method lease seconds overriding operation_lease_seconds, "
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
        "(trigger 'periodic') settles them. 0: off; off too with "
        "startup_reconciliation_enabled = False.",
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
        type=types.Dict(value_type=types.String(
            choices=("report", "error", "correct", "repair"))),
        default={},
        help="What a drift check does about each kind of drift, as "
        "'kind:policy,...'. Kinds: missing (report|error), size, "
        "export_locations (report|error|correct), not_served (repair|report|error), "
        "orphan (report); the first is each kind's default. report: record and "
        "log it; error: also set the share instance to error; correct: write the "
        "backend's value into the database; repair: apply the share (its export "
        "and access rules) to the backend again, with a user message.",
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
    ),    cfg.IntOpt(
        "max_events_per_stack",
        default=1000,
        min=0,
        help="Events kept per stack ('sharectl stack event list'), as Heat's "
        "option of that name: the oldest beyond it are deleted when the stack's "
        "traversal (or check) ends, so a traversal under way may briefly add more. "
        "0: keep them all.",
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
