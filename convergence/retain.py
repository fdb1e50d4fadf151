"""``deletion_policy: retain`` (doc/convergence.rst, "Keeping what matters"):
whether a clean-up node keeps its row's physical resource instead of
deleting it.

The policy is the one of the definition the row embodies: the template of
its ``template_id`` (the row's update node or the preparation's settling
writes it), so removing the resource from a template keeps it, and an
update that drops ``deletion_policy`` first makes it deletable again.
"""

from __future__ import annotations

import weakref

from sharemgr.common import vocab
from sharemgr.convergence import physical as phys
from sharemgr.convergence.template import template_from_dict
from sharemgr.db import models, stacks
from sharemgr.db.engine import Database


def policy_retains(db: Database, row: models.StackResource) -> bool:
    """Whether the definition ``row`` embodies says ``retain``."""
    if row.template_id is None:
        return False
    cache = _CACHE.setdefault(db, {})
    found = cache.get(row.template_id)
    if found is None:
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        found = cache[row.template_id] = _retained(db, row.template_id)
    return (row.name, row.type) in found


# Per database, template id -> its retained (name, type): a stored template
# never changes and its id is never reused, and a stack of 10,000 rows being
# deleted would otherwise parse it for each. Weak: a test's database goes.
_CACHE: weakref.WeakKeyDictionary[Database, dict[int, frozenset[tuple[str, str]]]] = \
    weakref.WeakKeyDictionary()
_CACHE_SIZE = 256


def _retained(db: Database, template_id: int) -> frozenset[tuple[str, str]]:
    stored = stacks.template_get(db, template_id)
    if not stored:
        return frozenset()
    return frozenset((d.name, d.type) for d in template_from_dict(stored).resources.values()
                     if d.retain)


def keeps(db: Database, action: str, row: models.StackResource) -> bool:
    """Whether the clean-up of ``row`` in a traversal of ``action`` keeps
    its physical resource: the policy says retain, the traversal is not a
    ROLLBACK (which undoes what
    a failed action made: never accepted, never kept) and there is a usable
    resource to keep (a failed or vanished one is deleted as before)."""
    if action == vocab.STACK_ROLLBACK or row.physical_id is None:
        return False
    if not policy_retains(db, row):
        return False
    return phys.observe(db, row.type, row.physical_id).state in (phys.OK, phys.BUSY)
