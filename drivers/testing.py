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
import numbers
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sharemgr.common import vocab
from sharemgr.drivers.base import BATCH_STATUS_METHODS, STATUS_METHODS, ShareDriver
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.kit_build import KIT_ENGINE, KIT_HOST, build_driver
from sharemgr.drivers.kit_calls import (
    CAPACITY_WORDS,
    KINDS,
    STATUS_KIND,
    Kit,
    check_export_locations,
)
from sharemgr.drivers.kit_manage import ManageChecks
from sharemgr.drivers.kit_replicas import ReplicaChecks
from sharemgr.drivers.kit_report import (
    DriverSkip,
    SkipLocations,
    fail,
    inherits,
    method_name,
    skip,
    unsupported,
)
from sharemgr.drivers.shapes import AccessRule, Share

# The kit's parts live in kit_build, kit_calls and kit_report; these are the
# names a driver's test suite imports from here.
__all__ = ["CAPACITY_WORDS", "KINDS", "KIT_ENGINE", "KIT_HOST", "STATUS_KIND",
           "DriverConformanceTests", "DriverSkip", "build_driver", "check_export_locations"]
_Kit = Kit  # tests/unit/drivers/test_testing.py drives the kit directly


class DriverConformanceTests(ManageChecks, ReplicaChecks):
    """Checks of the ShareDriver contract (manage and unmanage: kit_manage.py;
    replicas and revert: kit_replicas.py). Subclass as ``Test...`` and
    implement ``make_driver``; see the module docstring."""

    #: DHSS modes the driver supports; every check runs in each.
    dhss_modes: tuple[bool, ...] = (False,)
    #: The protocol of the shares the checks make.
    share_proto: str = "NFS"
    #: Most ``*_continue`` calls a backup or restore may need to reach 100.
    backup_max_polls: int = 100
    #: Called between ``*_continue`` polls (e.g. ``lambda: time.sleep(1)``).
    backup_poll_wait: Callable[[], None] | None = None
    #: A create from a snapshot that answers ``creating_from_snapshot`` is
    #: asked with ``get_share_status`` this often, this many seconds apart.
    clone_max_polls: int = 120
    clone_poll_seconds: float = 1.0

    def make_driver(self, tmp_path: Path, *, driver_handles_share_servers: bool) -> ShareDriver:
        """Return a new driver whose backend state lives under ``tmp_path``."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_driver(tmp_path, *, "
            "driver_handles_share_servers)"
        )

    def backend_access_rules(self, driver: ShareDriver, share: Share
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
        if not plugins.has_plugin(SkipLocations.NAME):
            plugins.register(SkipLocations(), SkipLocations.NAME)

    @pytest.fixture
    def driver(self, tmp_path: Path, dhss: bool) -> ShareDriver:
        drv = self.make_driver(tmp_path, driver_handles_share_servers=dhss)
        if not isinstance(drv, ShareDriver):
            fail(f"make_driver returned {drv!r}, not a sharemgr.drivers.base.ShareDriver")
        if drv.driver_handles_share_servers is not dhss:
            fail(f"make_driver(driver_handles_share_servers={dhss}) returned a driver whose "
                 f"driver_handles_share_servers is {drv.driver_handles_share_servers!r}")
        for step in ("do_setup", "check_for_setup_error"):
            try:
                getattr(drv, step)()
            except Exception as exc:
                fail(f"{method_name(drv, step)} failed: {type(exc).__name__}: {exc}")
        return drv

    @pytest.fixture
    def kit(self, driver: ShareDriver) -> Kit:
        server = None
        if driver.driver_handles_share_servers:
            server = Kit(driver, None, self.share_proto).create("share_server")
        return Kit(driver, server, self.share_proto)

    # Set-up and information ----------------------------------------------------

    def test_backend_info_is_a_dict(self, kit: Kit) -> None:
        info = kit.ok("get_backend_info", what="the backend", optional=False)
        if not isinstance(info, dict):
            fail(f"{method_name(kit.driver, 'get_backend_info')} returned {info!r}, not a dict")

    def test_ensure_shares_answers_for_given_shares(self, kit: Kit) -> None:
        share = kit.create_share()
        updates = kit.ok("ensure_shares", [share], what="one existing share", optional=False)
        method = method_name(kit.driver, "ensure_shares")
        if not isinstance(updates, dict):
            fail(f"{method} returned {updates!r}; it must return a dict keyed by share id")
        if set(updates) - {share["id"]}:
            fail(f"{method} returned updates for ids it was not given: {sorted(updates)}")
        for update in updates.values():
            if not isinstance(update, dict):
                fail(f"{method} returned the update {update!r}; each must be a dict")
            if "export_locations" in update:
                check_export_locations(kit.driver, "ensure_shares", update["export_locations"])

    # Create, then the status methods report it -----------------------------------

    def test_created_share_is_reported(self, kit: Kit) -> None:
        share = kit.create_share(size=2)
        status = kit.status("get_share_status", share, "a share just created")
        if status is None:
            unsupported(kit.driver, "get_share_status")
        method = method_name(kit.driver, "get_share_status")
        if status["status"] != vocab.AVAILABLE:
            fail(f"{method} of a share just created says {status['status']!r}, "
                 "not 'available'")
        if status.get("size") != 2:
            fail(f"{method} of a share created with size 2 reports size "
                 f"{status.get('size')!r}; it must report 'size'")
        if "export_locations" not in status:
            fail(f"{method} returned {status!r} without 'export_locations'")
        check_export_locations(kit.driver, "get_share_status", status["export_locations"])

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_status_method_reports_created_object(self, kit: Kit, method: str) -> None:
        obj = kit.create(STATUS_KIND[method])
        if kit.status(method, obj, f"a {STATUS_KIND[method]} just created") is None:
            unsupported(kit.driver, method)

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_status_of_unknown_object_is_not_found(self, kit: Kit, method: str) -> None:
        obj = kit.never_created(STATUS_KIND[method])
        kit.expect_not_found(method, obj, kit.server,
                             what=f"a {STATUS_KIND[method]} the backend never had")

    # Batch status methods -----------------------------------------------------------

    @pytest.mark.parametrize("method", STATUS_METHODS)
    def test_batch_status_agrees_with_single(self, kit: Kit, method: str) -> None:
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
            unsupported(kit.driver, batch)
        except ShareBackendException as exc:
            fail(f"{method_name(kit.driver, batch)} of {len(objs)} {kind}s and one the backend "
                 f"never had failed: {type(exc).__name__}: {exc}")
        name = method_name(kit.driver, batch)
        if not isinstance(answers, dict):
            fail(f"{name} returned {answers!r}; it must return a dict keyed by resource id")
        given = {o["id"] for o in [*objs, missing]}
        if set(answers) - given:
            fail(f"{name} returned answers for ids it was not given: "
                 f"{sorted(set(answers) - given)}")
        if missing["id"] in answers and not isinstance(answers[missing["id"]],
                                                       ShareResourceNotFound):
            fail(f"{name} answers {answers[missing['id']]!r} for a {kind} the backend never "
                 "had; the answer must be a ShareResourceNotFound (or the id left out)")
        for obj in objs:
            if obj["id"] not in answers:
                continue  # left out: the manager asks the single method
            answer = answers[obj["id"]]
            single = kit.status(method, obj, f"a {kind} just created")
            if single is None:
                fail(f"{name} answers for a {kind} but {method_name(kit.driver, method)} raises "
                     "NotImplementedError; a batch method needs its single method")
            if answer != single:
                fail(f"{name} answers {answer!r} for a {kind} just created but "
                     f"{method_name(kit.driver, method)} answers {single!r}; they must agree")

    # Deletes are idempotent -----------------------------------------------------------

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_delete_twice_succeeds(self, kit: Kit, kind: str) -> None:
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
                fail(f"{method_name(kit.driver, status_method)} of a deleted {kind} raised "
                     f"{type(exc).__name__}: {exc}; it must raise ShareResourceNotFound")
            else:
                fail(f"{method_name(kit.driver, status_method)} answers {answer!r} for a {kind} "
                     f"after {method_name(kit.driver, KINDS[kind][1])} succeeded; it must raise "
                     "ShareResourceNotFound")
        kit.delete(kind, obj, f"a {kind} that was already deleted")

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_delete_of_never_created_object_succeeds(self, kit: Kit, kind: str) -> None:
        kit.delete(kind, kit.never_created(kind), f"a {kind} the backend never had")

    # Creates are idempotent ------------------------------------------------------------

    @pytest.mark.parametrize("kind", list(KINDS))
    def test_create_twice_returns_the_existing_object(self, kit: Kit, kind: str) -> None:
        """A create retried after a crash (same ids) returns what the first made."""
        obj = kit.create(kind)
        method, args, first = kit.created[obj["id"]]
        name = method_name(kit.driver, method)
        try:
            again = kit.call(method, *copy.deepcopy(args))
        except NotImplementedError:
            unsupported(kit.driver, method)
        except ShareBackendException as exc:
            fail(f"{name} is not idempotent: creating a {kind} the backend already has "
                 f"raised {type(exc).__name__}: {exc}; a create called again with the same "
                 "id must return the existing object")
        if kind in ("share", "replica", "share_server") and again != first:
            fail(f"{name} is not idempotent: creating a {kind} the backend already has "
                 f"returned {again!r}, not what the first create returned ({first!r})")

    # Sizes -----------------------------------------------------------------------------

    def test_extend_to_the_current_size_succeeds(self, kit: Kit) -> None:
        """An extend retried after a crash finds the share at its new size."""
        share = kit.create_share(size=2)
        name = method_name(kit.driver, "extend_share")
        try:
            kit.call("extend_share", share, 2, kit.server)
        except NotImplementedError:
            unsupported(kit.driver, "extend_share")
        except ShareBackendException as exc:
            fail(f"{name} to the size the share already has (2) raised "
                 f"{type(exc).__name__}: {exc}; extending to the current size must succeed")
        status = kit.status("get_share_status", share, "a share extended to its own size")
        if status is not None and status.get("size") != 2:
            fail(f"after {name} of a share of size 2 to 2, get_share_status reports size "
                 f"{status.get('size')!r}")

    def _reported_size(self, kit: Kit, share: Share, after: str) -> object:
        status = kit.status("get_share_status", share, f"a share after {after}")
        if status is None:
            unsupported(kit.driver, "get_share_status")
        return status.get("size")

    def test_extend_changes_reported_size(self, kit: Kit) -> None:
        share = kit.create_share(size=1)
        kit.ok("extend_share", share, 3, kit.server, what="a share of size 1 to 3")
        size = self._reported_size(kit, share, "extend_share to 3")
        if size != 3:
            fail(f"after {method_name(kit.driver, 'extend_share')} from 1 to 3, get_share_status "
                 f"reports size {size!r}")

    def test_shrink_changes_reported_size(self, kit: Kit) -> None:
        share = kit.create_share(size=3)
        kit.ok("shrink_share", share, 2, kit.server, what="a share of size 3 to 2")
        size = self._reported_size(kit, share, "shrink_share to 2")
        if size != 2:
            fail(f"after {method_name(kit.driver, 'shrink_share')} from 3 to 2, get_share_status "
                 f"reports size {size!r}")

    # Errors are driver exceptions -------------------------------------------------------

    @pytest.mark.parametrize("method", ["extend_share", "shrink_share"])
    def test_resize_of_unknown_share_is_a_driver_error(self, kit: Kit, method: str) -> None:
        kit.expect_error(method, kit.share_dict(size=2), 2, kit.server,
                         what="a share the backend never had")

    def test_snapshot_of_unknown_share_is_a_driver_error(self, kit: Kit) -> None:
        snap = kit.snapshot_dict(kit.share_dict())
        kit.expect_error("create_snapshot", snap, kit.server,
                         what="a share the backend never had")

    def test_share_from_unknown_snapshot_is_a_driver_error(self, kit: Kit) -> None:
        snap = kit.snapshot_dict(kit.share_dict())
        kit.expect_error("create_share_from_snapshot", kit.share_dict(snapshot=snap), snap,
                         kit.server, what="a snapshot the backend never had")

    # Snapshots, replicas, backups ---------------------------------------------------------

    def test_share_from_snapshot_is_reported(self, kit: Kit) -> None:
        snap = kit.create("snapshot")
        share = kit.share_dict(size=snap["size"], snapshot=snap)
        answer = kit.ok("create_share_from_snapshot", share, snap, kit.server,
                        what="a new share from an existing snapshot")
        locations = self._created_from_snapshot(kit, share, answer)
        check_export_locations(kit.driver, "create_share_from_snapshot", locations)
        status = kit.status("get_share_status", share, "a share created from a snapshot")
        if status is not None and status["status"] != vocab.AVAILABLE:
            fail(f"get_share_status of a share created from a snapshot says "
                 f"{status['status']!r}, not 'available'")

    def _created_from_snapshot(self, kit: Kit, share: Share, answer: object) -> object:
        """The export locations of a create from a snapshot: its answer's,
        or, when it answered that the copy goes on (``creating_from_snapshot``),
        those of the ``get_share_status`` that reports its end."""
        if not isinstance(answer, dict):
            return answer
        method = method_name(kit.driver, "create_share_from_snapshot")
        status = answer.get("status")
        if status not in (vocab.AVAILABLE, vocab.CREATING_FROM_SNAPSHOT):
            fail(f"{method} returned {answer!r}; its status must be 'available' or "
                 "'creating_from_snapshot'")
        for _ in range(self.clone_max_polls):
            if status == vocab.AVAILABLE:
                return answer.get("export_locations")
            time.sleep(self.clone_poll_seconds)
            polled = kit.status("get_share_status", share, "a share copying from a snapshot")
            if polled is None:
                fail(f"{method} answered 'creating_from_snapshot' but the driver has no "
                     "get_share_status to tell when the copy ends")
            answer, status = polled, polled["status"]
            if status not in (vocab.AVAILABLE, vocab.CREATING_FROM_SNAPSHOT):
                fail(f"get_share_status of a share copying from a snapshot says {status!r}")
        fail(f"a share from a snapshot was still copying after {self.clone_max_polls} polls")

    def _poll(self, kit: Kit, method: str, *args: object) -> None:
        last = -1
        for _ in range(self.backup_max_polls):
            result = kit.ok(method, *args, what="a running backup")
            progress = result.get("total_progress") if isinstance(result, dict) else None
            try:
                if progress is None:
                    raise TypeError("no total_progress")
                value = int(progress)
            except (TypeError, ValueError):
                fail(f"{method_name(kit.driver, method)} returned {result!r}; it must return "
                     "{'total_progress': '0'..'100'}")
            if not 0 <= value <= 100 or value < last:
                fail(f"{method_name(kit.driver, method)} reported progress {progress!r} after "
                     f"{last}; progress runs from 0 to 100 and never goes back")
            if value == 100:
                return
            last = value
            if self.backup_poll_wait:
                self.backup_poll_wait()
        fail(f"{method_name(kit.driver, method)} did not reach 100 in {self.backup_max_polls} "
             "calls")

    def test_backup_and_restore_reach_100(self, kit: Kit) -> None:
        backup = kit.create("backup")
        share = backup.pop("share")
        self._poll(kit, "create_backup_continue", share, backup)
        kit.ok("restore_backup", backup, share, what="a finished backup")
        self._poll(kit, "restore_backup_continue", backup, share)

    # Access rules ------------------------------------------------------------------------

    def _update_access(self, kit: Kit, share: Share, rules: list[AccessRule],
                       add: list[AccessRule], delete: list[AccessRule], what: str) -> None:
        method = "update_access"
        result = kit.ok(method, share, rules, add, delete, kit.server, what=what)
        if result is None:
            return
        name = method_name(kit.driver, method)
        given = {r["id"] for r in rules}
        if not isinstance(result, dict) or set(result) - given or not all(
                isinstance(v, dict) and v.get("state") == vocab.ACCESS_ERROR
                for v in result.values()):
            fail(f"{name} for {what} returned {result!r}; it must return None or "
                 "{rule id: {'state': 'error'}} for rules of the full set it refused")

    def _rules_on_backend(self, kit: Kit, share: Share, expected: list[AccessRule], rule: str
                          ) -> None:
        seen = self.backend_access_rules(kit.driver, share)
        want = {(r["access_type"], r["access_to"], r["access_level"]) for r in expected}
        if seen is not None and set(seen) != want:
            fail(f"{method_name(kit.driver, 'update_access')} {rule}: the backend applies "
                 f"{sorted(seen)}, not {sorted(want)}")

    def test_update_access_applies_the_full_rule_set_idempotently(self, kit: Kit) -> None:
        if inherits(kit.driver, "update_access"):
            unsupported(kit.driver, "update_access")
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

    def test_share_stats_have_the_documented_shape(self, kit: Kit) -> None:
        method = "get_share_stats"
        name = method_name(kit.driver, method)
        stats = kit.ok(method, True, what="the backend")
        if stats == {}:
            skip(kit.driver, method, f"{name} reports nothing (an empty dict)")
        if not isinstance(stats, dict):
            fail(f"{name} returned {stats!r}; it must return a dict")
        kinds = {"share_backend_name": str, "vendor_name": str, "driver_version": str,
                 "storage_protocol": str, "driver_handles_share_servers": bool,
                 "snapshot_support": bool, "create_share_from_snapshot_support": bool,
                 "share_group_support": bool, "pools": list}
        missing = sorted((set(kinds) | {"replication_type"}) - set(stats))
        if missing:
            fail(f"{name} returned no {', '.join(missing)}; see ShareDriver.get_share_stats")
        for key, kind in kinds.items():
            if not isinstance(stats[key], kind):
                fail(f"{name} returned {key} = {stats[key]!r}; it must be a {kind.__name__}")
        if stats["driver_handles_share_servers"] != kit.driver.driver_handles_share_servers:
            fail(f"{name} says driver_handles_share_servers is "
                 f"{stats['driver_handles_share_servers']!r}, the configuration says "
                 f"{kit.driver.driver_handles_share_servers!r}")
        if stats["replication_type"] not in (None, "readable", "writable", "dr"):
            fail(f"{name} returned replication_type = {stats['replication_type']!r}; it must "
                 "be None, 'readable', 'writable' or 'dr'")
        # Manila's shape: pools, or (a backend without pools) the capacity at
        # the top; a capacity is a number of GiB, or 'infinite' / 'unknown'.
        def capacity(value: object) -> bool:
            return value in CAPACITY_WORDS or (
                isinstance(value, numbers.Real) and not isinstance(value, bool))

        if not stats["pools"] and not all(
                capacity(stats.get(k)) for k in ("total_capacity_gb", "free_capacity_gb")):
            fail(f"{name} returned no pools and no total_capacity_gb / free_capacity_gb; "
                 "a backend without pools reports its capacity at the top")
        for pool in stats["pools"]:
            if not isinstance(pool, dict) or not isinstance(pool.get("pool_name"), str) or any(
                    not capacity(pool.get(k)) for k in ("total_capacity_gb", "free_capacity_gb")):
                fail(f"{name} returned the pool {pool!r}; each must have a 'pool_name' string "
                     "and a 'total_capacity_gb' and 'free_capacity_gb' (GiB, or 'infinite' or "
                     "'unknown')")

    # Share servers ---------------------------------------------------------------------------

    def test_dhss_share_needs_a_share_server(self, kit: Kit) -> None:
        if not kit.driver.driver_handles_share_servers:
            skip(kit.driver, None, f"{type(kit.driver).__name__}: only with "
                 "driver_handles_share_servers = True")
        kit.expect_error("create_share", kit.share_dict(), None,
                         what="a share without a share server on a DHSS backend")
