"""The cyclic garbage collector's settings for the engine (doc/performance.rst).

CPython collects its youngest generation every 700 allocations (net of
frees) and, every so often, every generation, walking each object the
process holds: SQLAlchemy's, oslo's, tooz's and the drivers' modules and
the traversal's template and graph among them. In a stack of 1,000 shares
its passes took 0.05-0.06 s of the engine's CPU on a quiet machine and
about 0.3 s on a busy one, a full pass alone up to 0.2 s. After start-up
most of those objects live as long as the process, and a node's own
objects die young (the rows it read, the statements' parameters).
So the engine sets a larger youngest generation, where they die before a
pass sees them and fewer reach the older ones, and, once started, freezes
what start-up made (``gc.freeze``): no pass walks it again. Cycles are
still collected; only less often.
"""

from __future__ import annotations

import gc

# Allocations between passes over the youngest generation (CPython: 700),
# and such passes between passes over the next (10), and those between
# full passes (10, and only once the survivors grew by a quarter).
THRESHOLDS = (20_000, 20, 10)


def tune() -> None:
    """The engine's thresholds, set before start-up builds its objects."""
    gc.set_threshold(*THRESHOLDS)


def freeze_started() -> None:
    """Once start-up is over: its garbage collected, the rest left out of
    every later pass."""
    gc.collect()
    gc.freeze()
