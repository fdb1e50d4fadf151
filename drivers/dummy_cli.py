"""``sharemgr-dummy-backend``: look at and change a dummy backend from outside.

    sharemgr-dummy-backend --state-path DIR list [--kind KIND]
    sharemgr-dummy-backend --state-path DIR calls [--method M] [--resource ID]
    sharemgr-dummy-backend --state-path DIR set ID key=value...
    sharemgr-dummy-backend --state-path DIR remove ID
    sharemgr-dummy-backend --state-path DIR add-share --size N --proto P [--name N]

DIR is a backend's ``dummy_state_path`` or the manager's ``state_path`` (then
every backend under ``DIR/dummy/`` is used; ``--backend`` picks one; ``add-share``
needs exactly one). ``add-share`` puts a share on the backend that no manager
made (for ``sharectl share manage``) and prints it. Output is
JSON on stdout. Bad input prints one line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import NoReturn

from sharemgr.common import vocab
from sharemgr.drivers.dummy_state import DB_NAME, KINDS, BackendState

PROG = "sharemgr-dummy-backend"
EXIT_BAD_INPUT = 2

# What `set` may change, and how a value is read.
_SETTABLE: dict[str, Callable[[str], object]] = {
    "status": str,
    "size": int,
    "name": str,
    "replica_state": str,
    "export_locations": json.loads,
}


class BadInput(Exception):
    """A user mistake: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Inspect or change a dummy share backend.")
    p.add_argument("--state-path", required=True,
                   help="a backend's dummy_state_path, or the manager's state_path")
    p.add_argument("--backend", help="only the backend of this name")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ls = sub.add_parser("list", help="objects on the backend")
    ls.add_argument("--kind", choices=KINDS)
    calls = sub.add_parser("calls", help="the log of driver calls")
    calls.add_argument("--method")
    calls.add_argument("--resource", help="only calls about this resource id")
    st = sub.add_parser("set", help="change an object (drift)")
    st.add_argument("id", help="instance id, logical id or name of the object")
    st.add_argument("changes", nargs="+", metavar="key=value",
                    help=f"keys: {', '.join(_SETTABLE)}")
    rm = sub.add_parser("remove", help="remove an object (drift)")
    rm.add_argument("id", help="instance id, logical id or name of the object")
    add = sub.add_parser("add-share", help="put a share no manager made on the backend")
    add.add_argument("--size", type=int, required=True, help="GiB")
    add.add_argument("--proto", required=True, help="NFS, CIFS, ...")
    add.add_argument("--name")
    return p


def _add_share(states: list[BackendState], size: int, proto: str, name: str | None
               ) -> dict[str, object]:
    if len(states) != 1:
        raise BadInput("add-share: several backends here; pick one with --backend")
    if size < 1:
        raise BadInput(f"--size must be a positive integer, not {size}")
    state = states[0]
    ident = f"unmanaged-{uuid.uuid4()}"
    path = f"unmanaged.{state.backend or 'dummy'}.dummy:/shares/{ident}"
    with state.transaction() as tx:
        obj = tx.insert(id=ident, kind="share", name=name or ident, size=size,
                        status=vocab.AVAILABLE, details={"share_proto": proto.upper()},
                        export_locations=[{"path": path, "is_admin_only": False,
                                           "preferred": True}])
    return {"backend": state.backend, **obj}


def open_states(path: str, backend: str | None = None) -> list[BackendState]:
    """The backend states at ``path`` (a backend folder or a state_path)."""
    if os.path.exists(os.path.join(path, DB_NAME)):
        folders = [path]
    else:
        found = glob.glob(os.path.join(path, "dummy", "*", DB_NAME))
        found += glob.glob(os.path.join(path, "*", DB_NAME))
        folders = sorted({os.path.dirname(f) for f in found})
    states = [BackendState(f) for f in folders]
    if backend is not None:
        states = [s for s in states if s.backend == backend]
    if not states:
        which = f" of backend '{backend}'" if backend else ""
        raise BadInput(f"no dummy backend state{which} under {path}")
    return states


def _parse_changes(changes: list[str]) -> dict[str, object]:
    fields: dict[str, object] = {}
    for change in changes:
        key, sep, raw = change.partition("=")
        if not sep:
            raise BadInput(f"'{change}' is not key=value")
        if key not in _SETTABLE:
            raise BadInput(f"cannot set '{key}'; settable: {', '.join(_SETTABLE)}")
        try:
            fields[key] = _SETTABLE[key](raw)
        except ValueError as exc:
            raise BadInput(f"bad value for {key}: {raw!r} ({exc})")
    if "export_locations" in fields and not isinstance(fields["export_locations"], list):
        raise BadInput("export_locations must be a JSON list")
    return fields


def _one_object(states: list[BackendState], any_id: str, verb: str,
                fields: Mapping[str, object] | None = None) -> dict[str, object]:
    """Change or remove the single object ``any_id`` names."""
    matches = []
    for state in states:
        with state.reading() as tx:
            matches += [(state, obj) for obj in tx.lookup(any_id)]
    if not matches:
        raise BadInput(f"no object with id or name '{any_id}'")
    if len(matches) > 1:
        listing = ", ".join(f"{o['kind']} {o['id']}" for _, o in matches)
        raise BadInput(f"'{any_id}' matches several objects ({listing}); give an instance id")
    state, obj = matches[0]
    # One transaction: a concurrent driver call sees the object before or after.
    with state.transaction() as tx:
        if tx.get(obj["id"]) is None:
            raise BadInput(f"object {obj['id']} is gone")
        if verb == "remove":
            tx.delete(obj["id"])
        else:
            tx.update(obj["id"], **(fields or {}))
            obj = tx.get(obj["id"]) or obj
    return {"backend": state.backend, **obj}


def run(argv: list[str]) -> object:
    """What ``main`` prints as JSON."""
    args = _parser().parse_args(argv)
    states = open_states(args.state_path, args.backend)
    if args.command == "list":
        out = []
        for state in states:
            with state.reading() as tx:
                out += [{"backend": state.backend, **o} for o in tx.objects(args.kind)]
        return out
    if args.command == "calls":
        out = []
        for state in states:
            with state.reading() as tx:
                out += [{"backend": state.backend, **c} for c in tx.calls()]
        out.sort(key=lambda c: (c["time"], c["seq"]))
        if args.method:
            out = [c for c in out if c["method"] == args.method]
        if args.resource:
            out = [c for c in out if c["resource_id"] == args.resource]
        return out
    if args.command == "add-share":
        return _add_share(states, args.size, args.proto, args.name)
    if args.command == "set":
        return _one_object(states, args.id, "set", _parse_changes(args.changes))
    return _one_object(states, args.id, "remove")


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(sys.argv[1:] if argv is None else argv)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        json.dump(result, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Piped into `head` and the like: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
