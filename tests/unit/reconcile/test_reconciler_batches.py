"""The batch path of reconciliation: a batch's try-locks, its re-read, the
driver's optional batch status method and its fallbacks, and its outcomes
written in one transaction with every row still checked against the status
it was read with. Real database, real tooz file coordinator, real Operations
and Reconciler; the fake driver of the matrix tests (with a batch method
where a test needs one) and the dummy driver."""

from __future__ import annotations

import contextlib

import pytest
from sharemgr.common import vocab
from sharemgr.db import api, models
from sharemgr.drivers.exceptions import ShareBackendException, ShareResourceNotFound
from sharemgr.drivers.testing import build_driver
from sharemgr.manager import views
from sharemgr.manager.operations import lock_name
from sharemgr.reconcile import reconciler, status_query

from tests.unit.reconcile_harness import (
    BACKEND,
    HEALTHY,
    Engine,
    FakeDriver,
    coord_url,
    fetch,
    make_share,
)


class BatchDriver(FakeDriver):
    """The fake driver with ``get_share_statuses``: answers as the single
    method would, for the ids in ``batch_ids`` (None: all), or raises
    ``batch_raises``."""

    def __init__(self) -> None:
        super().__init__(dhss=True)
        self.batch_ids: set[str] | None = None
        self.batch_raises: Exception | None = None
        self.batch_calls: list[list[str]] = []
        self.before_answer = None  # called with the ids, before answering

    def get_share_statuses(self, shares):
        ids = [s["id"] for s, _ in shares]
        self.batch_calls.append(ids)
        if self.before_answer:
            self.before_answer(ids)
        if self.batch_raises is not None:
            raise self.batch_raises
        answers = {}
        for share, server in shares:
            if self.batch_ids is not None and share["id"] not in self.batch_ids:
                continue
            try:
                answers[share["id"]] = FakeDriver.get_share_status(self, share, server)
            except ShareResourceNotFound as exc:
                answers[share["id"]] = exc
        # What the single method recorded for the batch is the batch's call.
        self.calls = [c for c in self.calls if not (c[0] == "get_share_status"
                                                    and c[1] in answers)]
        return answers


@pytest.fixture
def batch_engine(sqlite_db, tmp_path):
    eng = Engine(sqlite_db, coord_url(tmp_path), drivers={BACKEND: BatchDriver()})
    yield eng
    eng.close()


def _statuses(db, rows):
    return [fetch(db, vocab.SHARE_INSTANCE, r.id).status for r in rows]


def _singles(driver):
    return sorted(i for m, i in driver.calls if m == "get_share_status")


def test_batch_size_spreads_over_the_workers_within_the_limits():
    assert reconciler.batch_size(10000, 4, 1024) == reconciler.BATCH_SIZE
    assert reconciler.batch_size(100, 4, 1024) == 25
    assert reconciler.batch_size(10000, 64, 1024) == 16
    assert reconciler.batch_size(10000, 8, 64) == 8  # a coordinator that renews each lock
    assert reconciler.batch_size(0, 4, 1024) == 1


def test_one_batch_call_answers_for_the_whole_batch(batch_engine):
    rows = [make_share(batch_engine.db, vocab.CREATING) for _ in range(6)]
    batch_engine.driver.answers[rows[2].id] = "missing"
    batch_engine.driver.answers[rows[3].id] = "error"
    result = batch_engine.run()
    assert _statuses(batch_engine.db, rows) == [vocab.AVAILABLE] * 2 + [vocab.ERROR] * 2 + \
        [vocab.AVAILABLE] * 2
    assert sorted(i for call in batch_engine.driver.batch_calls for i in call) == \
        sorted(r.id for r in rows)
    assert _singles(batch_engine.driver) == []
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 4, vocab.ERROR: 2}}
    assert result["skipped"] == {} and result["failures"] == 0


