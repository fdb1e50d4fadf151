"""Statuses are named in one place: ``common/vocab.py`` (and, for what an
operation starts from, passes through and ends in, the operation table that
reads it, ``manager/operation_table.py``). Nowhere else in the package is a
status written as a string where it is used as one: compared with, passed as
a status or state argument, stored under a status key or in a status
attribute, or given as such a parameter's default. A plain word that happens
to be a status ("error" as a dict key, "failed" in a message) is not a use.

The scan is of the syntax tree, so a test of its own (below) shows it finds
each of those uses. Driver method names are held to the same rule (below)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from sharemgr.common import vocab

from tests.unit.test_types import PACKAGES, ROOT

# Where statuses may be spelled out.
HOMES = {"common/vocab.py", "manager/operation_table.py"}


def _statuses() -> frozenset[str]:
    found: set[str] = set()
    for values in vocab.VALID_STATUSES.values():
        found.update(values)
    found.update(vocab.REQUEST_STATUSES, vocab.STACK_STATUSES, vocab.BACKEND_STATES,
                 vocab.BUSY_TASK_STATES, vocab.DATA_COPYING)
    # A replica's state, an access rule's and a share's rules', a migration's.
    found.update(value for name, value in vars(vocab).items() if isinstance(value, str)
                 and name.startswith(("ACCESS_", "REPLICA_", "MIGRATION_", "DATA_COPYING_")))
    return frozenset(found)


STATUSES = _statuses()


def _named_status(name: str) -> bool:
    name = name.lower()
    return name in ("status", "state") or name.endswith(("_status", "_state", "_statuses",
                                                          "_states"))


def _constants(node: ast.AST) -> Iterator[ast.Constant]:
    """String constants in ``node``: itself, the items of a tuple, list or
    set, or either side of a conditional expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for item in node.elts:
            yield from _constants(item)
    elif isinstance(node, ast.IfExp):
        yield from _constants(node.body)
        yield from _constants(node.orelse)


def _target_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return ""


def status_uses(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each status written as a string where it is used as one."""
    found: list[ast.Constant] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += _constants(side)
        elif isinstance(node, ast.keyword) and node.arg and _named_status(node.arg):
            found += _constants(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                        and _named_status(key.value):
                    found += _constants(value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_named_status(_target_name(t))
                                              for t in targets):
                found += _constants(node.value)
        elif isinstance(node, ast.arguments):
            named = [*node.posonlyargs, *node.args]
            pairs = list(zip(named[len(named) - len(node.defaults):], node.defaults,
                             strict=True))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                      if d is not None]
            for arg, default in pairs:
                if _named_status(arg.arg):
                    found += _constants(default)
    return sorted({(c.lineno, c.value) for c in found if c.value in STATUSES})


def test_no_status_is_spelled_out_outside_the_vocabulary_and_the_table() -> None:
    uses = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel not in HOMES and (found := status_uses(path.read_text())):
                uses[rel] = found
    assert uses == {}, "\n".join(f"{f}: {u}" for f, u in uses.items())


def test_the_scan_finds_each_kind_of_use() -> None:
    source = '''
if row.status == "available": pass
if status in ("creating", "deleting"): pass
update(instance, status="extending_error")
answer = {"status": "in_sync", "error": "boom"}
row.replica_state = "out_of_sync"
def settle(status="error_deleting"): pass
log("failed: error")
outcome = {"state": "active" if ok else "queued_to_deny"}
'''
    assert status_uses(source) == [
        (2, "available"), (3, "creating"), (3, "deleting"), (4, "extending_error"),
        (5, "in_sync"), (6, "out_of_sync"), (7, "error_deleting"), (9, "active"),
        (9, "queued_to_deny")]


# Driver methods ---------------------------------------------------------------------
# The framework names a driver method only through the operation table (a
# spec's ``method``, its status methods, the few second calls it lists):
# every string equal to one is flagged, wherever it stands. drivers/ is the
# methods' own package (base declares them, the dummy's knobs and the
# conformance kit name them by contract), common/ the words users read.
METHOD_HOMES = ("manager/operation_table.py", "drivers/", "common/")


def _driver_methods() -> frozenset[str]:
    from sharemgr.drivers import read_methods
    from sharemgr.drivers.base import ShareDriver

    # The optional status methods are the contract's too, declared by name.
    return frozenset(name for name in dir(ShareDriver)
                     if callable(getattr(ShareDriver, name)) and not name.startswith("_")
                     ) | set(read_methods.STATUS_METHODS) \
        | set(read_methods.BATCH_STATUS_METHODS.values())


DRIVER_METHODS = _driver_methods()


def method_names(source: str) -> list[tuple[int, str]]:
    return sorted({(node.lineno, node.value) for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Constant) and node.value in DRIVER_METHODS})


def test_no_driver_method_is_named_outside_the_table() -> None:
    uses = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if not rel.startswith(METHOD_HOMES) and (found := method_names(path.read_text())):
                uses[rel] = found
    assert uses == {}, "\n".join(f"{f}: {u}" for f, u in uses.items())


def test_the_method_scan_finds_a_name_wherever_it_stands() -> None:
    source = '''
leases.seconds("create_share_from_snapshot")
ARGS = {"delete_snapshot": build}
log_failure(what, "update_access" if access else "extend_share", exc)
getattr(driver, "get_share_status")
'''
    assert method_names(source) == [
        (2, "create_share_from_snapshot"), (3, "delete_snapshot"), (4, "extend_share"),
        (4, "update_access"), (5, "get_share_status")]
    assert "create_share" in DRIVER_METHODS and "get_share_status" in DRIVER_METHODS


def test_the_table_names_each_status_method_of_the_contract() -> None:
    from sharemgr.drivers import read_methods
    from sharemgr.manager import operation_table

    assert sorted(operation_table.STATUS_METHOD.values()) == sorted(read_methods.STATUS_METHODS)
