"""The driver conformance kit: pytest checks of the ``ShareDriver`` contract.

A driver's own test suite subclasses ``DriverConformanceTests`` and says how to
build its driver::

    from sharemgr.drivers.testing import DriverConformanceTests, build_driver

    class TestMyDriverConformance(DriverConformanceTests):
        dhss_modes = (False, True)          # the DHSS modes the driver supports

        def make_driver(self, tmp_path, *, driver_handles_share_servers):
            return build_driver("mydriver", tmp_path,
                                driver_handles_share_servers=driver_handles_share_servers)

Every check runs once per DHSS mode. An operation the driver does not implement
(``OperationNotSupported`` or ``NotImplementedError``) skips the checks that
need it, with the reason, reported at the driver's method (or, for a method it
inherits, its class) rather than at a line of the kit; a broken contract fails
with a message that names the method and the rule.
"""

from __future__ import annotations

import copy
import inspect
import numbers
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from oslo_config import cfg
from sharemgr.drivers import loader
from sharemgr.drivers import options as driver_options
from sharemgr.drivers.base import BATCH_STATUS_METHODS, STATUS_METHODS, ShareDriver
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound

KIT_HOST = "kithost"
KIT_ENGINE = "kithost.conformance"

# kind -> (create method, delete method, status method)
KINDS: dict[str, tuple[str, str, str | None]] = {
    "share": ("create_share", "delete_share", "get_share_status"),
    "snapshot": ("create_snapshot", "delete_snapshot", "get_snapshot_status"),
    "replica": ("create_replica", "delete_replica", "get_replica_status"),
    "share_group": ("create_share_group", "delete_share_group", "get_share_group_status"),
    "group_snapshot": (
        "create_share_group_snapshot",
        "delete_share_group_snapshot",
        "get_share_group_snapshot_status",
    ),
    "backup": ("create_backup", "delete_backup", None),
    "share_server": ("setup_server", "teardown_server", None),
}
STATUS_KIND = {status: kind for kind, (_, _, status) in KINDS.items() if status}


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def build_driver(
    driver: str | type[ShareDriver],
    tmp_path: Path,
    *,
    backend: str = "kit",
    setup: bool = False,
    **options: Any,
) -> ShareDriver:
    """Build a driver the way ``share-manager`` does, from a config file.

    :param driver: an entry point name in ``sharemgr.share_drivers`` (loaded
        through stevedore, so the plugin must be installed) or a driver class.
    :param tmp_path: folder for the config file and ``state_path``.
    :param backend: the backend's config group name.
    :param setup: call ``do_setup`` and ``check_for_setup_error``.
    :param options: options of the backend group, e.g.
        ``driver_handles_share_servers=True``; lists and dicts are written as
        oslo.config reads them.
    :raises loader.DriverLoadError: the driver cannot be loaded.
    """
    tmp_path = Path(tmp_path)
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    section = dict(options)
    if isinstance(driver, str):
        section["share_driver"] = driver
    lines = ["[DEFAULT]", f"state_path = {state}", f"enabled_share_backends = {backend}",
             "", f"[{backend}]"]
    lines += [f"{k} = {_option_text(v)}" for k, v in section.items()]
    conf_file = tmp_path / f"{backend}.conf"
    conf_file.write_text("\n".join(lines) + "\n")
    conf = cfg.ConfigOpts()
    driver_options.register_common_opts(conf)
    conf(["--config-file", str(conf_file)], project="sharemgr", default_config_files=[])
    if isinstance(driver, str):
        return loader.load_driver(conf, backend, KIT_HOST, KIT_ENGINE, setup=setup)
    return loader.construct_driver(conf, backend, driver, KIT_HOST, KIT_ENGINE, setup=setup)


def _fail(message: str) -> NoReturn:
    # "from None": the message says it all; the driver's exception would only
    # add a second, confusing report.
    raise pytest.fail.Exception(message, pytrace=False) from None


def _name(driver: ShareDriver, method: str) -> str:
    return f"{type(driver).__name__}.{method}"


def _inherits(driver: ShareDriver, method: str) -> bool:
    """The driver keeps the base class's ``method``."""
    return getattr(type(driver), method, None) is getattr(ShareDriver, method, None)