def test_rows_changed_meanwhile_in_a_batch_are_skipped_the_others_settled(batch_engine):
    db = batch_engine.db
    rows = [make_share(db, vocab.CREATING) for _ in range(6)]
    changed = {rows[1].id: vocab.AVAILABLE, rows[4].id: vocab.DELETING}
    real_try_lock = batch_engine.coordinator.try_lock

    @contextlib.contextmanager
    def change_then_lock(name):
        for ident, status in changed.items():
            if name == lock_name(vocab.SHARE_INSTANCE, ident):
                assert api.conditional_update(db, models.ShareInstance, ident,
                                              {"status": vocab.CREATING}, {"status": status})
        with real_try_lock(name) as got:
            yield got

    batch_engine.coordinator.try_lock = change_then_lock
    result = batch_engine.run()
    for row in rows:
        want = changed.get(row.id, vocab.AVAILABLE)
        assert fetch(db, vocab.SHARE_INSTANCE, row.id).status == want
    asked = {i for call in batch_engine.driver.batch_calls for i in call}
    assert asked == {r.id for r in rows} - set(changed)
    assert result["skipped"] == {"changed meanwhile": 2}
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 4}}


def test_a_row_changed_during_the_driver_call_loses_only_its_own_update(batch_engine):
    """The outcome is written WHERE status = :seen: a row reset while the
    backend was asked keeps the reset, and the rest of the batch's
    transaction still applies."""
    db = batch_engine.db
    rows = [make_share(db, vocab.CREATING) for _ in range(5)]
    target = rows[2]

    def reset(ids):
        if target.id in ids:
            assert api.conditional_update(db, models.ShareInstance, target.id,
                                          {"status": vocab.CREATING},
                                          {"status": vocab.ERROR})

    batch_engine.driver.before_answer = reset
    result = batch_engine.run()
    statuses = _statuses(db, rows)
    assert statuses == [vocab.AVAILABLE] * 2 + [vocab.ERROR] + [vocab.AVAILABLE] * 2
    assert fetch(db, vocab.SHARE_INSTANCE, target.id).export_locations == []
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 4}}
    assert result["skipped"] == {} and result["failures"] == 0


def test_a_resize_whose_share_row_is_gone_writes_nothing_of_that_resource(batch_engine):
    """A resource's outcome is all or nothing inside the batch's transaction:
    the status may win and the share's size lose; then neither stays."""
    db = batch_engine.db
    rows = [make_share(db, vocab.EXTENDING) for _ in range(3)]
    victim = rows[1]
    real = status_query.healthy_values

    def values(cand, answer):
        got_values, extra = real(cand, answer)
        if cand.id == victim.id:
            extra = [(models.Share, "no-such-share", {}, {"size": 8})]
        return got_values, extra

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(status_query, "healthy_values", values)
        result = batch_engine.run()
    assert _statuses(db, rows) == [vocab.AVAILABLE, vocab.EXTENDING, vocab.AVAILABLE]
    assert api.get(db, models.Share, victim.share_id).size == 5
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 2}}


def test_a_batch_across_a_lock_held_by_another_engine(batch_engine):
    db = batch_engine.db
    rows = [make_share(db, vocab.CREATING) for _ in range(6)]
    peer = batch_engine.peer()
    locked = [rows[0], rows[3]]
    with contextlib.ExitStack() as held:
        for row in locked:
            assert held.enter_context(peer.try_lock(lock_name(vocab.SHARE_INSTANCE, row.id)))
        result = batch_engine.run()
    for row in rows:
        want = vocab.CREATING if row in locked else vocab.AVAILABLE
        assert fetch(db, vocab.SHARE_INSTANCE, row.id).status == want
    asked = {i for call in batch_engine.driver.batch_calls for i in call}
    assert asked == {r.id for r in rows} - {r.id for r in locked}
    assert result["skipped"] == {"locked by another engine": 2}
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 4}}
    # The batch released its locks: a second pass settles the rest.
    again = batch_engine.run()
    assert again["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 2}}
    for row in rows:
        with peer.try_lock(lock_name(vocab.SHARE_INSTANCE, row.id)) as got:
            assert got


def test_a_driver_without_the_batch_method_is_asked_one_by_one(engine):
    rows = [make_share(engine.db, vocab.CREATING) for _ in range(4)]
    engine.driver.answers[rows[1].id] = "not_implemented"
    assert not hasattr(engine.driver, "get_share_statuses")
    result = engine.run()
    assert _statuses(engine.db, rows) == [vocab.AVAILABLE, vocab.ERROR, vocab.AVAILABLE,
                                          vocab.AVAILABLE]
    assert _singles(engine.driver) == sorted(r.id for r in rows)
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 3, vocab.ERROR: 1}}


@pytest.mark.parametrize("error", [NotImplementedError("get_share_statuses"),
                                   ShareBackendException("backend busy"),
                                   RuntimeError("driver bug")],
                         ids=["not-implemented", "driver-error", "unexpected"])
