"""sharectl message list / show / delete: what a user's failed or abandoned
request left to read (common/messages.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli import base

if TYPE_CHECKING:
    from sharemgr.db import models

COLUMNS = ("id", "resource_type", "resource_id", "action_id", "detail_id",
           "message_level", "user_message", "created_at", "expires_at", "request_id")


def _values(msg: models.Message) -> tuple[object, ...]:
    from sharemgr.common import messages

    text = messages.user_message(msg.resource_type, msg.action_id, msg.detail_id)
    return tuple(base.fmt(v) for v in (
        msg.id, msg.resource_type, msg.resource_id, msg.action_id, msg.detail_id,
        msg.message_level, text, msg.created_at, msg.expires_at, msg.request_id))


class MessageList(base.Lister):
    """List user messages, newest first (expired ones are not shown)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--resource", metavar="ID",
                            help="a share, snapshot, replica or other resource's id (a "
                                 "share's include its replicas')")
        parser.add_argument("--limit", type=base.whole(1), default=None)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Listed:
        from sharemgr.db import messages as db_messages

        rows = db_messages.message_list(self.app.context.db, parsed_args.resource,
                                        parsed_args.limit)
        return COLUMNS, [_values(m) for m in rows]


class MessageShow(base.ShowOne):
    """Show one user message, with the request's own error as its detail."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help="message id")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> base.Shown:
        from sharemgr.db import messages as db_messages

        msg = db_messages.message_get(self.app.context.db, parsed_args.id)
        if msg is None:
            raise base.UserError(f"no message {parsed_args.id}")
        return COLUMNS + ("detail",), _values(msg) + (msg.detail,)


class MessageDelete(base.Command):
    """Delete a user message."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", help="message id")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from sharemgr.db import messages as db_messages

        if not db_messages.message_delete(self.app.context.db, parsed_args.id):
            raise base.UserError(f"no message {parsed_args.id}")
        print(f"deleted message {parsed_args.id}")
        return base.EXIT_OK


COMMANDS: dict[str, type] = {
    "message list": MessageList,
    "message show": MessageShow,
    "message delete": MessageDelete,
}
