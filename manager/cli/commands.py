"""The sharectl command table: command name → cliff command class."""

from __future__ import annotations

from sharemgr.manager.cli import db_cmds, resource_cmds, service_cmds
from sharemgr.manager.cli.context import Context

__all__ = ["COMMANDS", "Context"]

COMMANDS: dict[str, type] = {
    "db sync": db_cmds.DbSync,
    "db version": db_cmds.DbVersion,
    "service list": service_cmds.ServiceList,
    **resource_cmds.commands_for(),
}
