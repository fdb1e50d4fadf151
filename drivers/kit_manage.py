"""The conformance kit's checks of manage and unmanage (Manila's methods):
an object let go with ``unmanage*`` stays on the backend, and ``manage*``
takes it over under new ids, answering its size; a manage repeated with the
same ids (a crash after the first) answers the same. A driver without a
method skips the checks that need it, naming the method.

``DriverConformanceTests`` includes them. Two hooks say how a driver finds
what it manages, where the kit cannot know: ``snapshot_provider_location``
(default: what ``create_snapshot`` answered as ``provider_location``, else
the snapshot instance id it was made with) and ``server_identifier``
(default: the id the server was set up with).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping

from sharemgr.drivers.base import ShareServer, Snapshot
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.kit_calls import Kit, check_export_locations
from sharemgr.drivers.kit_report import fail, method_name, skip, unsupported


def _manage(kit: Kit, method: str, *args: object, what: str) -> object:
    try:
        return kit.call(method, *args)
    except NotImplementedError:  # OperationNotSupported too
        unsupported(kit.driver, method)
    except ShareBackendException as exc:
        fail(f"{method_name(kit.driver, method)} of {what} failed: "
             f"{type(exc).__name__}: {exc}")


def _size(kit: Kit, method: str, answer: object, expected: int | None, what: str) -> None:
    if not isinstance(answer, Mapping):
        fail(f"{method_name(kit.driver, method)} of {what} returned {answer!r}; it must "
             "return a dict with 'size'")
    size = answer.get("size")
    if expected is not None and size != expected:
        fail(f"{method_name(kit.driver, method)} of {what} of size {expected} answered "
             f"size {size!r}")


class ManageChecks:
    """Checks of manage_existing, unmanage, manage_existing_snapshot,
    unmanage_snapshot, manage_server and unmanage_server."""

    def snapshot_provider_location(self, snapshot: Snapshot, created: object) -> str:
        """Where the backend keeps ``snapshot`` (``created``: what
        ``create_snapshot`` returned)."""
        if isinstance(created, Mapping) and created.get("provider_location"):
            return str(created["provider_location"])
        return str(snapshot["id"])

    def server_identifier(self, server: ShareServer) -> str:
        """The backend's identifier of a server ``setup_server`` made."""
        return str(server["id"])

    @staticmethod
    def _no_dhss(kit: Kit, method: str) -> None:
        if kit.driver.driver_handles_share_servers:
            skip(kit.driver, method, f"{method} is for backends without share servers "
                 "(driver_handles_share_servers = False)")

    def test_unmanage_leaves_the_share_on_the_backend(self, kit: Kit) -> None:
        share = kit.create_share(size=2)
        _manage(kit, "unmanage", share, what="an existing share")
        _manage(kit, "unmanage", share, what="a share already unmanaged")  # idempotent
        status = kit.status("get_share_status", share, "a share after unmanage")
        if status is None:
            unsupported(kit.driver, "get_share_status")
        if status.get("size") != 2:
            fail(f"after {method_name(kit.driver, 'unmanage')}, get_share_status reports "
                 f"{status!r}; the share must stay as it was")

    def test_manage_existing_takes_over_an_unmanaged_share(self, kit: Kit) -> None:
        self._no_dhss(kit, "manage_existing")
        old = kit.create_share(size=2)
        _manage(kit, "unmanage", old, what="an existing share")
        new = kit.share_dict(size=2)
        new.update(size=0, export_locations=[{"path": old["export_locations"][0]["path"],
                                              "is_admin_only": False, "preferred": True}])
        what = "a share at the export path of an unmanaged one"
        answer = _manage(kit, "manage_existing", copy.deepcopy(new), {}, what=what)
        _size(kit, "manage_existing", answer, 2, what)
        assert isinstance(answer, Mapping)
        if answer.get("export_locations"):
            check_export_locations(kit.driver, "manage_existing", answer["export_locations"])
        again = _manage(kit, "manage_existing", copy.deepcopy(new), {},
                        what=f"{what}, asked again with the same ids (after a crash)")
        _size(kit, "manage_existing", again, 2, f"{what}, asked again")
        new["size"] = 2
        status = kit.status("get_share_status", new, "a share just managed")
        if status is not None and status.get("size") != 2:
            fail(f"get_share_status of a share managed with its new id reports {status!r}")

    def test_manage_existing_of_an_unknown_path_is_a_driver_error(self, kit: Kit) -> None:
        self._no_dhss(kit, "manage_existing")
        share = kit.share_dict()
        share.update(size=0, export_locations=[{
            "path": f"kit-nowhere:/{uuid.uuid4()}", "is_admin_only": False, "preferred": True}])
        kit.expect_error("manage_existing", share, {}, what="an export path the backend "
                         "never had")

    def test_manage_existing_snapshot_takes_over_an_unmanaged_snapshot(self, kit: Kit) -> None:
        self._no_dhss(kit, "manage_existing_snapshot")
        share = kit.create_share(size=2)
        snap = kit.snapshot_dict(share)
        created = kit.create_call(snap, "create_snapshot", snap, kit.server,
                                  what="a snapshot of a new share")
        _manage(kit, "unmanage_snapshot", snap, what="an existing snapshot")
        new = kit.snapshot_dict(share)
        new.update(size=0, provider_location=self.snapshot_provider_location(snap, created))
        what = "a snapshot at the provider location of an unmanaged one"
        answer = _manage(kit, "manage_existing_snapshot", copy.deepcopy(new), {}, what=what)
        if answer is not None:
            _size(kit, "manage_existing_snapshot", answer, None, what)
        _manage(kit, "manage_existing_snapshot", copy.deepcopy(new), {},
                what=f"{what}, asked again with the same ids (after a crash)")
        try:
            kit.call("get_snapshot_status", new, kit.server)
        except NotImplementedError:
            pass
        except ShareResourceNotFound:
            fail(f"get_snapshot_status of a snapshot managed by "
                 f"{method_name(kit.driver, 'manage_existing_snapshot')} says it is not there")

    def test_manage_server_takes_over_an_unmanaged_server(self, kit: Kit) -> None:
        if not kit.driver.driver_handles_share_servers:
            skip(kit.driver, "manage_server", "manage_server is for backends with share "
                 "servers (driver_handles_share_servers = True)")
        old = kit.create("share_server")
        _manage(kit, "unmanage_server", old["backend_details"], [], what="an existing server")
        new = kit.server_dict()
        answer = _manage(kit, "manage_server", new, self.server_identifier(old), {},
                         what="a share server unmanaged before")
        name = method_name(kit.driver, "manage_server")
        if not isinstance(answer, tuple) or len(answer) != 2 or not (
                answer[1] is None or isinstance(answer[1], dict)):
            fail(f"{name} returned {answer!r}; it must return (identifier, backend_details)")
