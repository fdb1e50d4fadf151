"""Crash chaos for share operations and stacks (issue 11, "Stacks that never hang").

Real ``share-manager`` engines are SIGKILLed (sometimes SIGTERMed) at random
moments, and made to crash inside driver calls with the dummy driver's crash
points, while threads fire random share operations and stack
create/update/delete/rollback through the real ``sharectl``. Then the killing
stops, the engines come back without knobs, everything is given a bounded
time to settle, and every invariant is checked at once (``doc/chaos.rst``):

* no resource in a transient status (creating, deleting, extending, ...);
* no stack IN_PROGRESS; a FAILED stack says why; each stack ends in a state
  its last accepted action allows;
* each COMPLETE stack has exactly one row per resource of its template, each
  with a live, available physical resource matching the template;
* every stack-made object belongs to a row of its stack (no orphaned
  replacement), and a deleted stack leaves nothing behind;
* the dummy backend and the database agree (no orphaned backend object, no
  settled row pointing at nothing);
* no backend create is done twice for one resource, and no delete is done
  again unless the engine of the earlier call died, or a new request asked.

One package for pytest (:func:`run`, see ``test_chaos.py``) and for people::

    python -m tests.functional.chaos --kills 1000 --seed 42 --setup sqlite
    python -m tests.functional.chaos --kills 300 --setup servers

It prints a JSON summary (seed, kills, operations, stacks, time, violations)
and exits 1 when an invariant is violated. Everything is drawn from
``random.Random`` streams derived from the seed: the same seed gives the same
operations, templates, knobs and kill schedule (the interleaving with the
engines still depends on timing).

Its modules: ``options`` (the setups, the engines' options, a run's options
and result), ``templates`` (random stacks and changes), ``reader`` (the
database read directly), ``fleet`` (the engines, killed and restarted),
``operations`` (the operator's sharectl threads), ``checker`` (the
invariants) and ``runner`` (a run, the teardown and the command line). The
names below are what test_chaos.py and faults.py use.
"""


from __future__ import annotations

from sharemgr.drivers.dummy_state import DB_NAME

from tests.functional.chaos.checker import Checker
from tests.functional.chaos.fleet import EngineRecord, Fleet
from tests.functional.chaos.operations import Operator, StackModel
from tests.functional.chaos.options import (
    DELAY_METHODS,
    ENGINE_OPTIONS,
    PG_ADMIN,
    READ_METHODS,
    REDIS_URL,
    Log,
    Options,
    Result,
    reproduce_command,
    utcnow,
)
from tests.functional.chaos.reader import Reader
from tests.functional.chaos.runner import (
    _drop_pg_database,
    _fresh_pg_database,
    main,
    open_narrative,
    run,
    settle,
    teardown,
)
from tests.functional.chaos.templates import explicit_values, mutate_template, random_template

__all__ = [
    "DB_NAME", "DELAY_METHODS", "ENGINE_OPTIONS", "PG_ADMIN", "READ_METHODS", "REDIS_URL",
    "Checker", "EngineRecord", "Fleet", "Log", "Operator", "Options", "Reader", "Result",
    "StackModel", "_drop_pg_database", "_fresh_pg_database", "explicit_values", "main",
    "mutate_template",
    "open_narrative", "random_template", "reproduce_command", "run", "settle", "teardown",
    "utcnow",
]
