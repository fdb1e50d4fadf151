"""The watchdog: no traversal waits forever.

Every engine runs :meth:`Watchdog.run_once` periodically (after its startup
reconciliation pass has settled what a crash left). It looks at every stack
IN_PROGRESS and

* fails a traversal that outlived the stack's timeout (rolling back unless
  rollback is off: ``lifecycle.fail_if_timed_out``);
* marks check requests that will never finish ``abandoned``: running for an
  engine that is no longer a member of ``sharemgr-engines``, or for this
  engine while no check of its runs them (their outcome was lost);
* (in the run after a watched stack ended, and every TIDY_EVERY runs)
  ends the action of rows that a dead engine, or a cut check of this one
  (its lock leaked: ``Actor.cut``), left
  IN_PROGRESS on a stack whose traversal has ended since (FAILED): they are
  marked FAILED and unlocked, so they do not look busy until the next user
  action;
* finds *stalled* nodes — ready (every predecessor reported), not reported
  themselves, without a live request (pending, or running for a live
  engine) and not still reporting in a check of this engine (a wide
  fan-out's later batches) — and retriggers each with its SyncPoint's input
  data.

Whatever cut a traversal short — a crash at any point, a check that bailed
on a dead engine's lock, a superseded check that never got to retrigger, a
check request that failed — ends as a stalled node, so this one rule covers
them all; the faster paths (a check retriggering what it held) only save
time. A stalled node is left alone while waiting is right:

* its row (or the row's replacement) is locked by a live engine: that check
  retriggers the node when it is done (doc/specs.rst, spec 001). A lock this engine holds
  while none of its checks does (a lost release, or a check cut by a pause
  or a partition: ``Actor.cut``) is released here once its resource has
  settled;
* its physical resource is in a transient status: an operation is under way,
  or a dead engine's operation waits for reconciliation, which the watchdog
  asks that resource's host for (``sharectl reconcile run``'s request), at
  most every PASS_INTERVAL seconds: a pass skips a resource whose tooz lock
  a dead engine still holds (Redis keeps it until ``lock_timeout``).

A node whose checks failed MAX_CHECK_FAILURES times (unexpected errors the
check could not even record) fails its stack instead of being retried again.
A stack whose backend host never comes back waits for it until its timeout.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.convergence import lifecycle
from sharemgr.convergence import physical as phys
from sharemgr.convergence.graph import Node
from sharemgr.convergence.worker import Worker
from sharemgr.db import clock, models, resource_locks, stack_watch, stacks, sync_points
from sharemgr.db.engine import Database
from sharemgr.db.records import Record
from sharemgr.manager.coordination import Coordinator
from sharemgr.manager.outage import is_outage

LOG = logging.getLogger(__name__)

OWN_STALE_AFTER = 30.0  # a check of this engine not in flight this long after its claim is lost
PASS_INTERVAL = 10.0  # seconds between reconciliation passes asked of one host
MAX_CHECK_FAILURES = 3  # failed checks of one node before its stack fails
TIDY_EVERY = 12  # runs between looks for rows a dead engine left on ended traversals
SPACING = 20.0  # a periodic run's time, times this, before the next may start
# ... but no longer than this for a run that waited: a run slowed by a
# stalled database or a partition (seconds for one statement) must not put
# the next off for minutes. A run's own CPU time is spaced without the cap:
# that is the stack's size, not a wait (see ``run_safely``).
MAX_SPACING_SECONDS = 30.0

Key = tuple[str, str]  # (stack id, traversal id)


class Watchdog:
    def __init__(self, db: Database, coordinator: Coordinator, engine_id: str,
                 worker: Worker) -> None:
        self.db = db
        self.coordinator = coordinator
        self.engine_id = engine_id
        self.worker = worker
        self._armed = threading.Event()
        self._lock = threading.Lock()  # one run at a time per engine
        self._passes_asked: dict[str, float] = {}
        self._runs = 0
        self._active: set[str] = set()  # the stacks IN_PROGRESS at the last run
        self._next_run = 0.0  # monotonic time before which the periodic task skips (SPACING)

    def arm(self) -> None:
        """Start watching (after the startup reconciliation pass)."""
        self._armed.set()

    @property
    def armed(self) -> bool:
        return self._armed.is_set()

    def run_safely(self) -> None:
        """The periodic task: raises only an outage of the database or the
        coordination backend (the next run tries again). A run reads every
        open check request and every point of each traversal in progress,
        so its cost grows with the stacks: a run that took ``t`` seconds is
        followed by the next no sooner than ``SPACING * t`` seconds after it
        started (a small stack is watched at every period, as before), and
        within ``MAX_SPACING_SECONDS`` if the run mostly waited (a stalled
        database, a partition). A run's CPU time ``c`` (its thread's: the
        rows it decoded, the graph it walked) spaces the next by
        ``SPACING * c`` whatever the cap: the watchdog then takes at most
        1/SPACING of a core however large the stack (at 50,000 shares a run
        is seconds of CPU, and every 30 s that was a tenth of the engine)."""
        if not self.armed or time.monotonic() < self._next_run:
            return
        started, cpu = time.monotonic(), time.thread_time()
        try:
            self.run_once()
        except Exception as exc:
            if is_outage(exc):
                raise  # the periodic task backs off and logs the outage once
            LOG.exception("stack watchdog run failed")
        finally:
            waited = min(SPACING * (time.monotonic() - started), MAX_SPACING_SECONDS)
            self._next_run = started + max(waited, SPACING * (time.thread_time() - cpu))

    def run_once(self) -> dict[str, int]:
        """One look at every stack IN_PROGRESS; returns counts for the log and
        tests."""
        with self._lock:
            counts = collections.Counter(retriggered=0, waiting=0, abandoned=0,
                                         timed_out=0, failed_stacks=0, passes_requested=0,
                                         tidied=0)
            self._runs += 1
            # Requests first, then membership, then points: a check that ended
            # before the requests were read has reported in what is read after,
            # and an engine that joins in between is seen alive. Lost requests
            # are abandoned even when no stack is IN_PROGRESS any more.
            requests = stack_watch.live_checks(self.db)
            active = stack_watch.active_stacks(self.db)
            # A row a dead engine left is found once its stack's traversal
            # ended: look at once when one ended since the last run (a chaos
            # run's row waited 12 runs, past its settle bound), and every
            # TIDY_EVERY runs for an engine that died after its stack ended.
            ended = self._active - {s.id for s in active}
            self._active = {s.id for s in active}
            if ended or self._runs % TIDY_EVERY == 1:
                counts["tidied"] = sum(self.worker.tidy(row)
                                       for row in stack_watch.rows_left_in_progress(self.db))
            if not requests and not active:
                return dict(counts)
            alive = self.coordinator.engines()
            inflight = self.worker.inflight()
            # Read before the points, as the requests: a node still reporting
            # (its request done, if it had one) is live, not stalled.
            reporting = self.worker.reporting()
            lost = [r for r in requests if self._lost(r, alive, inflight)]
            if lost:
                counts["abandoned"], held = stack_watch.abandon_checks(
                    self.db, lost, "abandoned: its engine died or lost it; the stack "
                    "watchdog retriggers the node")
                # Still in a transaction of its engine: live until a later run.
                lost = [r for r in lost if r.id not in held]
            live: dict[Key, set[Node]] = collections.defaultdict(set)
            lost_ids = {r.id for r in lost}
            for req in requests:
                if req.id not in lost_ids:
                    args = req.args or {}
                    live[(str(args.get("stack_id")), str(args.get("traversal")))].add(
                        Node(int(args.get("resource_id", 0)), bool(args.get("is_update"))))
            for stack_id, traversal, node in reporting:
                live[(stack_id, traversal)].add(node)
            busy_hosts: set[str] = set()
            # Timeouts by the database's clock, which wrote the traversals' starts.
            now = clock.read(self.db) if active else None
            for stack in active:
                if lifecycle.fail_if_timed_out(self.db, stack, now):
                    counts["timed_out"] += 1
                    continue
                self._scan(stack, live[(stack.id, stack.current_traversal or "")], alive,
                           busy_hosts, counts)
            counts["passes_requested"] = self._request_passes(busy_hosts)
            if any(v for k, v in counts.items() if k != "waiting"):
                LOG.info("stack watchdog: %s", dict(counts))
            return dict(counts)

    def _lost(self, req: Record, alive: set[str], inflight: set[int]) -> bool:
        if req.status != vocab.REQUEST_RUNNING:
            return False
        if req.engine_id not in alive:
            return True
        if req.engine_id == self.engine_id and req.id not in inflight:
            claimed = req.claimed_at or models.utcnow()
            return models.utcnow() - claimed > datetime.timedelta(seconds=OWN_STALE_AFTER)
        return False

    def _scan(self, stack: models.Stack, live: set[Node], alive: set[str], busy_hosts: set[str],
              counts: collections.Counter[str]) -> None:
        traversal = stack.current_traversal or ""  # an IN_PROGRESS stack has one
        graph = self.worker.graph(stack.id, traversal)
        if graph is None:
            return
        points = sync_points.reports_for_traversal(self.db, stack.id, traversal)
        stalled = lifecycle.stalled_nodes(graph, points, stack.id, live)
        if not stalled:
            return
        rows = {r.id: r for r in stacks.resource_list(self.db, stack.id)}
        failures = self._failures(stack.id, traversal)
        for item in stalled:
            node = item.node
            errors = failures.get(node, [])
            if len(errors) >= MAX_CHECK_FAILURES:
                reason = (f"check of resource {node.resource_id} failed "
                          f"{len(errors)} times: {errors[0]}")
                if lifecycle.fail(self.db, stack.id, traversal, reason):
                    counts["failed_stacks"] += 1
                return
            why = self._wait_reason(rows.get(node.resource_id), rows, alive, busy_hosts)
            if why is not None:
                counts["waiting"] += 1
                LOG.debug("stack %s: node %s waits: %s", stack.name, node, why)
                continue
            if lifecycle.retrigger(self.db, stack.id, node.resource_id, only=[node]):
                counts["retriggered"] += 1
                LOG.info("stack %s: node %s of traversal %s was stalled; retriggered",
                         stack.name, node, traversal)

    def _failures(self, stack_id: str, traversal: str) -> dict[Node, list[str]]:
        out: dict[Node, list[str]] = collections.defaultdict(list)
        for req in stack_watch.failed_checks(self.db):
            args = req.args or {}
            if args.get("stack_id") == stack_id and args.get("traversal") == traversal:
                node = Node(int(args.get("resource_id", 0)), bool(args.get("is_update")))
                out[node].append(req.error or "unknown error")
        return out

    def _wait_reason(self, row: models.StackResource | None,
                     rows: dict[int, models.StackResource], alive: set[str],
                     busy_hosts: set[str]) -> str | None:
        """Why a stalled node must wait (see the module doc), or None."""
        if row is None:
            return None  # the check finds the row gone and ends
        held = [row] + ([rows[row.replaced_by]] if row.replaced_by in rows else [])
        for r in held:
            holder = r.engine_id
            leaked = holder == self.engine_id and not self.worker.holds(r.id)
            if holder is not None and holder in alive and not leaked:
                return f"resource {r.id} is locked by live engine {holder}"
            observed = phys.observe(self.db, r.type, r.physical_id)
            if observed.state == phys.BUSY:
                busy_hosts.add(observed.host or "")
                return (f"physical resource {r.physical_id} of resource {r.id} is "
                        f"{observed.status}")
            # Released only once its resource has settled: a check that
            # finds the row free does not find it busy. Only with the key
            # read: a check of this engine may have taken it over since.
            if leaked and resource_locks.resource_lock_release(self.db, r.id, self.engine_id,
                                                               key=r.atomic_key):
                LOG.warning("resource %s: released a lock this engine leaked", r.id)
        return None

    def _request_passes(self, hosts: set[str]) -> int:
        """Ask each host for a reconciliation pass, at most every
        PASS_INTERVAL seconds (see the module doc)."""
        now = time.monotonic()
        asked = 0
        for host in sorted({h.split("@", 1)[0] for h in hosts if h}):
            if now - self._passes_asked.get(host, -PASS_INTERVAL) < PASS_INTERVAL:
                continue
            self._passes_asked[host] = now
            if stack_watch.request_reconcile(self.db, host, "a stalled stack node waits for a "
                                    "resource in a transient status"):
                asked += 1
                LOG.info("asked host %s for a reconciliation pass: a stalled stack node "
                         "waits for a resource in a transient status", host)
        return asked
