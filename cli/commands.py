"""The sharectl command table: command name → cliff command class."""

from __future__ import annotations

from sharemgr.cli import (
    access_cmds,
    capability_cmds,
    db_cmds,
    manage_cmds,
    message_cmds,
    migration_cmds,
    reconcile_cmds,
    replica_cmds,
    resource_cmds,
    service_cmds,
    stack_cmds,
    stack_event_cmds,
    stack_keep_cmds,
    status_cmds,
)

__all__ = ["COMMANDS"]

COMMANDS: dict[str, type] = {
    "db sync": db_cmds.DbSync,
    "db version": db_cmds.DbVersion,
    "service list": service_cmds.ServiceList,
    "service cleanup": service_cmds.ServiceCleanup,
    "status": status_cmds.Status,
    **resource_cmds.commands_for(),
    **access_cmds.COMMANDS,
    **manage_cmds.COMMANDS,
    **replica_cmds.COMMANDS,
    **migration_cmds.COMMANDS,
    "reconcile run": reconcile_cmds.ReconcileRun,
    "reconcile show": reconcile_cmds.ReconcileShow,
    "reconcile list": reconcile_cmds.ReconcileList,
    "reconcile drift": reconcile_cmds.ReconcileDrift,
    **stack_cmds.COMMANDS,
    **stack_keep_cmds.COMMANDS,
    **stack_event_cmds.COMMANDS,
    **message_cmds.COMMANDS,
    "backend list": capability_cmds.BackendList,
    "pool list": capability_cmds.PoolList,
}
