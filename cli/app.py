"""``sharectl``: the command line for operators, playbooks and tests (cliff)."""

from __future__ import annotations

import argparse
import gc
import logging  # cliff configures the stdlib root logger; this tunes that
import sys
from typing import TYPE_CHECKING

from cliff.app import App
from cliff.commandmanager import CommandManager
from sharemgr.cli import commands

if TYPE_CHECKING:
    from cliff.command import Command
    from sharemgr.cli.context import Context


class SharectlApp(App):
    def __init__(self) -> None:
        manager = CommandManager("sharemgr.sharectl")
        for name, factory in commands.COMMANDS.items():
            manager.add_command(name, factory)
        super().__init__(
            description="sharemgr command line: resources, stacks, reconciliation, services.",
            version=_version(),
            command_manager=manager,
            deferred_help=True,
        )
        self._context: Context | None = None

    def build_option_parser(
        self, description: str | None, version: str | None,
        argparse_kwargs: dict[str, object] | None = None
    ) -> argparse.ArgumentParser:
        parser = super().build_option_parser(description, version, argparse_kwargs)
        parser.add_argument(
            "--config-file",
            metavar="FILE",
            help="sharemgr config file (default: $SHAREMGR_CONFIG, then oslo.config's "
            "search path for sharemgr.conf).",
        )
        return parser

    def configure_logging(self) -> None:
        super().configure_logging()
        if self.options.verbose_level < 2:
            # alembic and stack preparation narrate at INFO (for the daemon's
            # log); keep sharectl's output clean.
            for name in ("alembic", "sharemgr.convergence.prepare"):
                logging.getLogger(name).setLevel(logging.WARNING)
            # tooz's stevedore look-up of an unknown backend logs its own
            # line before the error sharectl prints: one line is enough.
            logging.getLogger("stevedore").setLevel(logging.CRITICAL)

    @property
    def context(self) -> Context:
        """Config, database and coordination, opened on first use so that
        ``--help`` needs none of them."""
        if self._context is None:
            from sharemgr.cli.context import Context

            self._context = Context(self.options.config_file)
        return self._context

    def clean_up(self, cmd: Command, result: int, err: BaseException | None) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None


def _version() -> str:
    from sharemgr.common.version import version

    return version()


def main(argv: list[str] | None = None) -> int:
    # A call is short and makes little cyclic garbage; the collector's passes
    # over what its imports build cost a tenth of it (doc/performance.rst).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return SharectlApp().run(sys.argv[1:] if argv is None else argv)
    finally:
        if enabled:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
