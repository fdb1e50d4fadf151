"""Purging a stack's finished rows: resource rows whose clean-up completed,
templates nothing refers to any more, and the events of a deleted stack."""

from __future__ import annotations

import sqlalchemy as sa
from sharemgr.common import vocab
from sharemgr.db import records, stack_events
from sharemgr.db.stacks import TEMPLATES, Resource, Stack
from sqlalchemy.orm import Session


def purge_templates_tx(session: Session, stack_id: str) -> int:
    """Delete the stack's templates that neither the stack row nor any of its
    resource rows refers to any more (earlier updates, superseded ones)."""
    stack = session.execute(
        sa.select(Stack.template_id, Stack.prev_template_id).where(Stack.id == stack_id)
    ).first()
    keep = {t for t in (stack or ()) if t is not None}
    used = sa.select(Resource.template_id).where(
        Resource.stack_id == stack_id, Resource.template_id.is_not(None)
    )
    stmt = sa.delete(TEMPLATES).where(
        TEMPLATES.c.stack_id == stack_id, TEMPLATES.c.id.not_in(used)
    )
    if keep:
        stmt = stmt.where(TEMPLATES.c.id.not_in(keep))
    return records.rowcount(session.execute(stmt.execution_options(synchronize_session=False)))



def purge_resources_tx(session: Session, stack_id: str) -> int:
    """Delete the rows whose clean-up finished (``DELETE COMPLETE``): replaced
    rows and rows of removed resources. Their ids may linger in other rows'
    ``requires``/``replaces``; the graph ignores ids that are not extant."""
    stmt = sa.delete(Resource).where(
        Resource.stack_id == stack_id, Resource.action == vocab.STACK_DELETE,
        Resource.status == vocab.STACK_COMPLETE,
    )
    return records.rowcount(session.execute(stmt.execution_options(synchronize_session=False)))


def purge_tx(session: Session, stack_id: str) -> tuple[int, int]:
    """Purge finished rows, then templates nothing refers to any more, and
    the events of a stack whose DELETE completed (they go with it).
    Returns (resource rows, templates) deleted."""
    done = purge_resources_tx(session, stack_id), purge_templates_tx(session, stack_id)
    stack_events.delete_gone_tx(session, stack_id)
    return done
