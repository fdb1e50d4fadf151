"""sharectl status: one screen of the deployment's state."""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING, NotRequired, TypedDict

from sharemgr.cli import base
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.db import models


# What the command shows (as JSON or YAML with -f json/yaml, as text else).


class EngineState(TypedDict):
    engine_id: str
    host: str
    alive: bool | None  # None: the coordination backend did not answer
    heartbeat_age_seconds: int | None


class EnginesSummary(TypedDict):
    alive: int | None
    running: int  # services rows not marked stopped, alive or not
    not_alive: int | None  # of those: killed, or cut off from coordination
    engines: list[EngineState]
    coordination_error: NotRequired[str]


class BackendReport(TypedDict):
    host: str
    stats_age_seconds: int | None
    engine_id: str | None


class LastPass(TypedDict):
    id: int
    trigger: str
    status: str
    started_at: object  # fmt()'s text of the time
    finished_at: object
    outcomes: dict[str, dict[str, int]]  # resource type -> status written -> count
    failures: int
    error: str | None


def _age(when: datetime.datetime | None, now: datetime.datetime) -> int | None:
    return None if when is None else max(int((now - when).total_seconds()), 0)


def _ago(seconds: int | None) -> str:
    return "never" if seconds is None else f"{seconds}s ago"


class Status(base.ShowOne):
    """Engines (alive/running), backends and their last stats report, the
    request queue per host, resources stuck in a transient status, and the
    last reconciliation pass of this host. Whether an engine is alive is its
    coordination membership; when the coordination backend cannot be
    reached, 'alive' is unknown and the rest is still shown."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--stuck-minutes", type=int, default=30, metavar="N",
            help="a resource counts as stuck after N minutes in a transient status "
            "(default 30)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import capabilities as db_capabilities
        from sharemgr.db import reconcile as db_rec
        from sharemgr.db import services as db_services
        from sharemgr.db import status as db_status

        if parsed_args.stuck_minutes < 0:
            raise base.UserError(f"--stuck-minutes must be 0 or more, not "
                                 f"{parsed_args.stuck_minutes}")
        ctx = self.app.context
        host = ctx.conf.host
        # Ages by the database's clock, which writes heartbeats and stats.
        running, now = db_services.service_list_at(ctx.db, include_stopped=False)
        alive, coord_error = self._alive()
        engines: list[EngineState] = [{"engine_id": r.engine_id, "host": r.host,
                    "alive": None if alive is None else r.engine_id in alive,
                    "heartbeat_age_seconds": _age(r.heartbeat_at, now)} for r in running]
        backends: list[BackendReport] = [
            {"host": r.host, "stats_age_seconds": _age(r.updated_at, now),
             "engine_id": r.engine_id} for r in db_capabilities.all_stats(ctx.db)]
        queue: dict[str, dict[str, int]] = {}
        for (qhost, status), n in sorted(db_status.request_counts(ctx.db).items(),
                                         key=lambda kv: (kv[0][0] or "", kv[0][1])):
            counts = queue.setdefault(qhost or "any", dict.fromkeys(vocab.REQUEST_OPEN, 0))
            counts[status] = n
        stuck = db_status.stuck_counts(
            ctx.db, datetime.timedelta(minutes=parsed_args.stuck_minutes), now)
        found = db_rec.passes(ctx.db, host, dry_run=False)
        last = self._pass(found[0]) if found else None

        structured = parsed_args.formatter in base.STRUCTURED_FORMATS
        n_alive = None if alive is None else sum(1 for e in engines if e["alive"])
        summary: EnginesSummary = {
            "alive": n_alive, "running": len(engines),
            "not_alive": None if n_alive is None else len(engines) - n_alive,
            "engines": engines}
        if coord_error:
            summary["coordination_error"] = coord_error
        columns = ("host", "engines", "backends", "queue", "stuck", "last_pass")
        if structured:
            return columns, (host, summary, backends, queue, stuck, last)
        return columns, (host, self._engines_text(summary), self._backends_text(backends),
                         "\n".join(f"{h}: pending {c['pending']}, running {c['running']}"
                                   for h, c in queue.items()) or "empty",
                         "\n".join(f"{t}: {n}" for t, n in sorted(stuck.items()))
                         or f"none (over {parsed_args.stuck_minutes} min)",
                         self._pass_text(last))

    def _alive(self) -> tuple[set[str] | None, str | None]:
        from sharemgr.manager.coordination import CoordinationUnavailable

        try:
            return self.app.context.coordinator.engines(), None
        except CoordinationUnavailable as exc:
            return None, str(exc)

    @staticmethod
    def _pass(p: models.ReconcilePass) -> LastPass:
        s = p.summary or {}
        return {"id": p.id, "trigger": p.trigger, "status": base.pass_status(p),
                "started_at": base.fmt(p.started_at), "finished_at": base.fmt(p.finished_at),
                "outcomes": s.get("outcomes", {}), "failures": s.get("failures", 0),
                "error": s.get("error")}

    @staticmethod
    def _engines_text(summary: EnginesSummary) -> str:
        alive, dead = summary["alive"], summary["not_alive"]
        if alive is None:
            lines = [f"? alive of {summary['running']} not stopped"]
        elif dead:  # "running" would count the dead: they did not stop, they died
            lines = [f"{alive} alive, {dead} not alive (killed or cut off, not stopped)"]
        else:
            lines = [f"{alive} alive of {summary['running']} running"]
        if summary.get("coordination_error"):
            lines.append(f"alive unknown: {summary['coordination_error']}")
        for e in summary["engines"]:
            state = {True: "alive", False: "NOT ALIVE", None: "?"}[e["alive"]]
            lines.append(f"{e['engine_id']}: {state}, heartbeat "
                         f"{_ago(e['heartbeat_age_seconds'])}")
        return "\n".join(lines)

    @staticmethod
    def _backends_text(backends: list[BackendReport]) -> str:
        return "\n".join(f"{b['host']}: stats {_ago(b['stats_age_seconds'])}"
                         for b in backends) or "none reported"

    @staticmethod
    def _pass_text(last: LastPass | None) -> str:
        if last is None:
            return "none recorded for this host"
        acted = ", ".join(f"{t}: " + " ".join(f"{s}={n}" for s, n in sorted(c.items()))
                          for t, c in sorted(last["outcomes"].items())) or "nothing to settle"
        text = (f"#{last['id']} ({last['trigger']}) {last['status']} "
                f"{last['finished_at'] or last['started_at']}: {acted}; "
                f"failures {last['failures']}")
        return text + (f"; {last['error']}" if last["error"] else "")
