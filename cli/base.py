"""Shared pieces of the sharectl commands: errors, exit codes, formatting."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from cliff import command, lister, show
from sharemgr.common import vocab

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.db import models

    _Base = command.Command
else:
    _Base = object

EXIT_OK = 0
EXIT_ERROR_STATUS = 1
EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE's


class UserError(Exception):
    """Bad input: one clear message, nothing changed, exit code 2."""


class OperationFailed(Exception):
    """The operation ended in an error status: exit code 1."""


def pass_status(p: models.ReconcilePass) -> str:
    """A reconciliation pass's status as sharectl shows it."""
    if (p.summary or {}).get("failed"):
        return vocab.PASS_FAILED
    return vocab.PASS_FINISHED if p.finished_at else vocab.PASS_RUNNING


def fmt(value: object) -> object:
    if isinstance(value, datetime.datetime):
        return value.isoformat(timespec="seconds")
    return value


def _flat(value: object) -> object:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


STRUCTURED_FORMATS = ("json", "yaml")

# What take_action returns: a Lister's column names and rows, a ShowOne's
# names and values.
Listed = tuple[Sequence[str], Sequence[Sequence[object]]]
Shown = tuple[Sequence[str], Sequence[object]]


# The project's exceptions a command may end with, by module: looked up only
# in modules already imported (one that is not cannot have raised), so a
# command imports just what it uses (SQLAlchemy, tooz) and no more.
_BAD_INPUT = (("sharemgr.manager.plans", "Refused"), ("sharemgr.manager.config", "ConfigError"),
              ("sharemgr.convergence.template", "TemplateError"),
              ("sharemgr.convergence.prepare", "InvalidStackAction"),
              ("sharemgr.db.stacks", "StackExists"), ("sharemgr.db.stacks", "StackNotFound"))
_UNAVAILABLE = (("sharemgr.db.engine", "DatabaseUnavailable"),
                ("sharemgr.manager.coordination", "CoordinationUnavailable"))


def _loaded(names: tuple[tuple[str, str], ...]) -> tuple[type, ...]:
    return tuple(getattr(sys.modules[m], c) for m, c in names if m in sys.modules)


class _Errors(_Base):
    """Turn the project's exceptions into a message and an exit code."""

    app: SharectlApp  # sharectl's, whose ``context`` the commands read

    def get_epilog(self) -> str:
        # cliff's own epilog names the plugin distribution a command comes
        # from, which costs importlib.metadata.packages_distributions(): every
        # installed package's metadata read, about a tenth of a 'share list' call.
        # Every sharectl command comes from sharemgr itself, so that line is
        # never printed; the epilog is the command's own text and its hooks'.
        parts = [self._epilog or ""]
        parts.extend(e for h in self._hooks
                     if h.obj is not None and (e := h.obj.get_epilog()) is not None)
        return "\n\n".join(parts)

    def run(self, parsed_args: argparse.Namespace) -> int:
        try:
            return super().run(parsed_args) or EXIT_OK
        except OperationFailed as exc:
            sys.stderr.write(f"sharectl: {exc}\n")
            return EXIT_ERROR_STATUS
        except BrokenPipeError:
            # The reader stopped reading (``| head -1``): what it read is
            # what it wanted. No message, and none at exit either (the
            # interpreter's flush of stdout would fail the same way); the
            # status a program killed by SIGPIPE has, as coreutils' do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        except Exception as exc:
            if isinstance(exc, (UserError, *_loaded(_BAD_INPUT))):
                sys.stderr.write(f"sharectl: error: {exc}\n")
                return EXIT_BAD_INPUT
            if isinstance(exc, _loaded(_UNAVAILABLE)):
                sys.stderr.write(f"sharectl: error: {exc}\n")
                return EXIT_ERROR_STATUS
            if isinstance(exc, _loaded((("sqlalchemy.exc", "DBAPIError"),))):
                sys.stderr.write(f"sharectl: error: {_database_error(self, exc)}\n")
                return EXIT_ERROR_STATUS
            if self.app.options.debug:
                raise  # cliff prints the traceback
            # A bug: cliff would print the exception's text alone, an empty
            # line for one without (a bare ``assert``).
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            sys.stderr.write(f"sharectl: unexpected error: {text} (--debug shows where)\n")
            return EXIT_ERROR_STATUS


def whole(low: int | None = None, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: a whole number, at least ``low`` when given (a
    ``--limit`` of 0 or less was taken and ignored); ``what`` names it in
    the refusal."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a time in seconds, more than 0 (a timeout of 0 or
    less gave up before the first look)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    if not value > 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text}")
    return value


def _database_error(cmd: _Errors, exc: BaseException) -> str:
    """One line for a failed query: a schema that is missing or behind
    (the usual cause: 'db sync' not run) says so; else the driver's first
    line, without the SQL."""
    from sharemgr.db import migration
    from sharemgr.db.engine import safe_url

    db = cmd.app.context.db
    try:
        runs, why = migration.can_run(db)
    except Exception:
        runs, why = False, "its schema revision cannot be read: run 'sharectl db sync'"
    if not runs:
        return f"database {safe_url(db.url)}: {why}"
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"database error: {type(orig).__name__}: {lines[0] if lines else ''}"


class OnStack(_Errors):
    """A command on one stack, put before its cliff kind
    (``class StackShow(OnStack, ShowOne)``): its parser takes the stack's
    NAME (or id) first, then what :meth:`add_arguments` adds."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="stack name (or id)")
        self.add_arguments(parser)
        return parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        pass


class Command(_Errors, command.Command):
    pass


class Lister(_Errors, lister.Lister):
    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Iterable[Sequence[object]]) -> int:
        # Lists and dicts stay structured in json/yaml, one JSON string elsewhere.
        if parsed_args.formatter not in STRUCTURED_FORMATS:
            data = [tuple(_flat(v) for v in row) for row in data]
        _check_columns(parsed_args, column_names)
        return super().produce_output(parsed_args, column_names, data)


class ShowOne(_Errors, show.ShowOne):
    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Sequence[object]) -> int:
        if parsed_args.formatter not in STRUCTURED_FORMATS:
            data = tuple(_flat(v) for v in data)
        _check_columns(parsed_args, column_names)
        return super().produce_output(parsed_args, column_names, data)


def _check_columns(parsed_args: argparse.Namespace, column_names: Sequence[str]) -> None:
    """A ``-c`` naming no column is the user's mistake: exit 2, as any bad
    input, before anything is printed. cliff drops such a name when another
    is known (a typo's column silently missing), and refuses it (with a
    ValueError, a bug's exit) only when none is: checked here first, its
    refusal is never reached."""
    unknown = [c for c in getattr(parsed_args, "columns", None) or () if c not in column_names]
    if unknown:
        raise UserError(f"no column {', '.join(map(repr, unknown))}: the columns are "
                        f"{', '.join(column_names)}")
