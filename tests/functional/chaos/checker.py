"""The invariants, checked at once on a settled deployment."""

from __future__ import annotations

import collections
import datetime
import traceback
from typing import Any

from sharemgr.common import vocab
from sharemgr.convergence.template import template_from_dict

from tests.functional.chaos.fleet import EngineRecord
from tests.functional.chaos.operations import StackModel
from tests.functional.chaos.options import (
    CREATE_METHODS,
    DELETE_METHODS,
    READ_METHODS,
    STACK_MADE,
    kept_resource,
    parse_time,
)
from tests.functional.chaos.reader import Reader, backend_now, made_but_error, transient_resources
from tests.functional.harness import Deployment, backend_objects, db_objects


class Checker:
    """Every invariant, checked on a settled deployment. ``records``: the
    engines that ran (how and when each ended); ``stacks``: the stacks whose
    create was accepted, with their accepted actions."""

    def __init__(self, d: Deployment, reader: Reader, records: list[EngineRecord],
                 stacks: dict[str, StackModel]) -> None:
        self.d = d
        self.reader = reader
        self.records = records
        self.stacks = stacks
        self.violations: list[str] = []
        self.notes: list[str] = []
        self.seen_during_chaos: dict[str, str] = {}
        # Seconds an engine's clock may be off (a clock fault): the backend's
        # call log has each call's time by its engine's clock.
        self.clock_skew = 0.0
        self._calls: list[dict] | None = None
        self.diagnostics: dict[str, Any] = {}
        self.world = reader.world()
        self.shares = self.world["shares"]
        self.snapshots = self.world["snapshots"]
        self.instances = {i["id"]: i for i in self.world["instances"]}

    def bad(self, text: str) -> None:
        self.violations.append(text)

    def run_all(self) -> None:
        for check in (self.check_transient, self.check_stacks, self.check_orphans,
                      self.check_backend, self.check_sizes, self.check_made_but_error,
                      self.check_calls, self.check_overlaps,
                      self.check_requests, self.check_logs):
            try:
                check()
            except Exception:
                self.bad(f"check {check.__name__} raised:\n{traceback.format_exc()}")

    # -- resources

    def check_transient(self) -> None:
        for kind, row in transient_resources(self.world):
            extra = ""
            if kind == "share instance":
                share = self.shares.get(row["share_id"])
                extra = f" (share {row['share_id']} {share and share['name']}" + (
                    f", replica {row['replica_state']})" if row["replica_state"] else ")")
            reqs = self.reader.requests(resource_id=row["id"])
            brief = [(r["id"], r["action"], r["status"], r["engine_id"]) for r in reqs]
            self.bad(f"transient: {kind} {row['id']}{extra} stuck in {row['status']!r}; its "
                     f"requests: {brief}")
            self.diagnostics.setdefault("transient", []).append({"kind": kind, **row,
                                                                 "requests": reqs})
        for sid, share in self.shares.items():
            if share["instance_id"] is None:
                self.bad(f"share {sid} ({share['name']}) is live but has no live instance")
        for sid, snap in self.snapshots.items():
            if snap["instance_id"] is None:
                self.bad(f"snapshot {sid} ({snap['name']}) is live but has no live instance")

    # -- stacks

    def check_stacks(self) -> None:
        rows_by_stack = collections.defaultdict(list)
        for r in self.world["rows"]:
            rows_by_stack[r["stack_id"]].append(r)
        by_name: dict[str, list[dict]] = collections.defaultdict(list)
        for st in self.world["stacks"]:
            by_name[st["name"]].append(st)
        finals: collections.Counter[str] = collections.Counter()
        for name in sorted(set(self.stacks) | set(by_name)):
            model = self.stacks.get(name) or StackModel(name)
            versions = by_name.get(name, [])
            if not versions:
                self.bad(f"stack {name}: its create was accepted but there is no stack row")
                continue
            st = versions[-1]
            rows = rows_by_stack[st["id"]]
            state = f"{st['action']} {st['status']}" + (" (deleted)" if st["deleted_at"] else "")
            finals[state] += 1
            if st["status"] == "IN_PROGRESS":
                self.bad(f"stack {name}: stuck {st['action']} IN_PROGRESS "
                         f"(reason {st['status_reason']!r}); rows: {self.rows_text(rows)}")
                self.diagnose_stack(st, rows)
                continue
            if st["status"] not in ("COMPLETE", "FAILED"):
                self.bad(f"stack {name}: status {st['status']!r}")
            if st["status"] == "FAILED" and not (st["status_reason"] or "").strip():
                self.bad(f"stack {name}: {st['action']} FAILED without a status_reason")
            self.check_last_action(name, model, st)
            if st["deleted_at"] is not None:
                if rows:
                    self.bad(f"stack {name}: deleted but still has rows {self.rows_text(rows)}")
                continue
            for r in rows:
                if r["status"] == "IN_PROGRESS":
                    self.bad(f"stack {name} ({state}): row {r['name']} #{r['id']} left "
                             f"{r['action']} IN_PROGRESS (lock {r['engine_id']}, physical "
                             f"{self.physical_status(r) if r['physical_id'] else 'none'})")
                if r["action"] in ("CREATE", "UPDATE") and r["status"] == "COMPLETE" and \
                        r["physical_id"] and not self.physical_exists(r):
                    self.bad(f"stack {name} ({state}): row {r['name']} #{r['id']} is "
                             f"{r['action']} COMPLETE but its {r['type']} {r['physical_id']} "
                             "is gone")
            if st["status"] == "COMPLETE":
                self.check_complete(name, st, rows)
        self.final_states = dict(finals)

    def check_last_action(self, name: str, model: StackModel, st: dict) -> None:
        if not model.accepted:
            return
        action, template, _ = model.accepted[-1]
        got = (st["action"], st["status"])
        if action == "DELETE":
            ok = st["action"] == "DELETE" and (st["status"] == "FAILED" or
                                               st["deleted_at"] is not None)
        elif action == "ROLLBACK":
            ok = st["action"] == "ROLLBACK"
        elif action == "CANCEL":  # rolled back, or left FAILED (--no-rollback)
            ok = st["action"] == "ROLLBACK" or st["status"] == "FAILED"
        else:
            ok = st["action"] in (action, "ROLLBACK")
        if not ok:
            self.bad(f"stack {name}: the last accepted action was {action} but the stack "
                     f"ended {got[0]} {got[1]}" + (" (deleted)" if st["deleted_at"] else ""))
            return
        if action in ("CREATE", "UPDATE") and got == (action, "COMPLETE"):
            assert template is not None  # a create or update is sent with its template
            stored = self.reader.template(st["template_id"]) or {}
            want = {n: r["type"] for n, r in template["resources"].items()}
            have = {n: r.get("type") for n, r in (stored.get("resources") or {}).items()}
            if want != have:
                self.bad(f"stack {name}: {action} COMPLETE with template {have} but the "
                         f"accepted template was {want}")

    def check_complete(self, name: str, st: dict, rows: list[dict]) -> None:
        template = self.reader.template(st["template_id"])
        if template is None:
            self.bad(f"stack {name}: COMPLETE but its template #{st['template_id']} is gone")
            return
        # Groups expanded into their members: the rows are the members'.
        resources = {n: {"type": d.type, "properties": dict(d.properties)}
                     for n, d in template_from_dict(template).resources.items()}
        names = collections.Counter(r["name"] for r in rows)
        if set(names) != set(resources) or any(n > 1 for n in names.values()):
            self.bad(f"stack {name} ({st['action']} COMPLETE): rows {dict(names)} but the "
                     f"template has {sorted(resources)}; rows: {self.rows_text(rows)}")
        by_name = {r["name"]: r for r in rows}
        for res_name, res in resources.items():
            row = by_name.get(res_name)
            if row is None:
                continue
            where = f"stack {name} ({st['action']} COMPLETE) resource {res_name} #{row['id']}"
            if row["status"] != "COMPLETE" or row["action"] in ("INIT", "DELETE"):
                self.bad(f"{where}: row is {row['action']} {row['status']} "
                         f"({row['status_reason']!r})")
            if row["type"] != res["type"]:
                self.bad(f"{where}: row type {row['type']} but template type {res['type']}")
                continue
            self.check_physical(where, name, res_name, res, row, by_name)

    def check_physical(self, where: str, stack: str, res_name: str, res: dict, row: dict,
                       by_name: dict[str, dict]) -> None:
        props = res.get("properties") or {}
        pid = row["physical_id"]

        def ref(key: str) -> str | None:
            value = props.get(key)
            if isinstance(value, dict) and "get_resource" in value:
                target = by_name.get(value["get_resource"])
                return target["physical_id"] if target else None
            return value if isinstance(value, str) else None

        def named(actual: str | None) -> None:
            prefix = f"{stack}-{res_name}-"
            wanted = prefix + props["name"] if props.get("name") else None
            if not (actual or "").startswith(prefix) or (wanted and actual != wanted):
                self.bad(f"{where}: physical name {actual!r}, expected "
                         f"{wanted or prefix + '<suffix>'!r}")

        if res["type"] == "share":
            share = self.shares.get(pid)
            if share is None:
                self.bad(f"{where}: share {pid} does not exist")
                return
            if share["status"] != vocab.AVAILABLE:
                self.bad(f"{where}: share {pid} is {share['status']}")
            if share["size"] != props.get("size"):
                self.bad(f"{where}: share {pid} is {share['size']} GiB, template says "
                         f"{props.get('size')}")
            if (share["share_proto"] or "").upper() != str(props.get("proto")).upper():
                self.bad(f"{where}: share {pid} is {share['share_proto']}, template says "
                         f"{props.get('proto')}")
            if props.get("snapshot") and share["snapshot_id"] != ref("snapshot"):
                self.bad(f"{where}: share {pid} was made from snapshot {share['snapshot_id']}, "
                         f"the template's snapshot is {ref('snapshot')}")
            named(share["name"])
        elif res["type"] == "snapshot":
            snap = self.snapshots.get(pid)
            if snap is None:
                self.bad(f"{where}: snapshot {pid} does not exist")
                return
            if snap["status"] != vocab.AVAILABLE:
                self.bad(f"{where}: snapshot {pid} is {snap['status']}")
            if snap["share_id"] != ref("share"):
                self.bad(f"{where}: snapshot {pid} is of share {snap['share_id']}, the "
                         f"template's share is {ref('share')}")
            named(snap["name"])
        elif res["type"] == "replica":
            inst = self.instances.get(pid)
            if inst is None:
                self.bad(f"{where}: replica {pid} does not exist")
                return
            if inst["status"] != vocab.AVAILABLE or inst["replica_state"] in (None,
                                                                              vocab.REPLICA_ACTIVE):
                self.bad(f"{where}: replica {pid} is {inst['status']} "
                         f"(replica_state {inst['replica_state']})")
            if inst["share_id"] != ref("share"):
                self.bad(f"{where}: replica {pid} is of share {inst['share_id']}, the "
                         f"template's share is {ref('share')}")

    def physical_exists(self, row: dict) -> bool:
        pid = row["physical_id"]
        if row["type"] == "share":
            return pid in self.shares
        if row["type"] == "snapshot":
            return pid in self.snapshots
        if row["type"] == "replica":
            return pid in self.instances
        return True

    def rows_text(self, rows: list[dict]) -> str:
        return "; ".join(
            f"{r['name']}#{r['id']} {r['type']} {r['action']} {r['status']}"
            + (f" phys {self.physical_status(r)}" if r["physical_id"] else "")
            + (f" lock {r['engine_id']}" if r["engine_id"] else "")
            + (f" replaces #{r['replaces']}" if r["replaces"] else "")
            + (f" replaced_by #{r['replaced_by']}" if r["replaced_by"] else "")
            + (f" ({r['status_reason'][:120]})" if r["status_reason"] else "")
            for r in rows) or "none"

    def physical_status(self, row: dict) -> str:
        pid = row["physical_id"]
        if row["type"] == "share":
            s = self.shares.get(pid)
            return f"{pid[:8]}:{s['status']}" if s else f"{pid[:8]}:gone"
        if row["type"] == "snapshot":
            s = self.snapshots.get(pid)
            return f"{pid[:8]}:{s['status']}" if s else f"{pid[:8]}:gone"
        if row["type"] == "replica":
            i = self.instances.get(pid)
            return f"{pid[:8]}:{i['status']}" if i else f"{pid[:8]}:gone"
        return pid[:8]

    def diagnose_stack(self, st: dict, rows: list[dict]) -> None:
        checks = [r for r in self.reader.requests(resource_type="stack_resource")
                  if (r["args"] or {}).get("stack_id") == st["id"]]
        current = [r for r in checks if (r["args"] or {}).get("traversal") ==
                   st["current_traversal"]]
        ops = [r for row in rows if row["physical_id"] for r in self.op_requests(row)]
        self.diagnostics.setdefault("stuck_stacks", []).append({
            "stack": st, "rows": rows,
            "current_traversal_checks": current,
            "all_checks_tail": checks[-30:],
            "sync_points": self.reader.sync_points(st["id"]),
            "physical_requests": ops,
        })

    def op_requests(self, row: dict) -> list[dict]:
        pid = row["physical_id"]
        ids = {pid}
        if row["type"] == "share" and pid in self.shares:
            ids.add(self.shares[pid]["instance_id"])
        if row["type"] == "snapshot" and pid in self.snapshots:
            ids.add(self.snapshots[pid]["instance_id"])
        return self.reader.requests(resource_id=[i for i in ids if i])

    # -- stack-made objects nobody owns

    def check_orphans(self) -> None:
        stacks = {}
        for st in self.world["stacks"]:
            stacks[st["name"]] = st  # the newest of a name wins (created_at order)
        owned = collections.defaultdict(set)
        for r in self.world["rows"]:
            if r["physical_id"]:
                owned[r["stack_id"]].add(r["physical_id"])

        def owner_ok(name: str | None, pid: str, what: str) -> None:
            m = STACK_MADE.match(name or "")
            if not m:
                return
            st = stacks.get(m.group(1))
            if kept_resource(name) and self.status_of(what, pid) == vocab.AVAILABLE:
                return  # deletion_policy retain: kept outside the stack (templates.py)
            if st is None:
                self.bad(f"orphan: {what} {pid} ({name}) of unknown stack {m.group(1)}")
            elif st["deleted_at"] is not None:
                self.bad(f"orphan: {what} {pid} ({name}, status "
                         f"{self.status_of(what, pid)}) outlived its stack {st['name']} "
                         "(DELETE COMPLETE)")
            elif pid not in owned[st["id"]]:
                self.bad(f"orphan: {what} {pid} ({name}, status {self.status_of(what, pid)}) "
                         f"belongs to no row of stack {st['name']} ({st['action']} "
                         f"{st['status']})")
                self.diagnostics.setdefault("orphans", []).append({
                    "what": what, "id": pid, "name": name, "stack": st["name"],
                    "requests": self.reader.requests(resource_id=[pid, *self.instance_ids(
                        what, pid)])})

        for sid, share in self.shares.items():
            owner_ok(share["name"], sid, "share")
        for sid, snap in self.snapshots.items():
            owner_ok(snap["name"], sid, "snapshot")
        for inst in self.world["instances"]:
            if inst["replica_state"] in (None, vocab.REPLICA_ACTIVE):
                continue
            share = self.shares.get(inst["share_id"])
            if share is not None:
                owner_ok(share["name"], inst["id"], "replica")

    def status_of(self, what: str, pid: str) -> str | None:
        if what == "share":
            return self.shares[pid]["status"]
        if what == "snapshot":
            return self.snapshots[pid]["status"]
        return self.instances[pid]["status"]

    def instance_ids(self, what: str, pid: str) -> list[str]:
        if what == "share":
            return [self.shares[pid]["instance_id"] or ""]
        if what == "snapshot":
            return [self.snapshots[pid]["instance_id"] or ""]
        return []

    # -- the backend and the database

    def check_backend(self) -> None:
        everything = db_objects(self.d)
        settled = db_objects(self.d, settled_only=True)
        backend = backend_objects(self.d)
        names = {o["id"]: o for o in self.d.backend("list")}
        for be in self.d.backends:
            for kind, ident in sorted(settled[be] - backend[be]):
                self.bad(f"backend: {kind} {ident} ({self.db_name(kind, ident)}) is settled in "
                         f"the database but not on backend {be}")
            for kind, ident in sorted(backend[be] - everything[be]):
                obj = names.get(ident, {})
                self.bad(f"backend: {kind} {ident} ({obj.get('name')}) is on backend {be} "
                         "but not in the database (orphaned backend object)")
                self.diagnostics.setdefault("backend_orphans", []).append(
                    {"object": obj, "requests": self.reader.requests(resource_id=ident)})

    def check_sizes(self) -> None:
        """Settled shares and snapshots have the same size in the database and
        on the backend."""
        backend = {o["id"]: o for o in self.d.backend("list")}
        for share in self.shares.values():
            obj = backend.get(share["instance_id"])
            if share["status"] == vocab.AVAILABLE and obj and obj["size"] != share["size"]:
                self.bad(f"size: share {share['id']} ({share['name']}) is {share['size']} GiB "
                         f"in the database but {obj['size']} GiB on the backend")
        for snap in self.snapshots.values():
            obj = backend.get(snap["instance_id"])
            if snap["status"] == vocab.AVAILABLE and obj and obj["size"] != snap["size"]:
                self.bad(f"size: snapshot {snap['id']} ({snap['name']}) is {snap['size']} GiB "
                         f"in the database but {obj['size']} GiB on the backend")
                self.diagnostics.setdefault("sizes", []).append({
                    "snapshot": snap, "backend": obj,
                    "requests": self.reader.requests(resource_id=[
                        snap["instance_id"], self.share_instance_of(snap)])})

    def share_instance_of(self, snap: dict) -> str:
        for row in self.world["snapshot_instances"]:
            if row["id"] == snap["instance_id"]:
                return row["share_instance_id"]
        return ""

    def check_made_but_error(self) -> None:
        """Rows marked error while their driver call ran: seen now, or by the
        audit during the chaos (``seen_during_chaos``: a stack may have
        cleaned it up since)."""
        found = dict(self.seen_during_chaos)
        for ident, what in made_but_error(self.world, backend_now(self.d), self.reader):
            found.setdefault(ident, f"{what}, at the end")
        for ident, what in sorted(found.items()):
            self.bad(f"made-but-error: {what}: error in the database although the backend "
                     "made it (settled while its driver call ran?)")
            self.diagnostics.setdefault("made_but_error", []).append(
                {"id": ident, "what": what, "requests": self.reader.requests(resource_id=ident),
                 "calls": [c for c in self.calls() if c["resource_id"] == ident]})

    def calls(self) -> list[dict]:
        if self._calls is None:
            self._calls = self.d.backend("calls")
        return self._calls

    def db_name(self, kind: str, ident: str) -> str | None:
        if kind in ("share", "replica"):
            inst = self.instances.get(ident)
            share = self.shares.get(inst["share_id"]) if inst else None
            return share["name"] if share else None
        for snap in self.snapshots.values():
            if snap["instance_id"] == ident:
                return snap["name"]
        return None

    # -- no create or delete done twice

    def check_calls(self) -> None:
        # A call the backend refused as fenced changed nothing: not a double.
        calls = [c for c in self.calls() if not c.get("fenced")]
        deaths: dict[str, datetime.datetime] = {}
        interrupted: dict[str, list[tuple[datetime.datetime, datetime.datetime]]] = {}
        for rec in self.records:
            # Engines that died without finishing what they had started.
            if rec.engine_id and rec.how and rec.how != "sigterm":
                assert rec.died_at is not None  # reaped: its end is known
                deaths[rec.engine_id] = rec.died_at
            if rec.engine_id:
                interrupted[rec.engine_id] = rec.interrupted
        per: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
        for c in calls:
            if c["method"] in CREATE_METHODS:
                per[("create", c["resource_id"])].append(c)
            elif c["method"] in DELETE_METHODS:
                per[("delete", c["resource_id"])].append(c)
        doubles = 0
        for (kind, rid), cs in per.items():
            if len(cs) < 2:
                continue
            text = ", ".join(f"{c['method']} by {c['engine_id']} at {c['time']}" for c in cs)
            if kind == "create":
                self.bad(f"twice: {len(cs)} creates of {rid}: {text}")
                doubles += 1
                continue
            explained = 0
            # A take-over: the delete's request abandoned (its engine dead, or
            # its lease expired: paused, cut off) and the delete retried by
            # the reconciliation rules (doc/reconciliation.rst); or the earlier
            # call's engine frozen or cut off between the two calls (a
            # reconciliation pass, whose settling has no request, loses its
            # locks to a peer's pass as a dead engine's would).
            taken = [r["finished_at"].replace(tzinfo=datetime.UTC)
                     for r in self.reader.requests(resource_id=rid)
                     if r["status"] == "abandoned" and r["finished_at"]]
            for a, b in zip(cs, cs[1:], strict=False):
                died = deaths.get(a["engine_id"])
                slack = datetime.timedelta(seconds=0.5 + self.clock_skew)
                start, end = parse_time(a["time"]) - slack, parse_time(b["time"]) + slack
                if (died is not None and start <= died <= end) or \
                        any(start <= t <= end for t in taken) or \
                        any(s0 <= end and start <= s1
                            for s0, s1 in interrupted.get(a["engine_id"], ())):
                    explained += 1
            asked = len([r for r in self.reader.requests(resource_id=rid)
                         if r["action"] == "delete"])
            if len(cs) - explained > max(asked, 1):
                self.bad(f"twice: {len(cs)} deletes of {rid} with {asked} delete request(s) "
                         f"and {explained} retry(ies) after a crash: {text}")
                self._diagnose("twice", rid, cs)
                doubles += 1
        self.calls_total = len(self.calls())

    def check_overlaps(self) -> None:
        """No two state-changing calls the backend accepted on one object
        overlap (each from its log row to its committed change): the
        per-resource lock, and where it was lost (a paused engine) the
        fencing token, keep them apart. In the backend's own order of
        events (a call overlaps one logged before it finished), not by the
        times the engines wrote: their clocks may run ahead or behind."""
        per: dict[str, list[dict]] = collections.defaultdict(list)
        for c in self.calls():
            if c.get("finished") and not c.get("fenced") and c["resource_id"] and \
                    c["method"] not in READ_METHODS:
                per[c["resource_id"]].append(c)
        for rid, cs in per.items():
            cs.sort(key=lambda c: c["seq"])
            for a, b in zip(cs, cs[1:], strict=False):
                if b["seq"] <= a["finished_after"]:
                    self.bad(f"overlap: {a['method']} by {a['engine_id']} ({a['time']} to "
                             f"{a['finished']}) and {b['method']} by {b['engine_id']} "
                             f"(from {b['time']}) on {rid}")
                    self._diagnose("overlap", rid, [a, b])

    def _diagnose(self, kind: str, rid: str, calls: list[dict]) -> None:
        """What a run's report keeps of a double or an overlap: the calls
        (with their tokens) and every request about the object, or about
        the share it belongs to (a resize reaches its replicas)."""
        inst = self.instances.get(rid)
        about = {rid} | ({inst["share_id"], *(i["id"] for i in self.instances.values()
                                              if i["share_id"] == inst["share_id"])}
                         if inst else set())
        self.diagnostics.setdefault(kind, []).append({
            "id": rid, "calls": calls,
            "requests": [r for ident in sorted(about)
                         for r in self.reader.requests(resource_id=ident)]})

    # -- requests and logs: notes, not invariants

    def check_requests(self) -> None:
        counts = self.world["requests"]
        if counts.get("pending"):
            pending = self.reader.requests(status="pending")
            brief = [(r["id"], r["resource_type"], r["action"], r["host"]) for r in pending]
            self.bad(f"requests: {len(pending)} still pending after settling: {brief[:10]}")
        self.request_counts = dict(counts)

    def check_logs(self) -> None:
        tracebacks = 0
        for rec in self.records:
            tracebacks += rec.engine.text().count("Traceback (most recent call last)")
        if tracebacks:
            self.notes.append(f"{tracebacks} traceback(s) in the engine logs")
