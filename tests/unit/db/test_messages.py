"""User messages (common/messages.py, db/messages.py): a failed or abandoned
request of a user's resource leaves one, in the transaction that ends it;
listed by the resource the user knows, expired ones hidden and reaped; on
every database."""

from __future__ import annotations

import datetime

from sharemgr.common import messages, vocab
from sharemgr.db import api, models
from sharemgr.db import messages as db_messages
from sharemgr.db import reconcile as db_rec

from tests.unit.reconcile_harness import HOSTBE, add_request, make_share, make_snapshot

ENGINE = "hostA.engine-1"


def _running(db, rtype, ident, action):
    return add_request(db, rtype, ident, HOSTBE, status=vocab.REQUEST_RUNNING, engine_id=ENGINE,
                       action=action)


def test_a_failed_request_leaves_a_message_about_the_share(db):
    inst = make_share(db, vocab.EXTENDING)
    req = _running(db, vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_EXTEND)
    assert api.request_finish(db, req, ENGINE, vocab.REQUEST_FAILED, "extend failed: no room",
                              messages.FAILED, message_ttl=60)
    (msg,) = db_messages.message_list(db, inst.share_id)
    assert (msg.resource_type, msg.resource_id, msg.action_id, msg.detail_id,
            msg.request_id, msg.detail) == ("share", inst.share_id, "003", "002", req,
                                            "extend failed: no room")
    assert 59 <= (msg.expires_at - msg.created_at).total_seconds() <= 60
    assert messages.user_message(msg.resource_type, msg.action_id, msg.detail_id) \
        .startswith("extend share: it failed")
    # Finishing it again (another engine's late outcome) writes nothing more.
    assert not api.request_finish(db, req, ENGINE, vocab.REQUEST_FAILED, "x", messages.FAILED)
    assert len(db_messages.message_list(db)) == 1


def test_an_abandoned_request_leaves_one_and_a_stack_check_none(db):
    snap = make_snapshot(db, vocab.CREATING)
    req = _running(db, vocab.SNAPSHOT_INSTANCE, snap.id, vocab.ACTION_CREATE)
    assert db_rec.abandon_request(db, req, ENGINE, "engine died")
    assert not db_rec.abandon_request(db, req, ENGINE, "engine died")  # one pass wins
    check = _running(db, vocab.STACK_RESOURCE, "7", vocab.ACTION_CHECK)
    assert db_rec.abandon_request(db, check, ENGINE, "engine died")
    (msg,) = db_messages.message_list(db)
    assert (msg.resource_type, msg.resource_id, msg.detail_id) == (
        "snapshot", snap.snapshot_id, messages.ENGINE_STOPPED)
    assert [m.id for m in db_messages.message_list(db, snap.snapshot_id)] == [msg.id]
    assert db_messages.message_get(db, msg.id).detail == "engine died"
    assert db_messages.message_delete(db, msg.id)
    assert not db_messages.message_delete(db, msg.id)
    assert db_messages.message_get(db, msg.id) is None


def test_expired_messages_are_hidden_then_reaped(db):
    inst = make_share(db, vocab.CREATING)
    req = _running(db, vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_CREATE)
    assert api.request_finish(db, req, ENGINE, vocab.REQUEST_ABANDONED, "lost: taken over",
                              messages.TAKEN_OVER)
    (msg,) = db_messages.message_list(db)
    past = models.utcnow() - datetime.timedelta(seconds=1)
    assert api.conditional_update(db, models.Message, msg.id, {}, {"expires_at": past})
    assert db_messages.message_list(db) == [] and db_messages.message_get(db, msg.id) is None
    assert db_messages.reap(db) == 1 and db_messages.reap(db) == 0


def test_a_message_about_what_the_manager_did_on_its_own(db):
    """A drift check's repair has no request: its message names the share."""
    inst = make_share(db, vocab.AVAILABLE)
    ident = db_messages.record_about(db, vocab.SHARE, inst.share_id, messages.ACTION_REPAIR,
                                     messages.NOT_SERVED, "ganesha.nfsd does not export it",
                                     ttl=60)
    (msg,) = db_messages.message_list(db, inst.share_id)
    assert (msg.id, msg.resource_type, msg.action_id, msg.detail_id, msg.message_level,
            msg.request_id, msg.detail) == (
        ident, "share", "012", "006", "WARNING", None, "ganesha.nfsd does not export it")
    assert messages.user_message(msg.resource_type, msg.action_id, msg.detail_id) \
        .startswith("serve again share: a drift check found")


def test_a_refused_resize_waits_for_its_requests_message(db):
    """The share is available again before the request's end and message
    are written (two transactions): ``sharectl share shrink --wait`` reads
    the reason only once the request ended (CI once saw "see 'sharectl
    message list'" instead)."""
    import threading
    import types

    from sharemgr.cli import resource_cmds

    inst = make_share(db, vocab.AVAILABLE)
    req = _running(db, vocab.SHARE_INSTANCE, inst.id, vocab.ACTION_SHRINK)
    app = types.SimpleNamespace(context=types.SimpleNamespace(db=db))
    late = threading.Timer(0.5, api.request_finish, (db, req, ENGINE, vocab.REQUEST_FAILED,
                                                     "holds 3 GiB", messages.SHRINK_REFUSED))
    late.start()
    try:
        why = resource_cmds._last_message(app, inst.share_id)
    finally:
        late.join()
    assert "the backend refused it" in why and "holds 3 GiB" in why, why
