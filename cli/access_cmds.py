"""sharectl access allow/deny/list: who may mount a share (Manila's share
access). A rule is queued by the command and applied by the engine that
serves the share; ``--wait`` blocks until it is applied (or denied)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from sharemgr.cli import base
from sharemgr.cli.resource_cmds import _intake, add_wait
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.db import models

COLUMNS = ("id", "access_type", "access_to", "access_level", "state", "access_key", "created_at")


def _rule_state(app: SharectlApp, rule_id: str) -> str:
    from sharemgr.db import api as db_api
    from sharemgr.db import models

    rule = db_api.get(app.context.db, models.ShareAccessRule, rule_id, include_deleted=True)
    return rule.state if rule is not None else vocab.ACCESS_DELETED


def _wait(app: SharectlApp, rule_id: str, timeout: float) -> str:
    """Poll until the rule's change has reached the backend (or failed)."""
    start = time.monotonic()
    while True:
        state = _rule_state(app, rule_id)
        if state not in vocab.ACCESS_IN_FLIGHT:
            return state
        if time.monotonic() - start > timeout:
            raise base.OperationFailed(f"access rule {rule_id} still {state} after "
                                       f"{timeout:.0f}s")
        time.sleep(0.2)


def _row(rule: models.ShareAccessRule) -> tuple[object, ...]:
    return tuple(base.fmt(getattr(rule, c)) for c in COLUMNS)


class AccessAllow(base.ShowOne):
    """Allow a client to mount a share: by IP address or CIDR, user, or
    certificate common name."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("share", metavar="SHARE_ID")
        parser.add_argument("--type", dest="access_type", required=True,
                            choices=vocab.ACCESS_TYPES, help="what --to names")
        parser.add_argument("--to", dest="access_to", required=True, metavar="WHO",
                            help="an IP address or CIDR, a user or group, or a "
                            "certificate's common name")
        parser.add_argument("--level", dest="access_level", default="rw",
                            choices=vocab.ACCESS_LEVELS, help="read-write (default) or "
                            "read-only")
        add_wait(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        a = parsed_args
        rule = _intake(self.app).allow_access(a.share, a.access_type, a.access_to,
                                              a.access_level)
        state = _wait(self.app, rule.id, a.timeout) if a.wait else rule.state
        values = {**{c: getattr(rule, c) for c in COLUMNS}, "state": state}
        result = COLUMNS, tuple(base.fmt(values[c]) for c in COLUMNS)
        if state == vocab.ACCESS_ERROR:
            self.produce_output(parsed_args, *result)
            raise base.OperationFailed(f"access rule {rule.id} ended in state error")
        return result


class AccessDeny(base.Command):
    """Take a rule away: the client may no longer mount the share."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("share", metavar="SHARE_ID")
        parser.add_argument("rule", metavar="RULE_ID")
        add_wait(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        a = parsed_args
        _intake(self.app).deny_access(a.share, a.rule)
        if not a.wait:
            self.app.stdout.write(f"access rule {a.rule}: deny requested\n")
            return 0
        state = _wait(self.app, a.rule, a.timeout)
        if state != vocab.ACCESS_DELETED:
            raise base.OperationFailed(f"access rule {a.rule} ended in state {state}")
        self.app.stdout.write(f"access rule {a.rule} denied\n")
        return 0


class AccessList(base.Lister):
    """List a share's access rules (denied ones are gone)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("share", metavar="SHARE_ID")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import access as db_access
        from sharemgr.manager import plans

        row, _ = plans.share(self.app.context.db, parsed_args.share)
        return COLUMNS, [_row(r) for r in db_access.rules_of(self.app.context.db, row.id)]


COMMANDS: dict[str, type] = {
    "access allow": AccessAllow,
    "access deny": AccessDeny,
    "access list": AccessList,
}
