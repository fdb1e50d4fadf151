"""Asking a backend about many resources at once: the driver's batch status
method where it has one (one backend call), the single method for what the
batch leaves out, or for every resource when there is no batch method or it
fails. Used by reconciliation passes and drift checks alike, so both ask the
same way and read the same answers.

An answer is what the single method returns (a status dict, or whatever a
broken driver returns) or the exception it raised: ``ShareResourceNotFound``
(missing on the backend), ``NotImplementedError`` (the driver cannot tell)
or any other (the call failed).
"""

from __future__ import annotations

from collections.abc import Mapping

from oslo_log import log as logging
from sharemgr.drivers.base import BATCH_STATUS_METHODS, ShareDriver

LOG = logging.getLogger(__name__)


def ask(driver: ShareDriver, method: str, items: Mapping[str, tuple[object, ...]]
        ) -> dict[str, object]:
    """Each resource's answer, by id; ``items``: id → the status method's
    arguments."""
    answers = _batch(driver, method, items)
    for ident, args in items.items():
        if ident not in answers:
            answers[ident] = _single(driver, method, args)
    return answers


def _batch(driver: ShareDriver, method: str, items: Mapping[str, tuple[object, ...]]
           ) -> dict[str, object]:
    """The batch method's answers for these ids; {} when the driver has none
    or it fails (every resource is then asked on its own, so the outcome is
    what the single method says)."""
    name = BATCH_STATUS_METHODS[method]
    batch = getattr(driver, name, None)
    if batch is None or not items:
        return {}
    try:
        answers = batch(list(items.values()))
    except NotImplementedError:
        return {}
    except Exception as exc:
        LOG.warning("%s failed (%r); asking %s resource by resource", name, exc, method)
        return {}
    if not isinstance(answers, dict):
        LOG.warning("%s returned %r, not a dict by id; asking %s resource by resource",
                    name, type(answers).__name__, method)
        return {}
    return {ident: answers[ident] for ident in items if ident in answers}


def _single(driver: ShareDriver, method: str, args: tuple[object, ...]) -> object:
    try:
        return getattr(driver, method)(*args)
    except Exception as exc:  # the answer, for the caller to read
        return exc
