"""What a reconciliation rule writes for one resource (reconcile/rules.py's
MARK and QUERY actions): the status it settles to and the conditional
updates that write it, each ``WHERE status = :seen`` (and the fencing
token as taken), so a row that changed since the pass read it keeps its
change."""

from __future__ import annotations

from collections.abc import Mapping

from oslo_log import log as logging
from sharemgr.common import vocab
from sharemgr.db.api import Change
from sharemgr.reconcile import answers, rules, status_query
from sharemgr.reconcile.scan import Candidate

LOG = logging.getLogger(__name__)


def changes(cand: Candidate, status: str, values: Mapping[str, object] | None = None,
            extra: list[Change] | None = None) -> tuple[str, list[Change]]:
    """The outcome's conditional updates: the row's status first, written
    only if it still has the status it was read with."""
    seen: dict[str, object] = {"status": cand.status}
    if getattr(cand.row, "fence", None) is not None:
        seen["fence"] = cand.row.fence  # as taken: written only while still ours
    return status, [(cand.model, cand.id, seen,
                     {"status": status, **(values or {})})] + (extra or [])


def _error_values(cand: Candidate) -> dict[str, object]:
    return {"replica_state": vocab.REPLICA_ERROR} if cand.rtype == vocab.REPLICA else {}


def mark(cand: Candidate, rule: rules.Rule) -> tuple[str, list[Change]]:
    """A status that cannot be resumed: its rule's error status."""
    LOG.warning("%s %s stuck in %s cannot be resumed: %s", cand.rtype, cand.id,
                cand.status, rule.error)
    return changes(cand, rule.error, _error_values(cand))


def converge(cand: Candidate, rule: rules.Rule,
             answered: answers.Verdict) -> tuple[str, list[Change]]:
    """A status the backend was asked about: its rule's ok status with what
    the answer says (size, export locations, ...), or its error status."""
    healthy, reason, answer = answered
    values: dict[str, object] = {}
    extra: list[Change] = []
    if cand.status == vocab.CREATING_FROM_SNAPSHOT and \
            answer.get("status") == vocab.CREATING_FROM_SNAPSHOT:
        # Still copying in the backend: the status poll (clone_poll)
        # ends it, as if the crashed call had returned.
        LOG.info("%s %s: still copying in the backend; left to the status poll",
                 cand.rtype, cand.id)
        return changes(cand, cand.status,
                       {"progress": str(answer.get("progress") or "0%")[:32]})
    if healthy:
        try:
            values, extra = status_query.healthy_values(cand, answer)
        except answers.Unusable as exc:
            healthy, reason = False, f"{rule.method} answered {exc}"
    if not healthy:
        LOG.warning("%s %s (%s) → %s: %s", cand.rtype, cand.id, cand.status, rule.error,
                    reason)
        return changes(cand, rule.error, _error_values(cand))
    LOG.info("%s %s (%s) → %s: %s", cand.rtype, cand.id, cand.status, rule.ok, reason)
    assert rule.ok is not None, "a query rule names the status it settles to"
    return changes(cand, rule.ok, values, extra)
