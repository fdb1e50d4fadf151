"""What a sharectl stack command reads: the stack it names, the template
file with its parameters (``-e`` files, ``-P``), and the options that give
them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sharemgr.cli import base

if TYPE_CHECKING:
    from sharemgr.cli.app import SharectlApp
    from sharemgr.convergence.template import Template
    from sharemgr.db import models


def lookup(app: SharectlApp, name: str) -> models.Stack:
    from sharemgr.db import stacks
    from sharemgr.db.stacks import StackNotFound

    try:
        return stacks.stack_lookup(app.context.db, name)
    except StackNotFound as exc:
        raise base.UserError(str(exc))


def read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise base.UserError(f"cannot read {what} {path}: {exc.strerror or exc}")


def load_template(app: SharectlApp, path: str, args: argparse.Namespace | None = None,
              previous: Template | None = None) -> Template:
    """The template at ``path`` with its parameters: ``-e`` files, then
    ``-P`` (which wins); on an update, a parameter given neither keeps the
    value the stack was last given, if the new template still declares it."""
    import yaml
    from sharemgr.convergence import actions
    from sharemgr.convergence import parameters as params
    from sharemgr.convergence.template import TemplateError
    from sharemgr.manager import intake

    text = read(path, "template")
    environments: list[params.Environment] = []
    for env in (args.environment or ()) if args is not None else ():
        try:
            environments.append(params.read_environment(read(env, "environment")))
        except params.ParameterError as exc:
            raise base.UserError(f"invalid environment {env}: {exc}")
    declared: dict[str, object] | None = None
    if any(e.defaults for e in environments) or (previous is not None
                                                  and previous.parameter_values):
        try:  # libyaml's parser where PyYAML has it (template_yaml.py says why)
            raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
        except yaml.YAMLError:
            raw = None  # parse() below names the error
        if isinstance(raw, dict):  # else parse() below names what is wrong
            found = raw.get("parameters")
            declared = found if isinstance(found, dict) else {}
    given = params.given_values(environments, declared)
    try:
        given.update(params.parse_assignments(args.parameter or []) if args is not None else {})
    except params.ParameterError as exc:
        raise base.UserError(str(exc))
    if previous is not None and previous.parameter_values and declared is not None:
        given = {**{k: v for k, v in previous.parameter_values.items()
                    if k in declared}, **given}
    try:
        template = actions.load_template(text, app.context.conf.enabled_share_backends, given)
        actions.check_references(app.context.db, template)
        conf = app.context.conf
        actions.check_servers(template, {b: intake.handles_servers(conf, b)
                                         for b in conf.enabled_share_backends})
        return template
    except TemplateError as exc:
        raise base.UserError(f"invalid template {path}: {exc}")


def minutes(text: str) -> float:
    from sharemgr.convergence.template import MAX_TIMEOUT_MINUTES

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}")
    if not 0 <= value <= MAX_TIMEOUT_MINUTES:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"must be from 0 to {MAX_TIMEOUT_MINUTES} minutes, got {value}")
    return value


def template_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--template", required=True, metavar="FILE",
                        help="YAML template")
    parser.add_argument("--timeout", type=minutes, default=None, metavar="MINUTES",
                        help="fail (and roll back) the traversal if it runs longer; 0: no "
                        "timeout (default: the template's 'timeout', else the "
                        "stack_timeout_minutes option)")
    parser.add_argument("-P", "--parameter", action="append", metavar="NAME=VALUE",
                        help="a template parameter's value (repeatable; wins over -e)")
    parser.add_argument("-e", "--environment", action="append", metavar="ENV_FILE",
                        help="YAML with 'parameters:' and/or 'parameter_defaults:' "
                        "(repeatable, later files win)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be added, updated in place, replaced, "
                        "deleted or left unchanged, per resource; change nothing")
