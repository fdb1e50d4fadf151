"""A reader finds a module's tests (doc/testing.rst): every source module has
``tests/unit/<package>/test_<module>.py`` or ``tests/functional/test_<module>.py``,
or is listed in ``COVERED_BY`` with the test files that cover it; no test
module is over 600 lines, and no source module over 500."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "common", "convergence", "daemon", "db", "drivers", "manager", "reconcile")
MAX_LINES = 600
# A source module past this does more than one job: split it by job.
MAX_SOURCE_LINES = 500

# Modules tested through others, by the behaviour they take part in: the test
# files that cover each. A module that gets a test file named after it leaves
# this table (a test below says so).
UNIT, FUNC = "tests/unit/", "tests/functional/"
WORKER = (UNIT + "convergence/test_worker.py", UNIT + "convergence/test_worker_recovery.py")
LOCAL = (UNIT + "drivers/local/test_driver.py", FUNC + "test_local_driver.py")
COVERED_BY: dict[str, tuple[str, ...]] = {
    # sharectl, run as a process by the functional tests
    "cli/access_cmds.py": (FUNC + "test_access.py",),
    "cli/app.py": (FUNC + "test_operations.py", FUNC + "test_rolling_upgrade.py"),
    "cli/capability_cmds.py": (FUNC + "test_capabilities.py",),
    "cli/commands.py": (FUNC + "test_operations.py",),
    "cli/context.py": (FUNC + "test_operations.py",),
    "cli/db_cmds.py": (FUNC + "test_rolling_upgrade.py", FUNC + "test_daemon.py"),
    "cli/manage_cmds.py": (FUNC + "test_manage.py",),
    "cli/message_cmds.py": (FUNC + "test_operations.py", FUNC + "test_reconcile.py"),
    "cli/migration_cmds.py": (FUNC + "test_migration.py",),
    "cli/nouns.py": (UNIT + "db/test_status_reads.py", FUNC + "test_operations.py"),
    "cli/reconcile_cmds.py": (FUNC + "test_reconcile.py", FUNC + "test_drift_and_hung_calls.py"),
    "cli/resource_cmds.py": (FUNC + "test_operations.py",),
    "cli/service_cmds.py": (UNIT + "db/test_services.py",),
    "cli/stack_cmds.py": (FUNC + "test_stacks.py", FUNC + "test_stacks_hang.py"),
    "cli/stack_keep_cmds.py": (FUNC + "test_stack_keep.py",),
    "common/messages.py": (UNIT + "db/test_messages.py",),
    "common/tasks.py": (FUNC + "test_limits_races_and_logged_errors.py",),
    "common/version.py": (UNIT + "test_packaging.py",),
    "common/vocab.py": (UNIT + "test_column_lengths.py",),
    # a node's check, step by step, and the watchdog
    "convergence/act.py": WORKER,
    "convergence/decide.py": WORKER,
    "convergence/engine.py": WORKER,
    "convergence/lifecycle.py": (*WORKER, UNIT + "convergence/test_prepare.py"),
    "convergence/node_check.py": WORKER,
    "convergence/physical.py": WORKER,
    "convergence/properties.py": (UNIT + "convergence/test_template.py",),
    # a template's parts, through parse (test_template)
    "convergence/dependency_order.py": (UNIT + "convergence/test_template.py",),
    "convergence/intrinsics.py": (UNIT + "convergence/test_template.py",),
    "convergence/resource_types.py": (UNIT + "convergence/test_template.py",),
    "convergence/template_model.py": (UNIT + "convergence/test_template.py",
                                      UNIT + "convergence/test_groups.py"),
    "convergence/template_validation.py": (UNIT + "convergence/test_template.py",
                                           UNIT + "convergence/test_groups.py"),
    "convergence/report.py": (UNIT + "convergence/test_worker.py",),
    "convergence/points.py": (UNIT + "convergence/test_worker.py",),
    # batches begun together: a crash at each of their boundaries
    "convergence/chained.py": (UNIT + "convergence/test_worker.py",
                               UNIT + "test_convergence_properties.py"),
    "convergence/tracking.py": WORKER,
    "daemon/backends.py": (UNIT + "db/test_services.py", FUNC + "test_daemon_lifecycle.py"),
    "daemon/database.py": (UNIT + "db/test_engine.py", FUNC + "test_daemon.py"),
    "daemon/heal.py": (UNIT + "common/test_outage.py", FUNC + "test_drift_and_hung_calls.py"),
    "daemon/service.py": (FUNC + "test_daemon.py", FUNC + "test_daemon_lifecycle.py"),
    "daemon/systemd.py": (UNIT + "common/test_outage.py", FUNC + "test_daemon_lifecycle.py"),
    "db/migrations/env.py": (UNIT + "db/test_migration.py",),
    "db/inserts.py": (UNIT + "db/test_api.py", UNIT + "db/test_share_gone.py"),
    "db/given_rows.py": (UNIT + "db/test_api.py",),
    "db/new_stack_rows.py": (UNIT + "convergence/test_prepare.py",),
    "db/notify.py": (FUNC + "test_wakeups.py",),
    "db/request_queue.py": (UNIT + "db/test_api.py", UNIT + "db/test_claim_plan.py"),
    "db/leases.py": (UNIT + "manager/test_leases.py", UNIT + "test_fencing.py"),
    "db/resource_keys.py": (UNIT + "db/test_messages.py",),
    "db/resource_locks.py": (UNIT + "db/test_stacks.py", *WORKER),
    "db/stack_purge.py": (UNIT + "db/test_stacks.py", UNIT + "db/test_stack_events.py"),
    "db/records.py": (UNIT + "db/test_status_reads.py", UNIT + "db/test_sync_points.py"),
    "db/stack_work.py": (UNIT + "db/test_stacks.py", *WORKER),
    "db/status.py": (UNIT + "common/test_metrics.py",),
    "db/tables.py": (UNIT + "db/test_models.py",),
    "drivers/cephfs/driver.py": (FUNC + "test_cephfs_driver.py", FUNC + "test_cephfs_kit.py"),
    "drivers/cephfs/fencing.py": (FUNC + "test_cephfs_fencing.py",),
    "drivers/cephfs/names.py": (FUNC + "test_cephfs_manage.py",),
    "drivers/cephfs/options.py": (FUNC + "test_cephfs_driver.py",),
    "drivers/cephfs/statuses.py": (FUNC + "test_cephfs_fencing.py", FUNC + "test_cephfs_kit.py"),
    "drivers/cephfs/rados_bridge.py": (UNIT + "drivers/cephfs/test_client.py",
                                       FUNC + "test_cephfs_fencing.py"),
    # ShareDriver's method groups (drivers/base.py inherits them)
    "drivers/backup_methods.py": (UNIT + "drivers/test_base.py",),
    "drivers/manage_methods.py": (UNIT + "drivers/test_base.py", FUNC + "test_manage.py"),
    "drivers/migration_methods.py": (UNIT + "drivers/test_dummy_migration.py",),
    "manager/migration_ops.py": (UNIT + "manager/test_migration.py", FUNC + "test_migration.py"),
    "manager/migration_continue.py": (UNIT + "manager/test_migration.py",
                                      UNIT + "manager/test_migration_host.py"),
    "manager/migration_rows.py": (UNIT + "manager/test_migration.py",),
    "convergence/migrate.py": (FUNC + "test_stack_migration.py",),
    "manager/migration_plans.py": (UNIT + "manager/test_migration.py",),
    "drivers/read_methods.py": (UNIT + "drivers/test_base.py", UNIT + "common/test_metrics.py"),
    "drivers/dummy_calls.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/dummy_access.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/dummy_cli.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/dummy_options.py": (UNIT + "drivers/test_dummy.py", UNIT + "manager/test_config.py"),
    "drivers/dummy_reads.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/kit_build.py": (UNIT + "drivers/test_testing.py", FUNC + "test_driver_kit.py"),
    "drivers/kit_calls.py": (UNIT + "drivers/test_testing.py", FUNC + "test_driver_kit.py"),
    "drivers/kit_manage.py": (UNIT + "drivers/test_dummy.py", FUNC + "test_driver_kit.py"),
    "drivers/kit_report.py": (UNIT + "drivers/test_testing.py", FUNC + "test_driver_kit.py"),
    "drivers/kit_replicas.py": (UNIT + "drivers/test_dummy.py",
                                UNIT + "drivers/test_example_plugin.py",
                                FUNC + "test_local_driver_kit.py"),
    # Types only: the type checker reads them (test_types runs it).
    "drivers/shapes.py": (UNIT + "test_types.py", UNIT + "drivers/test_base.py"),
    "common/jsontypes.py": (UNIT + "test_types.py",),
    "common/outcome.py": (UNIT + "db/test_stacks.py", UNIT + "convergence/test_worker.py"),
    "daemon/parts.py": (UNIT + "daemon/test_health.py", FUNC + "test_daemon.py"),
    "drivers/dummy_knobs.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/dummy_state.py": (UNIT + "drivers/test_dummy.py",),
    "drivers/exceptions.py": (UNIT + "drivers/test_base.py", UNIT + "drivers/test_testing.py"),
    "drivers/local/bus.py": (*LOCAL, FUNC + "test_local_driver_drift.py"),
    "drivers/local/commands.py": LOCAL,
    "drivers/local/exports.py": (*LOCAL, FUNC + "test_local_access.py"),
    "drivers/local/fencing.py": LOCAL,
    "drivers/local/ganesha.py": LOCAL,
    "drivers/local/images.py": LOCAL,
    "drivers/local/options.py": LOCAL,
    "drivers/local/process.py": LOCAL,
    "drivers/local/reads.py": (*LOCAL, FUNC + "test_local_driver_drift.py"),
    "drivers/local/records.py": LOCAL,
    "drivers/local/samba.py": LOCAL,
    "drivers/local/serving.py": (*LOCAL, FUNC + "test_local_driver_drift.py"),
    "drivers/local/validation.py": LOCAL,
    "drivers/options.py": (UNIT + "drivers/test_loader.py", UNIT + "manager/test_config.py"),
    "drivers/timing.py": (UNIT + "common/test_metrics.py",),
    "manager/backup_ops.py": (UNIT + "test_force_delete.py", FUNC + "test_operations.py"),
    "manager/coordination.py": (UNIT + "test_fencing.py", UNIT + "manager/test_config.py"),
    "manager/delete_plans.py": (UNIT + "test_force_delete.py",
                                UNIT + "manager/test_replica_ops.py"),
    "manager/ensure.py": (UNIT + "manager/test_access.py",
                          FUNC + "test_limits_races_and_logged_errors.py"),
    "manager/handlers.py": (UNIT + "manager/test_operation_table.py", FUNC + "test_operations.py"),
    "manager/driver_args.py": (UNIT + "manager/test_operation_table.py",
                               UNIT + "test_force_delete.py", FUNC + "test_operations.py"),
    "manager/successes.py": (UNIT + "manager/test_clone_poll.py", UNIT + "test_force_delete.py",
                             FUNC + "test_operations.py"),
    "manager/access_sync.py": (UNIT + "manager/test_access.py", FUNC + "test_access.py"),
    "manager/kinds.py": (UNIT + "test_column_lengths.py",),
    "manager/lock_names.py": (UNIT + "reconcile/test_reconciler_locks_and_failures.py",),
    "manager/membership.py": (UNIT + "test_fencing.py",),
    "manager/op_errors.py": (UNIT + "test_force_delete.py",
                             UNIT + "manager/test_outage_in_call.py"),
    "manager/options.py": (UNIT + "manager/test_config.py",),
    "manager/outage.py": (UNIT + "common/test_outage.py",),
    "manager/plans.py": (UNIT + "test_force_delete.py", UNIT + "manager/test_capabilities.py"),
    "manager/share_ops.py": (FUNC + "test_operations.py", UNIT + "manager/test_access.py"),
    "manager/views.py": (UNIT + "reconcile/test_reconciler_batches.py",),
    "reconcile/answers.py": (UNIT + "reconcile/test_reconciler.py", UNIT + "test_sizes.py"),
    "reconcile/ask.py": (UNIT + "reconcile/test_reconciler_batches.py",),
    "reconcile/outcomes.py": (UNIT + "reconcile/test_reconciler.py",
                              UNIT + "reconcile/test_reconciler_batches.py"),
    "reconcile/rules.py": (UNIT + "reconcile/test_reconciler.py",
                           UNIT + "manager/test_operation_table.py"),
    "reconcile/scan.py": (UNIT + "reconcile/test_reconciler_skips.py",
                          UNIT + "reconcile/test_reconciler_locks_and_failures.py"),
    "reconcile/stack_check.py": (FUNC + "test_drift_and_hung_calls.py",),
    "reconcile/status_query.py": (UNIT + "reconcile/test_reconciler_batches.py",
                                  UNIT + "reconcile/test_reconciler.py"),
    "reconcile/summary.py": (UNIT + "common/test_metrics.py",
                             UNIT + "reconcile/test_reconciler_locks_and_failures.py"),
}


def source_modules() -> list[str]:
    """Every module of the packages, as a path from the root, but packages'
    ``__init__.py`` and the migrations' revisions."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name != "__init__.py" and not rel.startswith("db/migrations/versions/"):
                found.append(rel)
    return found


