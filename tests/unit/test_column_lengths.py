"""Every value sharemgr writes fits its column, on every database.

The peer takeover once wrote 'peer:<engine id>' into a VARCHAR(32): SQLite
stored it, PostgreSQL and MariaDB refused it. Three kinds of test keep that
class of bug out: the longest value the code can write, compared with each
column's declared length; SQLite refusing what does not fit, as the servers
do (db/engine.py); and the longest real values stored on all three
databases.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from oslo_config import types
from sharemgr.common import vocab
from sharemgr.db import api, models, resources
from sharemgr.db import reconcile as db_rec
from sharemgr.db.engine import ColumnLimitError, Database
from sharemgr.manager import access, kinds

# The longest host oslo.config's HostnameOpt accepts (253), padded to 255 as
# the issue states hosts; a backend name as long again.
LONGEST_HOSTNAME = ".".join(["a" * 63] * 3 + ["b" * 61])
HOST = LONGEST_HOSTNAME + "cc"
BACKEND = "d" * 255
ENGINE_ID = f"{HOST}.{uuid.uuid4()}"  # ShareManagerService: '<host>.<uuid4>'
BACKEND_HOST = f"{HOST}@{BACKEND}"


def length(model: type[models.Base], column: str) -> int:
    kind = model.__table__.c[column].type
    assert isinstance(kind, sa.String) and kind.length is not None, (model, column)
    return kind.length


def _model(kind: kinds.Kind) -> type[models.Base]:
    assert issubclass(kind.model, models.Base), kind.name
    return kind.model


def test_the_longest_hostname_is_what_the_config_accepts():
    assert types.Hostname()(LONGEST_HOSTNAME) == LONGEST_HOSTNAME
    with pytest.raises(ValueError):
        types.Hostname()(LONGEST_HOSTNAME + "c")
    assert len(HOST) == 255


# (model, column, the longest value the code writes there, where from)
LONGEST = [
    (models.Service, "host", HOST, "[DEFAULT] host"),
    (models.Service, "engine_id", ENGINE_ID, "<host>.<uuid4>"),
    (models.Request, "engine_id", ENGINE_ID, "claiming engine"),
    (models.StackResource, "engine_id", ENGINE_ID, "resource lock holder"),
    (models.ReconcilePass, "engine_id", ENGINE_ID, "pass runner"),
    (models.ReconcilePass, "host", HOST, "pass runner"),
    (models.ReconcilePass, "trigger", f"peer:{ENGINE_ID}", "peer takeover"),
    (models.ReconcilePass, "trigger", f"manual:{2**63 - 1}", "sharectl reconcile run"),
    (models.Request, "host", BACKEND_HOST, "intake"),
    (models.Request, "host", f"*@{BACKEND}", "convergence claim host"),
    (models.ShareServer, "host", BACKEND_HOST, "intake"),
    (models.ShareInstance, "host", BACKEND_HOST, "intake"),
    (models.ShareGroup, "host", BACKEND_HOST, "intake"),
    (models.ShareBackup, "host", BACKEND_HOST, "intake"),
    (models.BackendInfo, "host", BACKEND_HOST, "ensure-resources"),
    (models.BackendInfo, "info_hash", "0" * 64, "sha256 hex digest"),
    (models.Request, "resource_id", str(uuid.uuid4()), "resource ids"),
    (models.Request, "resource_id", str(2**63 - 1), "stack resource ids"),
    (models.Request, "resource_type", "stack_resource", "convergence checks"),
    (models.Request, "action", "check_resource", "convergence checks"),
    (models.ShareSnapshotInstance, "progress", "100%", "operations"),
    (models.Service, "binary", "share-manager", "service"),
]
LONGEST += [(models.ServiceBackend, "engine_id", ENGINE_ID, "<host>.<uuid4>"),
            # manager/config.py refuses a backend name over 128 characters.
            (models.ServiceBackend, "backend", "b" * 128, "enabled_share_backends")]
LONGEST += [(models.ServiceBackend, "state", s, "backend states") for s in vocab.BACKEND_STATES]
LONGEST += [(models.Request, "resource_type", t, "resource types")
            for t in (*kinds.KINDS, vocab.RECONCILE, vocab.STACK_RESOURCE, vocab.STACK)]
LONGEST += [(models.Request, "action", a, "reconcile and stack requests")
            for a in (vocab.ACTION_RUN, vocab.ACTION_DRIFT, vocab.ACTION_STACK_CHECK)]
LONGEST += [(models.ReconcilePass, "trigger", t, "passes and drift checks")
            for t in ("periodic", "drift", f"drift:{2**63 - 1}")]
LONGEST += [(models.Stack, "action", vocab.STACK_CHECK, "sharectl stack check")]
LONGEST += [(models.Request, "status", s, "request statuses")
            for s in (vocab.REQUEST_PENDING, vocab.REQUEST_RUNNING, vocab.REQUEST_DONE,
                      vocab.REQUEST_FAILED, vocab.REQUEST_ABANDONED)]
LONGEST += [(_model(kind), "status", status, f"{kind.name} statuses")
            for kind in kinds.KINDS.values() for status in kind.statuses]
LONGEST += [(models.ShareAccessRule, "state", s, "access rule states")
            for s in vocab.ACCESS_RULE_STATES]
LONGEST += [(models.ShareInstance, "access_rules_status", s, "access rules statuses")
            for s in vocab.ACCESS_RULES_STATUSES]
LONGEST += [(models.ShareAccessRule, "access_type", t, "access types") for t in vocab.ACCESS_TYPES]
LONGEST += [(models.ShareAccessRule, "access_level", t, "levels") for t in vocab.ACCESS_LEVELS]
LONGEST += [(models.ShareAccessRule, "access_to", access.check("user", "u" * 255).access_to,
             "the longest user"),
            (models.ShareAccessRule, "access_to", access.check(
                "ip", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:0/112").access_to, "an IPv6 CIDR"),
            (models.ShareAccessRule, "access_to", access.check("cert", "c" * 64).access_to,
             "the longest common name")]
LONGEST += [(models.ShareInstance, "replica_state", s,
             "replica states") for s in vocab.REPLICA_STATES]
LONGEST += [(models.ShareInstance, "task_state", s, "task states") for s in vocab.BUSY_TASK_STATES]
LONGEST += [(model, column, value, "stack statuses")
            for model in (models.Stack, models.StackResource) for column, values in (
                ("action", vocab.STACK_ACTIONS),
                ("status", vocab.STACK_STATUSES))
            for value in values]


@pytest.mark.parametrize("model,column,value,source", LONGEST,
                         ids=[f"{m.__table__.name}.{c}:{s}" for m, c, _, s in LONGEST])
def test_longest_value_fits_its_column(model, column, value, source):
    assert len(value) <= length(model, column), (
        f"{source}: {len(value)} characters for {model.__table__.name}.{column} "
        f"({length(model, column)})")


# SQLite refuses what PostgreSQL and MariaDB refuse -----------------------------


def _refused(call):
    with pytest.raises(sa.exc.DataError) as info:
        call()
    assert isinstance(info.value.orig, ColumnLimitError)
    return str(info.value.orig)


def test_sqlite_refuses_an_overlong_insert(sqlite_db):
    message = _refused(lambda: db_rec.pass_start(sqlite_db, "h", "e", "x" * 401, False))
    assert "reconcile_passes.trigger" in message and "VARCHAR(400)" in message
    assert db_rec.passes(sqlite_db, limit=10) == []  # nothing written


def test_sqlite_refuses_an_overlong_row_of_a_many_row_insert(sqlite_db):
    """Every row of an INSERT of many rows is checked, the last included,
    before any reaches the table (once per statement, not once per batch
    the driver is sent)."""
    rows = [(str(i), {}) for i in range(300)] + [("x" * 65, {})]

    def add():
        with sqlite_db.session() as session:
            api.requests_add_tx(session, "share", "create", rows)

    assert "requests.resource_id" in _refused(add)
    with sqlite_db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(models.Request)) == 0


def test_sqlite_refuses_an_overlong_update_and_keeps_the_row(sqlite_db):
    share = models.Share(size=1, share_proto="NFS", name="n")
    api.add_all(sqlite_db, [share])
    message = _refused(lambda: api.conditional_update(
        sqlite_db, models.Share, share.id, {}, {"name": "n" * 256}))
    assert "shares.name" in message
    assert api.get(sqlite_db, models.Share, share.id).name == "n"
    # At the limit it is stored; a WHERE clause is no write and has no limit.
    assert api.conditional_update(sqlite_db, models.Share, share.id, {}, {"name": "n" * 255})
    assert not api.conditional_update(sqlite_db, models.Share, share.id, {"name": "m" * 300},
                                      {"name": "x"})


def test_sqlite_refuses_an_orm_update_of_a_loaded_row(sqlite_db):
    resources.set_backend_info_hash(sqlite_db, "h@b", "0" * 64)

    def change() -> None:
        with sqlite_db.session() as session:
            session.get(models.BackendInfo, "h@b").info_hash = "0" * 65

    assert "backend_info.info_hash" in _refused(change)
    assert resources.backend_info_hash(sqlite_db, "h@b") == "0" * 64


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 99999999999999999999])
def test_sqlite_refuses_integers_a_32_bit_column_cannot_hold(sqlite_db, value):
    message = _refused(lambda: api.add_all(sqlite_db, [models.Share(size=value,
                                                                 share_proto="NFS")]))
    assert "shares.size" in message and "out of range" in message
    assert api.query(sqlite_db, models.Share) == []


def test_sqlite_limits_leave_other_databases_to_themselves(pg_url):
    """The check is SQLite's only: PostgreSQL refuses by itself (below)."""
    db = Database(pg_url)
    try:
        assert not db.engine.dispatch.before_cursor_execute
    finally:
        db.dispose()


