"""The daemon's Prometheus metrics, defined once (prometheus_client).

They live in a registry of their own, not prometheus_client's default one:
a library the process imports (or a test) that registers its own metrics in
the default registry can never collide with these names, and the health
endpoint (daemon/health.py) exports exactly what is here plus the per-daemon
collectors it adds. The objects are module-level: several engines in one
process (the tests) add to the same process totals, as they would in one
process's /metrics.

Hot-path cost is one ``observe``/``inc`` (a lock and an addition); nothing
here reads the database. Facts that live in the database (requests pending
per host) are read at scrape time by :class:`QueueCollector`, one grouped
query per scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from oslo_log import log as logging
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LOG = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
# The process's own figures (CPU, memory, open files; Linux only) and the
# Python version, as the default registry would have them.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# Driver calls and requests take from milliseconds (the dummy) to minutes (a
# real backend's create or a reconciliation pass): the default buckets stop
# at 10 s.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
           120.0, 300.0, 600.0, float("inf"))

REQUEST_SECONDS = Histogram(
    "sharemgr_request_duration_seconds",
    "Time a claimed request ran on this engine, by resource type, action and "
    "outcome (done, failed, stale).",
    ["resource_type", "action", "outcome"], buckets=BUCKETS, registry=REGISTRY)

REQUESTS_RUNNING = Gauge(
    "sharemgr_requests_running",
    "Requests this engine is running now.", registry=REGISTRY)

ENGINE_MEMBER = Gauge(
    "sharemgr_engine_member",
    "1 while this engine is a member of the engines group, 0 while it is out "
    "(paused, cut off) and rejoining.",
    registry=REGISTRY,
)
DRIVER_CALL_SECONDS = Histogram(
    "sharemgr_driver_call_duration_seconds",
    "Time of each driver call (operations, status questions, reports), by "
    "backend, driver method and outcome (ok, error).",
    ["backend", "method", "outcome"], buckets=BUCKETS, registry=REGISTRY)

RECONCILE_OUTCOMES = Counter(
    "sharemgr_reconcile_outcomes_total",
    "Resources a reconciliation pass of this engine settled, by resource type "
    "and the status it wrote.",
    ["resource_type", "outcome"], registry=REGISTRY)

RECONCILE_PASS_SECONDS = Histogram(
    "sharemgr_reconcile_pass_duration_seconds",
    "Duration of this engine's reconciliation passes, by trigger (startup, "
    "peer, manual) and result (finished, failed, dry_run).",
    ["trigger", "result"], buckets=BUCKETS, registry=REGISTRY)

TRAVERSAL_SECONDS = Histogram(
    "sharemgr_stack_traversal_duration_seconds",
    "Stack traversals this engine ended, by action and status (COMPLETE, "
    "FAILED), with their duration from the traversal's start; the _count "
    "series counts them.",
    ["action", "status"], buckets=BUCKETS, registry=REGISTRY)

DRIFT_FINDINGS = Counter(
    "sharemgr_drift_findings_total",
    "What drift checks of this engine found the backend disagreeing on, by "
    "kind (missing, size, export_locations, orphan) and what was done "
    "(report, error, corrected; 'would ...' in a dry run).",
    ["kind", "action"], registry=REGISTRY)

SYNC_POINT_CAS_RETRIES = Counter(
    "sharemgr_sync_point_cas_retries_total",
    "SyncPoint compare-and-swap writes that lost to a concurrent writer and "
    "were retried (or gave up).", registry=REGISTRY)


def trigger_kind(trigger: str) -> str:
    """'manual:12' -> 'manual': a label must not take a new value per pass."""
    return trigger.split(":", 1)[0]


class QueueCollector(Collector):
    """Open requests per host and status, read at scrape time.

    ``count`` returns ``{(host, status): n}`` (db.api.request_counts): one
    grouped query, run only when /metrics is read, never per request. A
    request for any engine (no host) is shown with host "any". A failed read
    is logged and the metric left out of that scrape (an absent series, not
    a false zero).
    """

    def __init__(self, count: Callable[[], Mapping[tuple[str | None, str], int]],
                 statuses: tuple[str, ...],
                 hosts: Callable[[], Iterable[str]] = tuple) -> None:
        self._count = count
        self._statuses = statuses
        # Hosts shown even with nothing open (this engine's), so a zero is
        # a zero and not an absent series.
        self._hosts = hosts

    def describe(self) -> Iterator[Metric]:
        # Describing without collecting: registering must not query.
        yield GaugeMetricFamily("sharemgr_requests", "", labels=["host", "status"])

    def collect(self) -> Iterator[Metric]:
        try:
            counts = self._count()
        except Exception as exc:  # the database is down: the scrape still answers
            LOG.warning("metrics: could not count open requests: %s: %s",
                        type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc) else "",
                        exc_info=True)
            return
        family = GaugeMetricFamily(
            "sharemgr_requests",
            "Open requests per host and status (pending, running), from the "
            "database: the same on every engine.", labels=["host", "status"])
        hosts = sorted({host or "any" for host, _status in counts} | set(self._hosts()))
        for host in hosts:
            for status in self._statuses:
                n = counts.get((None if host == "any" else host, status), 0)
                family.add_metric([host, status], n)
        yield family


class BackendCollector(Collector):
    """``sharemgr_backend_up{backend}``: 1 while a backend of this engine
    serves, 0 while its set-up is failing or under way; read at scrape time
    from the daemon's own states (``states``: backend -> (up, detail))."""

    def __init__(self, states: Callable[[], Mapping[str, tuple[bool, str]]]) -> None:
        self._states = states

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("sharemgr_backend_up", "", labels=["backend"])

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "sharemgr_backend_up", "1 while the backend serves, 0 while its set-up "
            "fails or runs (this engine's).", labels=["backend"])
        for backend, (up, _detail) in sorted(self._states().items()):
            family.add_metric([backend], 1 if up else 0)
        yield family


