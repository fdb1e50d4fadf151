"""A drift check's repair of a share its backend holds but does not serve
as recorded (kind ``not_served``, doc/reconciliation.rst "Drift"): the
share is applied again — ``ensure_shares`` with it (the driver's own "make
sure it is exported"), then its full set of active rules through the
``update_access`` operation the access requests use — under the lock the
check holds, and the backend is asked once more whether it now serves it.
A user message says what was done."""

from __future__ import annotations

from oslo_log import log as logging
from sharemgr.common import messages, vocab
from sharemgr.db import messages as db_messages
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import driver_args
from sharemgr.manager.plans import Op
from sharemgr.reconcile import ask
from sharemgr.reconcile.reconciler import Reconciler
from sharemgr.reconcile.scan import Candidate

LOG = logging.getLogger(__name__)

REPAIRED = "repaired"
FAILED = "repair failed"


def repair(rec: Reconciler, driver: ShareDriver, cand: Candidate, method: str,
           share_id: str, why: str) -> str:
    """Apply the share again (the caller holds its lock); the action
    recorded: ``repaired`` or ``repair failed`` (the log says why)."""
    ops = rec.operations
    try:
        share_d, server = driver_args.share_parts(ops.db, cand.row)
        try:
            driver.ensure_shares([share_d])
        except NotImplementedError:
            pass  # the rules alone, then
        sent = ops.perform(Op(vocab.SHARE_INSTANCE, cand.id, vocab.ACTION_UPDATE_ACCESS,
                              cand.host, {"resync": True}), held=True)
        if not sent.ok:
            LOG.warning("drift: share %s (instance %s) could not be served again: its "
                        "access rules were not sent: %s", share_id, cand.id, sent.reason)
            return FAILED
        again = ask.ask(driver, method, {cand.id: (share_d, server)})[cand.id]
    except Exception as exc:  # the finding is still recorded, with why
        LOG.warning("drift: share %s (instance %s) could not be served again: %s",
                    share_id, cand.id, exc)
        return FAILED
    if not isinstance(again, dict) or again.get("served") is False:
        still = again.get("detail") if isinstance(again, dict) else again
        LOG.warning("drift: share %s (instance %s) applied again but still not served: %s",
                    share_id, cand.id, still)
        return FAILED
    LOG.warning("drift: share %s (instance %s) was not served as recorded (%s): applied "
                "again", share_id, cand.id, why)
    try:
        db_messages.record_about(rec.db, vocab.SHARE, share_id, messages.ACTION_REPAIR,
                                 messages.NOT_SERVED, why)
    except Exception:  # the repair stands; only its message is lost (logged above)
        LOG.warning("drift: the user message about share %s could not be written", share_id)
    return REPAIRED
