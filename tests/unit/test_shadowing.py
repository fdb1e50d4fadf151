"""No function of the package names a local (a parameter, an assignment, a
loop variable) after one of the package's modules it imports and also
reads an attribute of by that name: ``hosts = sorted(hosts.host_of(…) …)``
reads the local, not the module, and fails only when the line runs
(``migration_plans.destination_for`` did so, in the functional tests
alone; neither mypy nor ruff reports it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "common", "convergence", "daemon", "db", "drivers", "manager", "reconcile")


def shadowed(source: str) -> list[tuple[str, int, str]]:
    """(function, line, name) for each local named after an imported
    package module whose attributes the function reads."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sharemgr")
               for alias in node.names}
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = fn.args
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        read = {n.value.id for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        found += [(fn.name, fn.lineno, name) for name in sorted(local & modules & read)]
    return found


def test_no_local_hides_a_module_it_reads() -> None:
    hits = {str(path.relative_to(ROOT)): found
            for folder in PACKAGES for path in sorted((ROOT / folder).rglob("*.py"))
            if (found := shadowed(path.read_text()))}
    assert hits == {}


def test_the_scan_finds_the_shape_that_failed() -> None:
    source = '''
from sharemgr.manager import hosts, views

def destination_for(db, backend):
    hosts = sorted(hosts.host_of(r) for r in db if hosts.backend_of(r) == backend)
    return hosts[0]

def fine(rows):
    serving = [hosts.host_of(r) for r in rows]
    views = 1  # a local named after a module it does not read: no harm
    return serving, views
'''
    assert shadowed(source) == [("destination_for", 4, "hosts")]
