"""The operation table (manager/operation_table.py) against what reads it:
the statuses of each kind, the driver contract, the handlers, the
reconciliation rules."""

from __future__ import annotations

import inspect

import pytest
from sharemgr.common import vocab
from sharemgr.drivers.base import ShareDriver
from sharemgr.manager import driver_args, handlers, kinds, operation_table, operations, successes
from sharemgr.manager.operation_table import TABLE
from sharemgr.manager.plans import Op
from sharemgr.reconcile import rules

from tests.unit.reconcile_harness import from_snapshot, make


@pytest.mark.parametrize("spec", TABLE, ids=lambda s: f"{s.kind}-{s.action}")
def test_a_spec_s_statuses_are_its_kind_s(spec: operation_table.Spec) -> None:
    statuses = vocab.VALID_STATUSES[spec.kind]
    assert set(spec.transient) <= vocab.TRANSIENT_STATUSES
    assert set(spec.transient) <= set(statuses)
    assert not set(spec.starts_from) & vocab.TRANSIENT_STATUSES
    assert set(spec.starts_from) <= set(statuses)
    for status in (spec.success, spec.error):
        assert status is None or status == vocab.DELETED or status in statuses
    if spec.settle is not None:
        assert spec.settle.error in statuses or spec.settle.error == vocab.DELETED


def test_every_transient_status_of_every_kind_is_settled_by_one_spec() -> None:
    settled: dict[tuple[str, str], str] = {}
    for spec in TABLE:
        for status in spec.transient:
            assert (spec.kind, status) not in settled, (spec.key, settled[(spec.kind, status)])
            settled[(spec.kind, status)] = spec.action
    # Statuses no operation here leaves behind and no rule settles: ensuring
    # (ensure-resources runs before the pass), a server's migration (never set).
    unsettled = {vocab.ENSURING, vocab.SERVER_MIGRATING, vocab.SERVER_MIGRATING_TO}
    # A replica shares the share instance's statuses, but nothing here
    # resizes a replicated share, creates a replica from a snapshot or
    # defers a replica's delete.
    not_a_replica_s = {vocab.EXTENDING, vocab.SHRINKING, vocab.CREATING_FROM_SNAPSHOT,
                       vocab.DEFERRED_DELETING, vocab.MIGRATING, vocab.MIGRATING_TO}
    for name, kind in kinds.KINDS.items():
        expected = {s for s in kind.transient if s not in unsettled
                    and not (name == vocab.REPLICA and s in not_a_replica_s)}
        assert {s for k, s in settled if k == name} == expected, name


def test_the_reconciliation_rules_are_the_table_s() -> None:
    for spec in TABLE:
        for status in spec.transient:
            if spec.settle is not None:
                assert rules.RULES[spec.kind][status] is spec.settle
    assert sum(len(r) for r in rules.RULES.values()) == sum(
        len(s.transient) for s in TABLE if s.settle is not None)


def test_every_method_the_table_names_is_a_driver_method() -> None:
    for spec in TABLE:
        for name in (spec.method, spec.settle.method if spec.settle else None):
            if name is not None:
                assert callable(getattr(ShareDriver, name, None)), (spec.key, name)


def test_what_is_carried_out_has_a_handler_and_nothing_else_has() -> None:
    carried = {s.key for s in TABLE if s.carried}
    assert set(handlers.HANDLERS) == carried
    assert set(handlers.OWN) <= carried
    for spec in TABLE:
        if spec.carried and spec.key not in handlers.OWN:
            # The table's path: it needs the driver method's arguments.
            assert handlers.HANDLERS[spec.key] is operations.by_table
            assert spec.key in driver_args.ARGS, spec.key
            assert spec.error is not None and spec.transient, spec.key
    assert set(successes.DONE) <= carried - set(handlers.OWN)
    assert set(driver_args.ARGS) <= carried - set(handlers.OWN)


GENERIC = [s for s in TABLE if s.carried and s.key not in handlers.OWN]


@pytest.mark.parametrize("spec", GENERIC, ids=lambda s: f"{s.kind}-{s.action}")
def test_the_generic_path_passes_a_driver_method_what_its_contract_names(
        engine, spec: operation_table.Spec) -> None:
    """The arguments built from a real row bind to the ShareDriver method's
    signature (drivers/base.py: the contract third-party drivers implement)."""
    for status in spec.transient:
        row = make(engine.db, spec.kind, status)
        if status == vocab.CREATING_FROM_SNAPSHOT:
            from_snapshot(engine.db, row)
        read, parent = driver_args.READS.get(spec.key), None
        if read is not None:  # the re-read that brings the share with the instance
            with engine.db.reading() as session:
                found, parent = read(session, row.id)
            assert found is not None
            row = found
        method = spec.method_of(status)
        assert method is not None
        args = driver_args.ARGS[spec.key](engine.db, Op(spec.kind, row.id, spec.action), row,
                                          parent)
        inspect.signature(getattr(ShareDriver, method)).bind(None, *args)


def test_deletes_start_from_settled_statuses_and_are_forcible() -> None:
    for spec in TABLE:
        if spec.action == vocab.ACTION_DELETE:
            assert spec.forcible and spec.success == vocab.DELETED
            assert spec.transient[0] == vocab.DELETING
            assert spec.settle is not None and spec.settle.action == rules.DELETE


def test_each_status_a_call_may_find_names_its_method() -> None:
    """``Spec.methods`` is read as data where a call's lease is chosen, for
    each status it expects (its transients, the error status a forced
    delete finishes from): every one is there, and a create from a snapshot
    names its own method."""
    for spec in TABLE:
        for status in (*spec.transient, *spec.starts_from, *([spec.error] if spec.error else [])):
            assert spec.methods[status] == dict(spec.method_when).get(status, spec.method)
    create = operation_table.spec(vocab.SHARE_INSTANCE, vocab.ACTION_CREATE)
    assert create.methods[vocab.CREATING] == "create_share"
    assert create.methods[vocab.CREATING_FROM_SNAPSHOT] == "create_share_from_snapshot"
