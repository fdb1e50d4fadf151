"""The path a reader follows through the package, as the interpreter runs it:
every call that crosses from one of the package's modules into another
(doc/design.rst, "Two walks"). Test code, the standard library and the
libraries are left out; so is the inside of a module (a call to a function
of the same file is not a step)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "db", "drivers", "manager", "reconcile", "convergence", "cli", "daemon")


def _module(filename: str) -> str | None:
    """The package module a file is, relative to the tree (None: not ours)."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts[0] in PACKAGES else None


@dataclass
class Walk:
    steps: list[tuple[str, str]] = field(default_factory=list)  # (module, function) entered

    def visits(self) -> list[tuple[str, list[str]]]:
        """The steps with a module's consecutive entries as one visit:
        (module, the functions entered in it)."""
        out: list[tuple[str, list[str]]] = []
        for module, function in self.steps:
            if out and out[-1][0] == module:
                out[-1][1].append(function)
            else:
                out.append((module, [function]))
        return out

    def lines(self) -> list[str]:
        """The visits as design.rst writes them: ``module  function, …``."""
        return [f"{module:<32}{', '.join(dict.fromkeys(fns))}" for module, fns in self.visits()]

    def revisited(self) -> dict[str, int]:
        """Modules visited more than once, and how many times."""
        counts: dict[str, int] = {}
        for module, _fns in self.visits():
            counts[module] = counts.get(module, 0) + 1
        return {m: n for m, n in counts.items() if n > 1}

    def modules(self) -> list[str]:
        """The modules entered, in the order first entered."""
        return list(dict.fromkeys(m for m, _f in self.steps))



def trace(fn: Callable[[], object], inside: frozenset[tuple[str, str]] = frozenset(),
          skip: tuple[str, ...] = ("db/",)) -> Walk:
    """Run ``fn`` in this thread and record its walk. What a step named in
    ``inside`` (module, function) calls is left out (a walk of its own, or
    the driver behind its wrapper); so are the modules under ``skip`` (the
    database's, which every step calls). A generator resumed (a ``with``
    block's exit) is not a new step: its frame was entered once."""
    walk = Walk()
    resumed: dict[int, types.FrameType] = {}  # kept alive: an id is not reused meanwhile
    closed: list[types.FrameType] = []  # the ``inside`` step running now, if any

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        if closed:
            if event == "return" and frame is closed[0]:
                closed.clear()
            return
        if event != "call":
            return
        module = _module(frame.f_code.co_filename)
        if module is None or id(frame) in resumed:
            return
        if frame.f_code.co_flags & 0x20:  # CO_GENERATOR: its resumptions call again
            resumed[id(frame)] = frame
        caller = frame.f_back
        while caller is not None and _module(caller.f_code.co_filename) is None:
            caller = caller.f_back
        if caller is None or _module(caller.f_code.co_filename) != module:
            if not module.startswith(skip):
                walk.steps.append((module, frame.f_code.co_name))
        if (module, frame.f_code.co_name) in inside:
            closed.append(frame)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return walk