# The real limits of every database ---------------------------------------------


def test_an_overlong_value_is_refused_everywhere(db):
    with pytest.raises(sa.exc.DataError):
        db_rec.pass_start(db, "h", "e", "x" * 401, False)
    with pytest.raises(sa.exc.DataError):
        api.add_all(db, [models.Share(size=2**31, share_proto="NFS")])
    assert db_rec.passes(db, limit=10) == [] and api.query(db, models.Share) == []


def test_a_peer_pass_of_the_longest_engine_id_is_stored(db):
    trigger = f"peer:{ENGINE_ID}"
    record = db_rec.pass_start(db, HOST, ENGINE_ID, trigger, False)
    assert db_rec.pass_finish(db, record.id, {"failures": 0})
    (found,) = db_rec.passes(db, HOST, trigger=trigger)
    assert (found.engine_id, found.trigger, found.finished_at is not None) == (
        ENGINE_ID, trigger, True)


def test_the_longest_backend_host_is_stored(db):
    resources.set_backend_info_hash(db, BACKEND_HOST, "0" * 64)
    assert resources.backend_info_hash(db, BACKEND_HOST) == "0" * 64
    share = models.Share(id=models.new_id(), size=vocab.MAX_SHARE_SIZE_GB, share_proto="NFS",
                    name="n" * 255)
    inst = models.ShareInstance(id=models.new_id(), share_id=share.id, host=BACKEND_HOST,
                           status=vocab.CREATING)
    api.add_with_request(db, [share, inst], {
        "resource_type": vocab.SHARE_INSTANCE, "resource_id": inst.id, "action": "create",
        "host": BACKEND_HOST})
    assert [i.id for i in resources.on_host(db, models.ShareInstance, BACKEND_HOST)] == [inst.id]
    (claimed,) = api.request_claim(db, [BACKEND_HOST], ENGINE_ID, 1)
    assert (claimed.host, claimed.engine_id) == (BACKEND_HOST, ENGINE_ID)