def test_a_batch_method_that_raises_falls_back_to_the_single_method(batch_engine, error):
    rows = [make_share(batch_engine.db, vocab.CREATING) for _ in range(4)]
    batch_engine.driver.batch_raises = error
    batch_engine.driver.answers[rows[2].id] = "missing"
    result = batch_engine.run()
    assert _statuses(batch_engine.db, rows) == [vocab.AVAILABLE, vocab.AVAILABLE, vocab.ERROR,
                                                vocab.AVAILABLE]
    assert _singles(batch_engine.driver) == sorted(r.id for r in rows)
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 3, vocab.ERROR: 1}}
    assert result["failures"] == 0


def test_a_batch_method_that_answers_for_some_ids_leaves_the_rest_to_the_single(batch_engine):
    rows = [make_share(batch_engine.db, vocab.CREATING) for _ in range(5)]
    answered = {rows[0].id, rows[3].id}
    batch_engine.driver.batch_ids = answered
    batch_engine.driver.answers[rows[4].id] = "error"
    result = batch_engine.run()
    assert _statuses(batch_engine.db, rows) == [vocab.AVAILABLE] * 4 + [vocab.ERROR]
    assert _singles(batch_engine.driver) == sorted(r.id for r in rows if r.id not in answered)
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 4, vocab.ERROR: 1}}


@pytest.mark.parametrize("answer", ["not a dict", None])
def test_a_batch_answer_of_the_wrong_shape_falls_back_to_the_single(batch_engine, answer,
                                                                   monkeypatch):
    rows = [make_share(batch_engine.db, vocab.CREATING) for _ in range(3)]
    monkeypatch.setattr(batch_engine.driver, "get_share_statuses", lambda shares: answer,
                        raising=False)
    result = batch_engine.run()
    assert _statuses(batch_engine.db, rows) == [vocab.AVAILABLE] * 3
    assert _singles(batch_engine.driver) == sorted(r.id for r in rows)
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 3}}


def test_batch_answers_are_judged_like_single_ones(batch_engine):
    """The matrix's answers, through the batch method: same outcomes."""
    db = batch_engine.db
    outcomes = {HEALTHY: vocab.AVAILABLE, "error": vocab.ERROR, "missing": vocab.ERROR,
                "none": vocab.ERROR, "no_status": vocab.ERROR}
    rows = {}
    for answer in outcomes:
        row = make_share(db, vocab.CREATING)
        batch_engine.driver.answers[row.id] = answer
        rows[answer] = row
    result = batch_engine.run()
    for answer, row in rows.items():
        assert fetch(db, vocab.SHARE_INSTANCE, row.id).status == outcomes[answer], answer
    assert _singles(batch_engine.driver) == []
    assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 1, vocab.ERROR: 4}}


# The dummy driver --------------------------------------------------------------------


@pytest.mark.parametrize("batch", [True, False], ids=["batch-method", "single-method"])
def test_the_dummy_driver_settles_a_batch(sqlite_db, tmp_path, batch):
    methods = ["get_share_status"] + (["get_share_statuses"] if batch else [])
    driver = build_driver("dummy", tmp_path, backend=BACKEND, dummy_status_methods=methods)
    eng = Engine(sqlite_db, coord_url(tmp_path), drivers={BACKEND: driver}, workers=2)
    try:
        rows = [make_share(sqlite_db, vocab.CREATING) for _ in range(8)]
        for row in rows[:6]:  # the last two never reached the backend
            share = api.get(sqlite_db, models.Share, row.share_id)
            driver.create_share(views.share(row, share))
        result = eng.run()
        assert _statuses(sqlite_db, rows) == [vocab.AVAILABLE] * 6 + [vocab.ERROR] * 2
        assert fetch(sqlite_db, vocab.SHARE_INSTANCE, rows[0].id).export_locations
        assert result["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.AVAILABLE: 6,
                                                             vocab.ERROR: 2}}
        with driver.state.reading() as tx:
            log = tx.calls()
        # Each resource asked once by the method that answers (a disabled
        # batch method is logged too, like any call, and then refused).
        want = "get_share_statuses" if batch else "get_share_status"
        assert sorted(c["resource_id"] for c in log if c["method"] == want) == \
            sorted(r.id for r in rows)
        if batch:
            assert not [c for c in log if c["method"] == "get_share_status"]
    finally:
        eng.close()
