"""What a driver's status method answered, judged: healthy or not and why,
and the details a healthy answer carries (size, export locations) checked
before they are recorded."""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.common import vocab
from sharemgr.drivers.exceptions import ShareResourceNotFound
from sharemgr.manager import successes

# A judged answer: (healthy, reason, the answer's dict; {} when it has none).
# The dict is the driver's, read key by key with the checks below.
Verdict = tuple[bool, str, Mapping[str, object]]


class Unusable(Exception):
    """A healthy status answer whose details cannot be recorded."""


def size_of(answer: Mapping[str, object]) -> int:
    """A whole, positive number of GiB (``8``, ``8.0``, ``"8"``): shares
    have at least 1 GiB and at most ``MAX_SHARE_SIZE_GB``."""
    size = answer.get("size")
    value: int | None = None
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, float) and size.is_integer():
        value = int(size)
    elif isinstance(size, str) and size.strip().isdigit():
        value = int(size)
    if value is None or value < 1:
        raise Unusable(f"no usable size ({size!r})")
    if value > vocab.MAX_SHARE_SIZE_GB:
        raise Unusable(f"a size above the maximum of {vocab.MAX_SHARE_SIZE_GB} GiB ({value})")
    return value


def exports_of(raw: object) -> list[dict[str, object]]:
    if not isinstance(raw, (list, tuple)):
        raise Unusable(f"export locations that are not a list ({raw!r})")
    if not all(isinstance(i, str) or (isinstance(i, dict) and isinstance(i.get("path"), str))
               for i in raw):
        raise Unusable(f"export locations without paths ({raw!r})")
    return successes.export_locations(raw)


def _classify(answer: object) -> Verdict:
    """A status method's answer → (healthy, reason, answer dict)."""
    if not isinstance(answer, dict) or not answer.get("status"):
        return False, f"status method returned {answer!r} (no status)", {}
    if answer["status"] in (vocab.AVAILABLE, vocab.ACTIVE):
        return True, "healthy on the backend", answer
    return False, f"backend status {answer['status']}", answer


def verdict(method: str, answer: object) -> Verdict:
    """An answer of ``ask.ask`` → (healthy, reason, answer dict)."""
    if isinstance(answer, ShareResourceNotFound):
        return False, f"missing on the backend ({answer})", {}
    if isinstance(answer, NotImplementedError):
        return False, f"driver does not implement {method}", {}
    if isinstance(answer, BaseException):
        return False, f"{method} raised {answer!r}", {}
    return _classify(answer)
