"""Observe reality (issue 16) through the daemon: leases tell a stuck
operation from a slow one, and the periodic pass settles the stuck one while
the engine stays up."""

from __future__ import annotations

import pytest
from sharemgr.common import vocab
from sharemgr.db import api as db_api
from sharemgr.db import models
from sharemgr.db import reconcile as db_rec

from tests.functional.harness import database, intake, wait_until
from tests.functional.test_reconcile_parity import DATABASES, deployment_servers

pytestmark = pytest.mark.functional


@pytest.fixture(params=DATABASES)
def servers(request) -> dict:
    return deployment_servers(request, request.param)


def _status(db, share_id: str) -> str:
    from sharemgr.cli.nouns import NOUNS

    return NOUNS["share"].status(db, share_id)


def _gated(deployment, servers, **defaults):
    d = deployment(**servers, extra={"DEFAULT": {
        "startup_reconciliation_wait_seconds": "0",
        "periodic_reconciliation_interval": "1", **defaults}})
    gates = d.root / "gates"
    gates.mkdir()
    d.sections["dummy"].update(dummy_gate_dir=str(gates), dummy_gate_poll_interval="0.02")
    d.write_config()
    d.sync()
    return d, gates


def _reached(d, method: str, resource: str) -> bool:
    return any(c["method"] == method for c in d.backend("calls", "--resource", resource))


def test_hung_call_settled_by_the_periodic_pass_slow_call_left_alone(deployment, servers):
    """A create held at the gate past its 2 s lease is settled by a periodic
    pass (the rule of 'creating': not on the backend → error) while the
    engine stays up; an extend held at its gate the whole time, under the
    default one-hour lease, is skipped by that pass and finishes once let go."""
    d, gates = _gated(deployment, servers,
                      operation_lease_seconds_by_method="create_share:2")
    engine = d.start()
    db, _ = database(d)
    api = intake(d)
    slow = api.create_share(1, "NFS", name="slow-1").id
    wait_until(lambda: _status(db, slow) == vocab.AVAILABLE, what="slow-1 available")
    slow_inst = db_api.request_list(db, resource_id=slow)[0].resource_id
    (gates / "extend_share.slow-").touch()
    api.resize_share(slow, 2, extend=True)
    wait_until(lambda: _reached(d, "extend_share", slow_inst), what="extend at its gate")

    (gates / "create_share.hung-").touch()
    hung = api.create_share(1, "NFS", name="hung-1").id
    wait_until(lambda: _status(db, hung) == vocab.ERROR, what="the hung create settled")
    assert engine.proc.poll() is None
    req = db_api.request_list(db, resource_id=hung)[0]
    assert req.status == vocab.REQUEST_ABANDONED and "lease expired" in req.error
    record = wait_until(lambda: [p for p in db_rec.passes(db, trigger="periodic")
                                 if p.finished_at], what="the periodic pass recorded")[0]
    assert record.summary["stuck_requests"] == 1
    assert record.summary["outcomes"] == {vocab.SHARE_INSTANCE: {vocab.ERROR: 1}}
    assert record.summary["skipped"].get("in progress") == 1  # the slow extend
    assert _status(db, slow) == vocab.EXTENDING

    # The slow call finishes; the hung one, let go, finds its outcome taken.
    (gates / "extend_share.slow-").unlink()
    (gates / "create_share.hung-").unlink()
    wait_until(lambda: _status(db, slow) == vocab.AVAILABLE, what="the slow extend")
    assert db_api.get(db, models.Share, slow).size == 2
    engine.wait_for_log("outcome not written")
    assert _status(db, hung) == vocab.ERROR
    assert db_api.request_list(db, resource_id=hung)[0].status == vocab.REQUEST_ABANDONED
    assert engine.proc.poll() is None
    db.dispose()