def _where(driver: ShareDriver, method: str | None = None) -> tuple[str, int] | None:
    """(file, line) of the driver's ``method``, or of its class when it
    inherits the method from ShareDriver (or none is named)."""
    cls = type(driver)
    if method and not _inherits(driver, method):
        fn = getattr(cls, method, None)
        code = None if fn is None else getattr(inspect.unwrap(fn), "__code__", None)
        if code is not None:
            return code.co_filename, code.co_firstlineno
    try:
        return inspect.getsourcefile(cls) or "?", inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None


class DriverSkip(pytest.skip.Exception):  # type: ignore[name-defined]  # pytest's Skipped
    """A skip about the driver: pytest reports it at ``location`` (the
    driver's method) instead of the kit's line that raised it."""

    def __init__(self, reason: str, location: tuple[str, int] | None) -> None:
        super().__init__(reason)
        self.location = location


class _SkipLocations:
    """pytest plugin (registered by the kit's autouse fixture): moves a
    DriverSkip's reported location to the driver."""

    NAME = "sharemgr-driver-kit-skips"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        exc = call.excinfo.value if call.excinfo else None
        if (report.skipped and isinstance(exc, DriverSkip) and exc.location
                and isinstance(report.longrepr, tuple)):
            # "Skipped: " is what pytest strips from a skip's reason when it shows it.
            report.longrepr = (exc.location[0], exc.location[1], f"Skipped: {exc.msg}")
        return report


def _skip(driver: ShareDriver, method: str | None, reason: str) -> NoReturn:
    raise DriverSkip(reason, _where(driver, method))


def _unsupported(driver: ShareDriver, method: str) -> NoReturn:
    _skip(driver, method, f"{_name(driver, method)} is not implemented")


