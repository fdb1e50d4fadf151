"""How an operation ends short of its success, as exceptions raised where
it is found, deep in a step (``Operations.run``'s, a handler's, the driver
arguments' or the success's), and as the outcome ``Operations.perform``
returns for each; and the one log line of a driver's failure."""

from __future__ import annotations

from typing import Never

from oslo_log import log as logging
from sharemgr.common.outcome import Outcome
from sharemgr.drivers.exceptions import ShareBackendException

# Under the operations' logger, where an operation's other lines are.
LOG = logging.getLogger("sharemgr.manager.operations")


class OperationFailed(Exception):
    """The driver call failed; the resource is in its error status (or,
    for a call refused before anything changed, back in its status).
    ``detail_id``: the user message's detail (common/messages.py), when it
    is not the plain ``FAILED``."""

    def __init__(self, message: str, detail_id: str | None = None) -> None:
        super().__init__(message)
        self.detail_id = detail_id


class Stale(Exception):
    """The resource is no longer in the status the request expects (an admin
    reset it, or it was settled by someone else): nothing to do."""


class Lost(Stale):
    """The operation lost its resource while the driver worked: another
    engine or a reconciliation took it (its fencing token moved on), or the
    backend refused the call as fenced. The outcome was not written; the
    resource is re-observed (``Operations.on_lost``)."""


class NotNow(Stale):
    """This engine may not call the driver now: it is out of the engines
    group (paused, cut off), or the call's lease is about to run out.
    Nothing reached the driver; the request goes back to pending."""


def before_call(what: str, exc: Exception) -> NotNow:
    """An outage met before the operation's first driver call."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return NotNow(f"{what}: before its driver call: {type(exc).__name__}: {first}")


def outcome_of(exc: OperationFailed | Stale) -> Outcome[Never]:
    """The outcome an operation's exception says: raised where it is found,
    deep in a step, and returned as a value from ``perform`` up."""
    reason = str(exc)
    if isinstance(exc, NotNow):
        return Outcome.not_now(reason)
    if isinstance(exc, Lost):
        return Outcome.lost(reason)
    if isinstance(exc, Stale):
        return Outcome.stale(reason)
    return Outcome.failed(reason, exc.detail_id)


def log_failure(what: str, method: str | None, exc: Exception) -> None:
    """A failure the driver reports (or the manager's own OperationFailed)
    is one WARNING line; anything else is a driver bug: ERROR with the
    traceback, naming the driver method."""
    if isinstance(exc, (ShareBackendException, OperationFailed)):
        LOG.warning("%s failed: %s%s: %s", what, f"{method}: " if method else "",
                    type(exc).__name__, exc)
    else:
        LOG.error("%s failed: unexpected %s from driver method %s: %s", what,
                  type(exc).__name__, method or "(unknown)", exc, exc_info=exc)
