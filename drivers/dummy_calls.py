"""The dummy driver's plumbing: every call goes through ``DummyCalls._op``.

``_op`` logs the call, checks its fencing token, waits at a gate, sleeps the
configured delay, fails if told to, crash-before, changes the backend in one
transaction, crash-after. The helpers below are what the operations share.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from oslo_config import cfg
from sharemgr.drivers import base
from sharemgr.drivers.dummy_knobs import Knobs
from sharemgr.drivers.dummy_options import dummy_opts
from sharemgr.drivers.dummy_state import BackendObject, BackendState, Tx
from sharemgr.drivers.exceptions import (
    FencedCall,
    InvalidShareRequest,
    ShareBackendException,
    ShareResourceNotFound,
)

SHARE_KINDS = ("share", "replica")
CREATED = "available"


class DummyCalls(base.ShareDriver):
    """The dummy driver's constructor, call path and helpers."""

    driver_opts = dummy_opts

    def __init__(
        self,
        configuration: cfg.ConfigOpts.GroupAttr,
        *,
        backend_name: str,
        host: str,
        engine_id: str,
        state_path: str,
    ) -> None:
        super().__init__(
            configuration,
            backend_name=backend_name,
            host=host,
            engine_id=engine_id,
            state_path=state_path,
        )
        conf = configuration
        methods = [m for m in dir(base.ShareDriver) if not m.startswith("_")]
        methods = [m for m in methods if callable(getattr(base.ShareDriver, m))]
        self.knobs = Knobs(
            methods,
            delays=conf.dummy_method_delays or {},
            fail=conf.dummy_fail_methods or [],
            crash_before=conf.dummy_crash_before or [],
            crash_after=conf.dummy_crash_after or [],
            gate_dir=conf.dummy_gate_dir,
            gate_poll_interval=conf.dummy_gate_poll_interval,
        )
        self.status_methods = frozenset(conf.dummy_status_methods or ())
        self.honours_fencing = bool(conf.dummy_honours_fencing)
        self.dummy_state_path = conf.dummy_state_path or os.path.join(
            state_path, "dummy", backend_name
        )
        self.state = BackendState(self.dummy_state_path, backend=backend_name)

    # The one path of every call ------------------------------------------

    @contextlib.contextmanager
    def _op(self, method: str, resource: Mapping[str, Any] | None, write: bool = True
            ) -> Iterator[Tx]:
        """``resource``: whichever of the manager's argument dicts the call is
        about (None for a call about the backend)."""
        resource = resource or {}
        rid = resource.get("id")
        name = str(resource.get("name") or rid or "")
        token = resource.get("fence_token") if self.honours_fencing and rid else None
        if token is None:
            seq = self.state.log_call(method, rid, self.engine_id)
        else:
            # Checked as the call arrives, and again with its change: a newer
            # owner's call that arrives first fences this one even while this
            # one is still at work (its slow part before the change).
            seq, newer = self.state.arrive(method, str(rid), self.engine_id, int(token))
            if newer is not None:
                raise FencedCall(f"dummy backend: {method} of {rid} carries fencing token "
                                 f"{token}, older than {newer}")
        if method in base.STATUS_METHODS and method not in self.status_methods:
            raise NotImplementedError(f"dummy driver: {method} is disabled by dummy_status_methods")
        self.knobs.wait_at_gate(method, name)
        self.knobs.delay(method, name)
        if self.knobs.should_fail(method, name):
            raise ShareBackendException(
                f"dummy driver: {method} of {rid or self.backend_name} failed "
                "(dummy_fail_methods)"
            )
        self.knobs.crash_if("before", method, name)
        try:
            # The token is checked in the transaction of the change: a call
            # fenced after its check cannot land (a read with a token writes
            # the highest token, so it takes the write lock too).
            with self.state.transaction() if write or token is not None \
                    else self.state.reading() as tx:
                if token is not None:
                    newer = tx.accept_token(str(rid), int(token))
                    if newer is not None:
                        raise FencedCall(f"dummy backend: {method} of {rid} carries fencing "
                                         f"token {token}, older than {newer}")
                yield tx
                if write:
                    tx.finish_call(seq)
        except FencedCall:
            self.state.mark_fenced(seq)
            raise
        self.knobs.crash_if("after", method, name)

    # Helpers ------------------------------------------------------------------

    def _export_locations(self, instance_id: str, server: base.ShareServer | None
                          ) -> list[base.ExportLocation]:
        details = (server or {}).get("backend_details") or {}
        address = details.get("address") or f"{self.host}.{self.backend_name}.dummy"
        return [
            {"path": f"{address}:/shares/{instance_id}", "is_admin_only": False,
             "preferred": True},
            {"path": f"admin.{address}:/shares/{instance_id}", "is_admin_only": True,
             "preferred": False},
        ]

    def _check_server(self, tx: Tx, server: base.ShareServer | None, what: str) -> str | None:
        if not self.driver_handles_share_servers:
            return None
        if not server:
            raise InvalidShareRequest(
                f"dummy backend {self.backend_name} handles share servers "
                f"(driver_handles_share_servers = True): {what} needs a share server"
            )
        if tx.get(server["id"], ("share_server",)) is None:
            raise ShareResourceNotFound(f"dummy backend has no share server {server['id']}")
        return str(server["id"])

    @staticmethod
    def _size(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidShareRequest(f"size must be a positive integer, not {value!r}")
        return value

    @staticmethod
    def _need(tx: Tx, obj_id: str | None, kinds: tuple[str, ...], what: str) -> BackendObject:
        obj = tx.get(obj_id, kinds)
        if obj is None:
            raise ShareResourceNotFound(f"dummy backend has no {what} {obj_id}")
        return obj

    def _refuse_if_used(self, tx: Tx, column: str, obj_id: str, kinds: tuple[str, ...],
                        what: str) -> None:
        users = tx.find(column, obj_id, kinds)
        if users:
            ids = ", ".join(f"{u['kind']} {u['id']}" for u in users)
            raise InvalidShareRequest(f"dummy backend: {what} {obj_id} is in use by {ids}")
