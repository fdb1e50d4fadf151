"""Manila's manage and unmanage in the share driver contract: bringing
objects the backend already holds under the manager, and forgetting them.
``ShareDriver`` (drivers/base.py) inherits it; drivers import everything
from there."""

from __future__ import annotations

from collections.abc import Mapping

from sharemgr.drivers.exceptions import OperationNotSupported
from sharemgr.drivers.shapes import (
    JSONDict,
    ManagedShare,
    ManagedSnapshot,
    Share,
    ShareServer,
    Snapshot,
)


class ManageMethods:
    """The manage and unmanage methods of :class:`~sharemgr.drivers.base.ShareDriver`."""

    # Manage and unmanage (Manila's) -------------------------------------------
    # Manage brings an object the backend already holds under the manager: a
    # new record whose ids the driver ties the object to (a later delete,
    # extend or status call names the new ids). Unmanage forgets a record and
    # leaves its object on the backend. Each may be called again with the same
    # ids after a crash; the manager records nothing until it returns.

    def manage_existing(self, share: Share, driver_options: Mapping[str, str]) -> ManagedShare:
        """Take over the existing share at ``share["export_locations"][0]["path"]``
        (the path the user gave) as share instance ``share["id"]``.

        :param share: the new share instance dict (``share_proto``, ``name``,
            ``host``; ``size`` is 0 until this returns).
        :param driver_options: the user's ``--driver-option key=value`` pairs.
        :returns: ``{"size": GiB, "export_locations": [...]}``; ``size`` is
            required (a share without one ends ``manage_error``), export
            locations left out keep the path given.
        :raises ShareResourceNotFound: the backend has no share at that path.
        :raises InvalidShareRequest: the object cannot be managed (another
            protocol, already managed, a bad option).
        :raises ShareBackendException: the backend failed.
        Called again for the same ``share["id"]`` after a crash, it returns
        what the first call took over.
        """
        raise OperationNotSupported("manage_existing")

    def unmanage(self, share: Share) -> None:
        """Forget ``share`` without touching its data (Manila's default does
        nothing, and so does this one): drop what the driver keeps about the
        manager's ownership, if anything.

        :raises InvalidShareRequest: it cannot be unmanaged now.
        Idempotent.
        """
        return None

    def manage_existing_snapshot(self, snapshot: Snapshot, driver_options: Mapping[str, str]
                                 ) -> ManagedSnapshot:
        """Take over the existing snapshot at ``snapshot["provider_location"]``
        of share instance ``snapshot["share_instance_id"]`` as snapshot
        instance ``snapshot["id"]``.

        :returns: ``{"size": GiB, "provider_location": str}``, both optional
            (the share's size and the given location are kept).
        :raises ShareResourceNotFound: no such snapshot on the backend.
        :raises InvalidShareRequest: it is not a snapshot of that share.
        :raises ShareBackendException: the backend failed.
        Called again for the same ``snapshot["id"]``, returns what it took over.
        """
        raise OperationNotSupported("manage_existing_snapshot")

    def unmanage_snapshot(self, snapshot: Snapshot) -> None:
        """Forget ``snapshot`` without deleting it (does nothing by default).

        Idempotent.
        """
        return None

    def manage_server(self, share_server: ShareServer, identifier: str,
                      driver_options: Mapping[str, str]) -> tuple[str | None, JSONDict]:
        """Take over the existing share server ``identifier`` (the backend's
        name for it) as ``share_server["id"]`` on a DHSS backend. Manila's
        method without its context argument.

        :returns: ``(identifier, backend_details)``: the backend's identifier
            of the server (None: ``identifier`` as given) and the details the
            manager stores and passes back as ``backend_details``, as
            ``setup_server`` returns them.
        :raises ShareResourceNotFound: no such server on the backend.
        :raises InvalidShareRequest: the backend does not handle share servers.
        :raises ShareBackendException: the backend failed.
        """
        raise OperationNotSupported("manage_server")

    def unmanage_server(self, server_details: Mapping[str, object],
                        security_services: list[Mapping[str, object]] | None = None) -> None:
        """Forget a share server without tearing it down.

        :param server_details: its ``backend_details``.
        :param security_services: always empty here (sharemgr has none).
        :raises OperationNotSupported: the driver cannot (the default: the
            server ends ``unmanage_error``, as Manila without ``--force``).
        """
        raise OperationNotSupported("unmanage_server")

