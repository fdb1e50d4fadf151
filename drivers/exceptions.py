"""Exceptions a share driver raises.

The manager treats every ``ShareBackendException`` as "the backend said no":
it records the error status the operation calls for and carries on. Any other
exception from a driver is a bug in the driver; the manager handles it the same
way but logs the traceback.
"""

from __future__ import annotations


class ShareBackendException(Exception):
    """Base of every error a driver reports on purpose."""


class ShareResourceNotFound(ShareBackendException):
    """The backend has no object with the given id.

    Status methods raise it for an unknown object; operations that need an
    existing object (extend, shrink, snapshot of a share, ...) raise it too.
    Deletes never raise it: deleting what is gone succeeds.
    """


class InvalidShareRequest(ShareBackendException):
    """The request cannot be carried out as asked (a share without a share
    server on a DHSS backend, a shrink to a larger size, ...)."""


class OperationNotSupported(ShareBackendException, NotImplementedError):
    """The driver does not implement this operation.

    The base class raises it for every operation a driver does not override.
    It is both a ``ShareBackendException`` (the operation failed) and a
    ``NotImplementedError`` (so capability checks can tell it apart).
    """


class FencedCall(ShareBackendException):
    """The backend refused a call whose fencing token is older than one it
    has already accepted for the same object (doc/drivers.rst, "Fencing").

    The caller lost the resource (an engine paused or cut off while another
    took it over): the backend changed nothing. Only drivers that set
    ``honours_fencing = True`` raise it.
    """


class ShareShrinkingPossibleDataLoss(ShareBackendException):
    """A shrink was refused because the share's data would not fit in the
    new size (Manila's name); the share is left as it was."""


class InvalidDriverOption(Exception):
    """Raised by a driver's constructor: the value of one of its options (or
    a value derived from one, such as a path under ``state_path``) cannot be
    used. The start stops with this one line and exit code 2, as for any
    bad option value."""