class _Kit:
    """Builds resource dicts in the manager's shapes and calls the driver,
    turning contract breaches into clear failures."""

    def __init__(self, driver: ShareDriver, server: dict | None) -> None:
        self.driver = driver
        self.server = server
        # object id -> (create method, its arguments, its result), to repeat it
        self.created: dict[str, tuple[str, tuple, Any]] = {}

    # Dicts in the shapes the manager passes ---------------------------------

    @staticmethod
    def _ids(kind: str) -> tuple[str, str]:
        return str(uuid.uuid4()), f"kit-{kind}-{uuid.uuid4().hex[:8]}"

    def share_dict(self, size: int = 1, snapshot: dict | None = None) -> dict:
        instance_id, name = self._ids("share")
        return {
            "id": instance_id, "share_id": str(uuid.uuid4()), "name": name, "size": size,
            "share_proto": "NFS", "host": self.driver.backend_host,
            "share_server_id": self.server["id"] if self.server else None,
            "export_locations": [],
            "snapshot_id": snapshot["snapshot_id"] if snapshot else None,
        }

    def snapshot_dict(self, share: dict) -> dict:
        instance_id, name = self._ids("snapshot")
        return {"id": instance_id, "snapshot_id": str(uuid.uuid4()),
                "share_instance_id": share["id"], "share_id": share["share_id"],
                "name": name, "size": share["size"], "share": share}

    def replica_dict(self, share: dict) -> dict:
        replica = self.share_dict(share["size"])
        replica.update(share_id=share["share_id"], replica_state="out_of_sync")
        return replica

    def group_dict(self) -> dict:
        group_id, name = self._ids("group")
        return {"id": group_id, "name": name, "host": self.driver.backend_host,
                "share_server_id": self.server["id"] if self.server else None}

    def group_snapshot_dict(self, group: dict) -> dict:
        gs_id, name = self._ids("group-snapshot")
        return {"id": gs_id, "name": name, "share_group_id": group["id"], "share_group": group}

    def backup_dict(self, share: dict) -> dict:
        backup_id, name = self._ids("backup")
        return {"id": backup_id, "share_id": share["share_id"], "name": name,
                "size": share["size"]}

    def server_dict(self) -> dict:
        return {"id": str(uuid.uuid4()), "host": self.driver.backend_host,
                "backend_details": {}}

    # Calls ----------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> Any:
        """Call; a driver error stays an exception, anything else fails."""
        try:
            return getattr(self.driver, method)(*args)
        except (ShareBackendException, NotImplementedError):
            raise
        except Exception as exc:
            _fail(
                f"{_name(self.driver, method)} raised {type(exc).__name__}: {exc}; a "
                "driver reports failures with sharemgr.drivers.exceptions."
                "ShareBackendException subclasses"
            )

    def ok(self, method: str, *args: Any, what: str, optional: bool = True) -> Any:
        """Call a method that must succeed; skip if it is not implemented
        and ``optional``."""
        try:
            return self.call(method, *args)
        except NotImplementedError:
            if optional:
                _unsupported(self.driver, method)
            _fail(f"{_name(self.driver, method)} is required but raised NotImplementedError")
        except ShareBackendException as exc:
            _fail(f"{_name(self.driver, method)} failed for {what}: "
                  f"{type(exc).__name__}: {exc}")

    def delete(self, kind: str, obj: dict, what: str) -> None:
        method = KINDS[kind][1]
        try:
            self.call(method, *self._delete_args(kind, obj))
        except NotImplementedError:
            _unsupported(self.driver, method)
        except ShareBackendException as exc:
            _fail(
                f"{_name(self.driver, method)} is not idempotent: deleting {what} raised "
                f"{type(exc).__name__}: {exc}; a delete must succeed when the object "
                "is already gone"
            )

    def _delete_args(self, kind: str, obj: dict) -> tuple:
        if kind == "share_server":
            return (obj, obj.get("backend_details") or {})
        if kind == "backup":
            return (obj,)
        return (obj, self.server)

    def status(self, method: str, obj: dict, what: str) -> dict | None:
        """A status method's answer, checked for shape; None if unimplemented."""
        try:
            result = self.call(method, obj, self.server)
        except NotImplementedError:
            return None
        except ShareResourceNotFound as exc:
            _fail(f"{_name(self.driver, method)} of {what} raised ShareResourceNotFound "
                  f"({exc}) although the object exists")
        except ShareBackendException as exc:
            _fail(f"{_name(self.driver, method)} of {what} failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, dict) or not isinstance(result.get("status"), str):
            _fail(
                f"{_name(self.driver, method)} of {what} returned {result!r}; a status "
                "method returns a dict with at least a 'status' string, or raises "
                "NotImplementedError"
            )
        return result

    def expect_not_found(self, method: str, *args: Any, what: str) -> None:
        try:
            result = self.call(method, *args)
        except NotImplementedError:
            _unsupported(self.driver, method)
        except ShareResourceNotFound:
            return
        except ShareBackendException as exc:
            _fail(f"{_name(self.driver, method)} of {what} raised {type(exc).__name__}: "
                  f"{exc}; it must raise ShareResourceNotFound")
        _fail(f"{_name(self.driver, method)} of {what} returned {result!r}; it must raise "
              "ShareResourceNotFound")

    def expect_error(self, method: str, *args: Any, what: str) -> None:
        try:
            result = self.call(method, *args)
        except NotImplementedError:
            # Before ShareBackendException: OperationNotSupported is both, and
            # an unimplemented operation is a skip, not the error asked for.
            _unsupported(self.driver, method)
        except ShareBackendException:
            return
        _fail(f"{_name(self.driver, method)} of {what} returned {result!r}; it must raise "
              "a ShareBackendException")

    def create_call(self, obj: dict, method: str, *args: Any, what: str,
                    optional: bool = True) -> Any:
        """``ok`` for the create of ``obj``, remembered so a check can repeat it."""
        result = self.ok(method, *args, what=what, optional=optional)
        self.created[obj["id"]] = (method, copy.deepcopy(args), copy.deepcopy(result))
        return result

    # Objects ---------------------------------------------------------------------

    def create_share(self, size: int = 1) -> dict:
        share = self.share_dict(size)
        locations = self.create_call(share, "create_share", share, self.server,
                                     what="a new share", optional=False)
        check_export_locations(self.driver, "create_share", locations)
        share["export_locations"] = locations
        return share

    def create(self, kind: str) -> dict:
        """Create an object of ``kind`` (with its parents); skip if the driver
        cannot."""
        method = KINDS[kind][0]
        if kind == "share":
            return self.create_share()
        if kind == "share_server":
            if not self.driver.driver_handles_share_servers:
                _skip(self.driver, None, f"{type(self.driver).__name__}: share servers exist "
                      "only with driver_handles_share_servers = True")
            server = self.server_dict()
            details = self.create_call(server, method, server, None,
                                       what="a new share server")
            if not isinstance(details, dict):
                _fail(f"{_name(self.driver, method)} returned {details!r}; it must return "
                      "the backend_details dict")
            server["backend_details"] = details
            return server
        if kind in ("share_group", "group_snapshot"):
            group = self.group_dict()
            self.create_call(group, "create_share_group", group, self.server,
                             what="a new share group")
            if kind == "share_group":
                return group
            gsnap = self.group_snapshot_dict(group)
            self.create_call(gsnap, method, gsnap, self.server, what="a new group snapshot")
            return gsnap
        share = self.create_share()
        if kind == "snapshot":
            snap = self.snapshot_dict(share)
            self.create_call(snap, method, snap, self.server, what="a snapshot of a new share")
            return snap
        if kind == "replica":
            replica = self.replica_dict(share)
            result = self.create_call(replica, method, replica, share, self.server,
                                      what="a new replica")
            if not isinstance(result, dict) or not isinstance(
                result.get("export_locations"), list
            ) or "replica_state" not in result:
                _fail(f"{_name(self.driver, method)} returned {result!r}; it must return "
                      "{'export_locations': [...], 'replica_state': ...}")
            check_export_locations(self.driver, method, result["export_locations"])
            return replica
        backup = self.backup_dict(share)
        self.create_call(backup, method, share, backup, what="a backup of a new share")
        backup["share"] = share
        return backup

    def never_created(self, kind: str) -> dict:
        """A dict of ``kind`` whose object the backend never had."""
        share = self.share_dict()
        return {
            "share": share,
            "snapshot": self.snapshot_dict(share),
            "replica": self.replica_dict(share),
            "share_group": self.group_dict(),
            "group_snapshot": self.group_snapshot_dict(self.group_dict()),
            "backup": self.backup_dict(share),
            "share_server": self.server_dict(),
        }[kind]


def check_export_locations(driver: ShareDriver, method: str, locations: Any) -> None:
    """Fail unless ``locations`` is a list of export location dicts."""
    if not isinstance(locations, list) or not locations:
        _fail(f"{_name(driver, method)} returned {locations!r}; it must return a non-empty "
              "list of export locations {'path', 'is_admin_only', 'preferred'}")
    for loc in locations:
        if (
            not isinstance(loc, dict)
            or not isinstance(loc.get("path"), str)
            or not loc["path"]
            or not isinstance(loc.get("is_admin_only"), bool)
            or not isinstance(loc.get("preferred"), bool)
        ):
            _fail(f"{_name(driver, method)} returned the export location {loc!r}; each must "
                  "be {'path': non-empty str, 'is_admin_only': bool, 'preferred': bool}")


# What a capacity may say instead of a number of GiB (Manila's words).
CAPACITY_WORDS = ("infinite", "unknown")


class DriverConformanceTests:
    """Checks of the ShareDriver contract. Subclass as ``Test...`` and
    implement ``make_driver``; see the module docstring."""

    #: DHSS modes the driver supports; every check runs in each.
    dhss_modes: tuple[bool, ...] = (False,)
    #: Most ``*_continue`` calls a backup or restore may need to reach 100.
    backup_max_polls: int = 100
    #: Called between ``*_continue`` polls (e.g. ``lambda: time.sleep(1)``).
    backup_poll_wait: Callable[[], None] | None = None

    def make_driver(self, tmp_path: Path, *, driver_handles_share_servers: bool) -> ShareDriver:
        """Return a new driver whose backend state lives under ``tmp_path``."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_driver(tmp_path, *, "
            "driver_handles_share_servers)"
        )

    def backend_access_rules(self, driver: ShareDriver, share: dict
                             ) -> set[tuple[str, str, str]] | None:
        """The rules the backend applies to ``share`` now, as ``(access_type,
        access_to, access_level)``; None (the default): the suite cannot look,
        and the access checks only check what ``update_access`` returns."""
        return None

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "dhss" in metafunc.fixturenames:
            metafunc.parametrize(
                "dhss", self.dhss_modes, ids=[f"dhss={m}" for m in self.dhss_modes]
            )

    # Fixtures -------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _driver_skip_locations(self, request: pytest.FixtureRequest) -> None:
        """Skips are reported at the driver's method (see DriverSkip)."""
        plugins = request.config.pluginmanager
        if not plugins.has_plugin(_SkipLocations.NAME):
            plugins.register(_SkipLocations(), _SkipLocations.NAME)

    @pytest.fixture
    def driver(self, tmp_path: Path, dhss: bool) -> ShareDriver:
        drv = self.make_driver(tmp_path, driver_handles_share_servers=dhss)
        if not isinstance(drv, ShareDriver):
            _fail(f"make_driver returned {drv!r}, not a sharemgr.drivers.base.ShareDriver")
        if drv.driver_handles_share_servers is not dhss:
            _fail(f"make_driver(driver_handles_share_servers={dhss}) returned a driver whose "
                  f"driver_handles_share_servers is {drv.driver_handles_share_servers!r}")
        for step in ("do_setup", "check_for_setup_error"):
            try:
                getattr(drv, step)()
            except Exception as exc:
                _fail(f"{_name(drv, step)} failed: {type(exc).__name__}: {exc}")
        return drv

    @pytest.fixture
    def kit(self, driver: ShareDriver) -> _Kit:
        server = None
        if driver.driver_handles_share_servers:
            server = _Kit(driver, None).create("share_server")
        return _Kit(driver, server)

    # Set-up and information ----------------------------------------------------

    def test_backend_info_is_a_dict(self, kit: _Kit) -> None:
        info = kit.ok("get_backend_info", what="the backend", optional=False)
        if not isinstance(info, dict):
            _fail(f"{_name(kit.driver, 'get_backend_info')} returned {info!r}, not a dict")

    def test_ensure_shares_answers_for_given_shares(self, kit: _Kit) -> None:
        share = kit.create_share()
        updates = kit.ok("ensure_shares", [share], what="one existing share", optional=False)
        method = _name(kit.driver, "ensure_shares")
        if not isinstance(updates, dict):
            _fail(f"{method} returned {updates!r}; it must return a dict keyed by share id")
        if set(updates) - {share["id"]}:
            _fail(f"{method} returned updates for ids it was not given: {sorted(updates)}")
        for update in updates.values():
            if not isinstance(update, dict):
                _fail(f"{method} returned the update {update!r}; each must be a dict")
            if "export_locations" in update:
                check_export_locations(kit.driver, "ensure_shares", update["export_locations"])

    # Create, then the status methods report it -----------------------------------

    def test_created_share_is_reported(self, kit: _Kit) -> None:
        share = kit.create_share(size=2)
        status = kit.status("get_share_status", share, "a share just created")
        if status is None:
            _unsupported(kit.driver, "get_share_status")
        method = _name(kit.driver, "get_share_status")
        if status["status"] != "available":
            _fail(f"{method} of a share just created says {status['status']!r}, "
                  "not 'available'")
        if status.get("size") != 2:
            _fail(f"{method} of a share created with size 2 reports size "
                  f"{status.get('size')!r}; it must report 'size'")
        if "export_locations" not in status:
            _fail(f"{method} returned {status!r} without 'export_locations'")
        check_export_locations(kit.driver, "get_share_status", status["export_locations"])

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_status_method_reports_created_object(self, kit: _Kit, method: str) -> None:
        obj = kit.create(STATUS_KIND[method])
        if kit.status(method, obj, f"a {STATUS_KIND[method]} just created") is None:
            _unsupported(kit.driver, method)

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_status_of_unknown_object_is_not_found(self, kit: _Kit, method: str) -> None:
        obj = kit.never_created(STATUS_KIND[method])
        kit.expect_not_found(method, obj, kit.server,
                             what=f"a {STATUS_KIND[method]} the backend never had")

    # Batch status methods -----------------------------------------------------------

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_batch_status_agrees_with_single(self, kit: _Kit, method: str) -> None:
        """The optional batch form answers ``{id: what the single method
        answers}`` (or the ShareResourceNotFound it raises), only for the ids
        it was given."""
        batch = BATCH_STATUS_METHODS[method]
        kind = STATUS_KIND[method]
        objs = [kit.create(kind), kit.create(kind)]
        missing = kit.never_created(kind)
        try:
            answers = kit.call(batch, [(o, kit.server) for o in [*objs, missing]])
        except NotImplementedError:
            _unsupported(kit.driver, batch)
        except ShareBackendException as exc:
            _fail(f"{_name(kit.driver, batch)} of {len(objs)} {kind}s and one the backend "
                  f"never had failed: {type(exc).__name__}: {exc}")
        name = _name(kit.driver, batch)
        if not isinstance(answers, dict):
            _fail(f"{name} returned {answers!r}; it must return a dict keyed by resource id")
        given = {o["id"] for o in [*objs, missing]}
        if set(answers) - given:
            _fail(f"{name} returned answers for ids it was not given: "
                  f"{sorted(set(answers) - given)}")
        if missing["id"] in answers and not isinstance(answers[missing["id"]],
                                                       ShareResourceNotFound):
            _fail(f"{name} answers {answers[missing['id']]!r} for a {kind} the backend never "
                  "had; the answer must be a ShareResourceNotFound (or the id left out)")
        for obj in objs:
            if obj["id"] not in answers:
                continue  # left out: the manager asks the single method
            answer = answers[obj["id"]]
            single = kit.status(method, obj, f"a {kind} just created")
            if single is None:
                _fail(f"{name} answers for a {kind} but {_name(kit.driver, method)} raises "
                      "NotImplementedError; a batch method needs its single method")
            if answer != single:
                _fail(f"{name} answers {answer!r} for a {kind} just created but "
                      f"{_name(kit.driver, method)} answers {single!r}; they must agree")

    # Deletes are idempotent -----------------------------------------------------------

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_delete_twice_succeeds(self, kit: _Kit, kind: str) -> None:
        obj = kit.create(kind)
        kit.delete(kind, obj, f"an existing {kind}")
        status_method = KINDS[kind][2]
        if status_method:
            try:
                answer = kit.call(status_method, obj, kit.server)
            except NotImplementedError:
                pass
            except ShareResourceNotFound:
                pass
            except ShareBackendException as exc:
                _fail(f"{_name(kit.driver, status_method)} of a deleted {kind} raised "
                      f"{type(exc).__name__}: {exc}; it must raise ShareResourceNotFound")
            else:
                _fail(f"{_name(kit.driver, status_method)} answers {answer!r} for a {kind} "
                      f"after {_name(kit.driver, KINDS[kind][1])} succeeded; it must raise "
                      "ShareResourceNotFound")
        kit.delete(kind, obj, f"a {kind} that was already deleted")

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_delete_of_never_created_object_succeeds(self, kit: _Kit, kind: str) -> None:
        kit.delete(kind, kit.never_created(kind), f"a {kind} the backend never had")

    # Creates are idempotent ------------------------------------------------------------

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_create_twice_returns_the_existing_object(self, kit: _Kit, kind: str) -> None:
        """A create retried after a crash (same ids) returns what the first made."""
        obj = kit.create(kind)
        method, args, first = kit.created[obj["id"]]
        name = _name(kit.driver, method)
        try:
            again = kit.call(method, *copy.deepcopy(args))
        except NotImplementedError:
            _unsupported(kit.driver, method)
        except ShareBackendException as exc:
            _fail(f"{name} is not idempotent: creating a {kind} the backend already has "
                  f"raised {type(exc).__name__}: {exc}; a create called again with the same "
                  "id must return the existing object")
        if kind in ("share", "replica", "share_server") and again != first:
            _fail(f"{name} is not idempotent: creating a {kind} the backend already has "
                  f"returned {again!r}, not what the first create returned ({first!r})")

    # Sizes -----------------------------------------------------------------------------

    def test_extend_to_the_current_size_succeeds(self, kit: _Kit) -> None:
        """An extend retried after a crash finds the share at its new size."""
        share = kit.create_share(size=2)
        name = _name(kit.driver, "extend_share")
        try:
            kit.call("extend_share", share, 2, kit.server)
        except NotImplementedError:
            _unsupported(kit.driver, "extend_share")
        except ShareBackendException as exc:
            _fail(f"{name} to the size the share already has (2) raised "
                  f"{type(exc).__name__}: {exc}; extending to the current size must succeed")
        status = kit.status("get_share_status", share, "a share extended to its own size")
        if status is not None and status.get("size") != 2:
            _fail(f"after {name} of a share of size 2 to 2, get_share_status reports size "
                  f"{status.get('size')!r}")

    def _reported_size(self, kit: _Kit, share: dict, after: str) -> int | None:
        status = kit.status("get_share_status", share, f"a share after {after}")
        if status is None:
            _unsupported(kit.driver, "get_share_status")
        return status.get("size")

    def test_extend_changes_reported_size(self, kit: _Kit) -> None:
        share = kit.create_share(size=1)
        kit.ok("extend_share", share, 3, kit.server, what="a share of size 1 to 3")
        size = self._reported_size(kit, share, "extend_share to 3")
        if size != 3:
            _fail(f"after {_name(kit.driver, 'extend_share')} from 1 to 3, get_share_status "
                  f"reports size {size!r}")

    def test_shrink_changes_reported_size(self, kit: _Kit) -> None:
        share = kit.create_share(size=3)
        kit.ok("shrink_share", share, 2, kit.server, what="a share of size 3 to 2")
        size = self._reported_size(kit, share, "shrink_share to 2")
        if size != 2:
            _fail(f"after {_name(kit.driver, 'shrink_share')} from 3 to 2, get_share_status "
                  f"reports size {size!r}")

    # Errors are driver exceptions -------------------------------------------------------

    @pytest.mark.parametrize("method", ["extend_share", "shrink_share"])
    def test_resize_of_unknown_share_is_a_driver_error(self, kit: _Kit, method: str) -> None:
        kit.expect_error(method, kit.share_dict(size=2), 2, kit.server,
                         what="a share the backend never had")

    def test_snapshot_of_unknown_share_is_a_driver_error(self, kit: _Kit) -> None:
        snap = kit.snapshot_dict(kit.share_dict())
        kit.expect_error("create_snapshot", snap, kit.server,
                         what="a share the backend never had")

    def test_share_from_unknown_snapshot_is_a_driver_error(self, kit: _Kit) -> None:
        snap = kit.snapshot_dict(kit.share_dict())
        kit.expect_error("create_share_from_snapshot", kit.share_dict(snapshot=snap), snap,
                         kit.server, what="a snapshot the backend never had")

    # Snapshots, replicas, backups ---------------------------------------------------------

    def test_share_from_snapshot_is_reported(self, kit: _Kit) -> None:
        snap = kit.create("snapshot")
        share = kit.share_dict(size=snap["size"], snapshot=snap)
        locations = kit.ok("create_share_from_snapshot", share, snap, kit.server,
                           what="a new share from an existing snapshot")
        check_export_locations(kit.driver, "create_share_from_snapshot", locations)
        status = kit.status("get_share_status", share, "a share created from a snapshot")
        if status is not None and status["status"] != "available":
            _fail(f"get_share_status of a share created from a snapshot says "
                  f"{status['status']!r}, not 'available'")

    def _poll(self, kit: _Kit, method: str, *args: Any) -> None:
        last = -1
        for _ in range(self.backup_max_polls):
            result = kit.ok(method, *args, what="a running backup")
            progress = result.get("total_progress") if isinstance(result, dict) else None
            try:
                if progress is None:
                    raise TypeError("no total_progress")
                value = int(progress)
            except (TypeError, ValueError):
                _fail(f"{_name(kit.driver, method)} returned {result!r}; it must return "
                      "{'total_progress': '0'..'100'}")
            if not 0 <= value <= 100 or value < last:
                _fail(f"{_name(kit.driver, method)} reported progress {progress!r} after "
                      f"{last}; progress runs from 0 to 100 and never goes back")
            if value == 100:
                return
            last = value
            if self.backup_poll_wait:
                self.backup_poll_wait()
        _fail(f"{_name(kit.driver, method)} did not reach 100 in {self.backup_max_polls} "
              "calls")

    def test_backup_and_restore_reach_100(self, kit: _Kit) -> None:
        backup = kit.create("backup")
        share = backup.pop("share")
        self._poll(kit, "create_backup_continue", share, backup)
        kit.ok("restore_backup", backup, share, what="a finished backup")
        self._poll(kit, "restore_backup_continue", backup, share)

    # Access rules ------------------------------------------------------------------------

    def _update_access(self, kit: _Kit, share: dict, rules: list[dict], add: list[dict],
                       delete: list[dict], what: str) -> None:
        method = "update_access"
        result = kit.ok(method, share, rules, add, delete, kit.server, what=what)
        if result is None:
            return
        name = _name(kit.driver, method)
        given = {r["id"] for r in rules}
        if not isinstance(result, dict) or set(result) - given or not all(
                isinstance(v, dict) and v.get("state") == "error" for v in result.values()):
            _fail(f"{name} for {what} returned {result!r}; it must return None or "
                  "{rule id: {'state': 'error'}} for rules of the full set it refused")

    def _rules_on_backend(self, kit: _Kit, share: dict, expected: list[dict], rule: str
                          ) -> None:
        seen = self.backend_access_rules(kit.driver, share)
        want = {(r["access_type"], r["access_to"], r["access_level"]) for r in expected}
        if seen is not None and set(seen) != want:
            _fail(f"{_name(kit.driver, 'update_access')} {rule}: the backend applies "
                  f"{sorted(seen)}, not {sorted(want)}")

    def test_update_access_applies_the_full_rule_set_idempotently(self, kit: _Kit) -> None:
        if _inherits(kit.driver, "update_access"):
            _unsupported(kit.driver, "update_access")
        share = kit.create_share()
        r1 = {"id": str(uuid.uuid4()), "access_type": "ip", "access_to": "10.0.0.1",
              "access_level": "rw"}
        r2 = {"id": str(uuid.uuid4()), "access_type": "ip", "access_to": "10.0.0.2",
              "access_level": "ro"}
        self._update_access(kit, share, [r1, r2], [r1, r2], [], "two new rules")
        self._rules_on_backend(kit, share, [r1, r2], "did not apply two new rules")
        self._update_access(kit, share, [r1, r2], [], [],
                            "the same full set again with nothing added or deleted")
        self._rules_on_backend(kit, share, [r1, r2], "is not idempotent: after the same full "
                               "set again with nothing added or deleted")
        self._update_access(kit, share, [r2], [], [r1], "one rule denied")
        self._rules_on_backend(kit, share, [r2], "did not deny a rule in delete_rules")
        # Recovery after a crash: the full set with nothing added or deleted is
        # authoritative, whatever the backend held.
        self._update_access(kit, share, [r1, r2], [], [],
                            "a full set of two rules with nothing added or deleted")
        self._rules_on_backend(kit, share, [r1, r2], "ignores the full rule set: called with "
                               "two rules and nothing added or deleted (recovery)")

    # Capabilities -------------------------------------------------------------------------

    def test_share_stats_have_the_documented_shape(self, kit: _Kit) -> None:
        method = "get_share_stats"
        name = _name(kit.driver, method)
        stats = kit.ok(method, True, what="the backend")
        if stats == {}:
            _skip(kit.driver, method, f"{name} reports nothing (an empty dict)")
        if not isinstance(stats, dict):
            _fail(f"{name} returned {stats!r}; it must return a dict")
        kinds = {"share_backend_name": str, "vendor_name": str, "driver_version": str,
                 "storage_protocol": str, "driver_handles_share_servers": bool,
                 "snapshot_support": bool, "create_share_from_snapshot_support": bool,
                 "share_group_support": bool, "pools": list}
        missing = sorted((set(kinds) | {"replication_type"}) - set(stats))
        if missing:
            _fail(f"{name} returned no {', '.join(missing)}; see ShareDriver.get_share_stats")
        for key, kind in kinds.items():
            if not isinstance(stats[key], kind):
                _fail(f"{name} returned {key} = {stats[key]!r}; it must be a {kind.__name__}")
        if stats["driver_handles_share_servers"] != kit.driver.driver_handles_share_servers:
            _fail(f"{name} says driver_handles_share_servers is "
                  f"{stats['driver_handles_share_servers']!r}, the configuration says "
                  f"{kit.driver.driver_handles_share_servers!r}")
        if stats["replication_type"] not in (None, "readable", "writable", "dr"):
            _fail(f"{name} returned replication_type = {stats['replication_type']!r}; it must "
                  "be None, 'readable', 'writable' or 'dr'")
        # Manila's shape: pools, or (a backend without pools) the capacity at
        # the top; a capacity is a number of GiB, or 'infinite' / 'unknown'.
        def capacity(value: Any) -> bool:
            return value in CAPACITY_WORDS or (
                isinstance(value, numbers.Real) and not isinstance(value, bool))

        if not stats["pools"] and not all(
                capacity(stats.get(k)) for k in ("total_capacity_gb", "free_capacity_gb")):
            _fail(f"{name} returned no pools and no total_capacity_gb / free_capacity_gb; "
                  "a backend without pools reports its capacity at the top")
        for pool in stats["pools"]:
            if not isinstance(pool, dict) or not isinstance(pool.get("pool_name"), str) or any(
                    not capacity(pool.get(k)) for k in ("total_capacity_gb", "free_capacity_gb")):
                _fail(f"{name} returned the pool {pool!r}; each must have a 'pool_name' string "
                      "and a 'total_capacity_gb' and 'free_capacity_gb' (GiB, or 'infinite' or "
                      "'unknown')")

    # Share servers ---------------------------------------------------------------------------

    def test_dhss_share_needs_a_share_server(self, kit: _Kit) -> None:
        if not kit.driver.driver_handles_share_servers:
            _skip(kit.driver, None, f"{type(kit.driver).__name__}: only with "
                  "driver_handles_share_servers = True")
        kit.expect_error("create_share", kit.share_dict(), None,
                         what="a share without a share server on a DHSS backend")