def named_test(module: str) -> str | None:
    """The test file named after a module, if there is one."""
    folder, _, name = module.rpartition("/")
    for candidate in (f"tests/unit/{folder}/test_{name}", f"tests/functional/test_{name}"):
        if (ROOT / candidate).is_file():
            return candidate
    return None


def test_every_module_has_tests_a_reader_finds():
    lost = [m for m in source_modules() if named_test(m) is None and m not in COVERED_BY]
    assert lost == [], ("no tests/unit/<package>/test_<module>.py, no "
                        "tests/functional/test_<module>.py and not in COVERED_BY: "
                        + ", ".join(lost))


def test_the_table_names_modules_and_test_files_that_exist():
    modules = set(source_modules())
    assert sorted(set(COVERED_BY) - modules) == []
    named = {m: named_test(m) for m in COVERED_BY if named_test(m) is not None}
    assert named == {}, "a module with a test file of its own leaves COVERED_BY"
    missing = sorted({f for files in COVERED_BY.values() for f in files
                      if not (ROOT / f).is_file()})
    assert missing == []


def test_no_source_module_is_over_500_lines():
    long = {m: n for m in source_modules()
            if (n := len((ROOT / m).read_text().splitlines())) > MAX_SOURCE_LINES}
    assert long == {}, f"over {MAX_SOURCE_LINES} lines: split them by job"


def test_every_test_folder_is_a_package():
    """Two test modules of one name in two folders need both folders to be
    packages, or pytest cannot import them both."""
    folders = {p.parent for p in (ROOT / "tests").rglob("*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders
                  if not (f / "__init__.py").is_file()) == []


def test_no_test_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "tests").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
