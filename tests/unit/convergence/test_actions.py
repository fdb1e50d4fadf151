"""Starting a traversal of an existing stack (``actions.start``) when
another traversal starts between the stack's read and the start's write: a
DELETE reads the stack again and goes on, an UPDATE is refused with nothing
written (the caller asked it of the stack as it saw it)."""

from __future__ import annotations

import pytest
from sharemgr.convergence import actions, lifecycle, prepare, template
from sharemgr.db import stacks

V1 = template.parse("resources:\n  data: {type: share, properties: {size: 1, proto: NFS}}\n")
V2 = template.parse("resources:\n  data: {type: share, properties: {size: 2, proto: NFS}}\n")


def _stack(db):
    with db.session() as session:
        stack = stacks.stack_create_tx(session, "web")
    lifecycle.prepare_traversal(db, stack, "CREATE", V1)
    return stack.id


def _raced(monkeypatch, times):
    """The next ``times`` reads of a stack by name are each overtaken by
    another client's UPDATE; the traversals those started."""
    read = stacks.stack_lookup
    started = []

    def lookup(db, name_or_id):
        seen = read(db, name_or_id)
        if len(started) < times:
            started.append(lifecycle.prepare_traversal(db, read(db, name_or_id), "UPDATE", V2))
        return seen

    monkeypatch.setattr(stacks, "stack_lookup", lookup)
    return started


def test_a_delete_overtaken_by_an_update_reads_the_stack_again(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, actions.DELETE_TRIES - 1)
    tr = actions.start(db, "web", "DELETE")
    assert len(overtaken) == actions.DELETE_TRIES - 1
    stack = stacks.stack_get(db, stack_id)
    assert (stack.action, stack.current_traversal) == ("DELETE", tr.traversal_id)
    assert tr.traversal_id not in {t.traversal_id for t in overtaken}


def test_a_delete_overtaken_every_time_is_refused(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, actions.DELETE_TRIES)
    with pytest.raises(prepare.TraversalLost):
        actions.start(db, "web", "DELETE")
    stack = stacks.stack_get(db, stack_id)
    assert (stack.action, stack.current_traversal) == ("UPDATE", overtaken[-1].traversal_id)


def test_an_update_overtaken_by_another_is_refused_with_nothing_written(db, monkeypatch):
    stack_id = _stack(db)
    overtaken = _raced(monkeypatch, 1)
    with pytest.raises(prepare.TraversalLost):
        actions.start(db, "web", "UPDATE", V1)
    assert stacks.stack_get(db, stack_id).current_traversal == overtaken[0].traversal_id