_POOL_GAUGES = (
    ("sharemgr_pool_total_capacity_gb", "total_gb",
     "A pool's total capacity, as its backend last reported (database-wide)."),
    ("sharemgr_pool_free_capacity_gb", "free_gb",
     "A pool's free capacity, as its backend last reported (database-wide)."),
    ("sharemgr_pool_allocated_capacity_gb", "allocated_gb",
     "GiB of the shares and replicas placed in a pool now (database-wide)."),
    ("sharemgr_pool_room_gb", "room_gb",
     "GiB a new placement can still take in a pool: the report, the reserve, "
     "over-subscription and placements since counted (database-wide)."),
)


class PoolFigures(Protocol):
    """A pool as PoolCollector reads it (manager/capabilities.py's
    PoolState): its names, and its figures by the names of ``_POOL_GAUGES``."""

    @property
    def host(self) -> str: ...  # 'host@backend#pool'

    @property
    def backend(self) -> str: ...


class PoolCollector(Collector):
    """Each pool's capacity, read at scrape time (``states``: objects with
    ``host``, ``backend`` and the figures of ``_POOL_GAUGES``; a figure that
    is not a number, 'infinite' or no bound, is left out). A failed read is
    logged and the pools left out of that scrape."""

    def __init__(self, states: Callable[[], Iterable[PoolFigures]]) -> None:
        self._states = states

    def describe(self) -> Iterator[Metric]:
        for name, _attr, _help in _POOL_GAUGES:
            yield GaugeMetricFamily(name, "", labels=["pool", "backend"])

    def collect(self) -> Iterator[Metric]:
        try:
            states = list(self._states())
        except Exception as exc:  # the database is down: the scrape still answers
            LOG.warning("metrics: could not read pool capacity: %s: %s", type(exc).__name__,
                        str(exc).strip().splitlines()[0] if str(exc) else "")
            return
        for name, attr, help_text in _POOL_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["pool", "backend"])
            for state in states:
                value = getattr(state, attr)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    family.add_metric([state.host, state.backend], float(value))
            yield family


class Forward(Collector):
    """Every metric of another registry, so a per-daemon registry can export
    the shared one with its own collectors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()


def daemon_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry for one daemon's endpoint: the shared metrics, the build
    (``sharemgr_build_info{version}``) and its own collectors (e.g. the
    queue collector on its database)."""
    from sharemgr.common.version import version

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Forward(REGISTRY))
    Info("sharemgr_build", "The sharemgr release this engine runs.",
         registry=registry).info({"version": version()})
    for collector in collectors:
        registry.register(collector)
    return registry
