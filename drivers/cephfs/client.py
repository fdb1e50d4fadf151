"""The cluster's mgr and mon, asked through librados (``rados_bridge``).

One bridge process per driver, started on first use and again after it
died; requests carry ids, so calls of many threads run at once. Every call
has a timeout: the mgr's ``fs`` commands block while no MDS is active."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import shutil
import subprocess
import threading
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path
from typing import Required, TypedDict

from sharemgr.drivers.exceptions import ShareBackendException

LOG = logging.getLogger(__name__)
BRIDGE = Path(__file__).with_name("rados_bridge.py")
# The bridge's own answer to a call that outlived the timeout comes a
# little after it: the caller waits this much longer before giving up.
GRACE = 5.0


class Reply(TypedDict, total=False):
    """The bridge's answer to a request (rados_bridge.py)."""

    id: int | None  # the request's; None: the answer to connecting
    ret: Required[int]  # 0, or a negative errno
    out: str
    err: str


# Two answers of the mgr, of the keys the driver reads (cephfs/driver.py).
class SubvolumeInfo(TypedDict, total=False):
    """``fs subvolume info``."""

    path: str
    bytes_quota: int | str  # "infinite": no quota
    bytes_used: int
    mon_addrs: list[str]


class PoolUsage(TypedDict, total=False):
    """A pool of ``fs status``."""

    type: str  # "data" or "metadata"
    used: int  # bytes
    avail: int


class CephCallFailed(ShareBackendException):
    """A command failed; ``code`` is its errno (positive)."""

    def __init__(self, message: str, code: int, out: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.out = out  # the reply's output (a refused token: the highest)

    @property
    def missing(self) -> bool:
        return self.code == errno.ENOENT


class CephClient:
    """``mgr(prefix, **args)`` / ``mon(...)``: the command's JSON answer."""

    def __init__(self, python: str, conf_path: str, cluster: str, auth_id: str,
                 timeout: float) -> None:
        self.argv = [python, str(BRIDGE), conf_path, cluster, f"client.{auth_id}",
                     str(max(1, int(timeout)))]
        self.python = python
        self.timeout = timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._pending: dict[int | None, futures.Future[Reply]] = {}
        self._ids = itertools.count(1)

    def python_missing(self) -> bool:
        return shutil.which(self.python) is None

    # The bridge ----------------------------------------------------------------

    def _bridge(self) -> subprocess.Popen[str]:
        """The running bridge (the caller holds ``_lock``)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        connected: futures.Future[Reply] = futures.Future()
        self._pending = {None: connected}
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError as exc:
            raise CephCallFailed(f"cannot run {self.python}: {exc}", exc.errno or errno.EIO)
        threading.Thread(target=self._read, args=(proc, self._pending), daemon=True,
                         name="cephfs-bridge").start()
        try:
            hello = connected.result(timeout=self.timeout + GRACE)
        except futures.TimeoutError:
            proc.kill()
            raise CephCallFailed(f"the cluster did not answer in {self.timeout:g}s",
                                 errno.ETIMEDOUT)
        if hello["ret"] != 0:
            proc.wait(5)
            raise CephCallFailed(f"librados: {hello['err']}", -hello["ret"])
        self._proc = proc
        return proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], pending: dict[int | None, futures.Future[Reply]]
              ) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                LOG.warning("cephfs: the rados bridge said %r", line[:200])
                continue
            fut = pending.pop(reply.get("id"), None)
            if fut is not None:
                fut.set_result(reply)
        proc.wait()
        for fut in list(pending.values()):
            if not fut.done():
                fut.set_result({"ret": -errno.EPIPE, "out": "",
                                "err": f"the rados bridge exited ({proc.returncode})"})
        pending.clear()

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                self._proc.wait(10)
            self._proc = None

    # Calls -------------------------------------------------------------------------

    def mgr(self, prefix: str, **args: object) -> object:
        return self._call("mgr", prefix, args)

    def mon(self, prefix: str, **args: object) -> object:
        return self._call("mon", prefix, args)

    def fence(self, op: str, fields: Mapping[str, object], wait: float = 0.0) -> str:
        """A fencing request (``rados_bridge.Fences``); its ``out``. It may
        wait ``wait`` seconds for another call's lock besides the timeout."""
        reply = self._ask({"fence": op, "wait": wait, **fields}, f"fence {op}",
                          self.timeout + wait)
        return str(reply.get("out") or "")

    def exports(self, op: str, fields: Mapping[str, object]) -> object:
        """A request to the NFS export store (``rados_bridge.Exports``); its
        JSON answer."""
        reply = self._ask({"exports": op, **fields}, f"exports {op}", self.timeout)
        out = reply.get("out") or ""
        return json.loads(out) if out.strip() else None

    def omap(self, op: str, fields: Mapping[str, object]) -> dict[str, str]:
        """An object's omap (``rados_bridge.omap``): ``get`` answers it."""
        reply = self._ask({"omap": op, **fields}, f"omap {op}", self.timeout)
        out = reply.get("out") or ""
        answer = json.loads(out) if out.strip() else {}
        return {str(k): str(v) for k, v in answer.items()} if isinstance(answer, dict) else {}

    def _call(self, target: str, prefix: str, args: dict[str, object]) -> object:
        cmd = {"prefix": prefix, "format": "json", **args}
        reply = self._ask({"target": target, "cmd": cmd, "timeout": int(self.timeout)},
                          prefix, self.timeout)
        out = reply.get("out") or ""
        try:
            return json.loads(out) if out.strip() else None
        except json.JSONDecodeError:
            return out

    def _ask(self, request: dict[str, object], what: str, timeout: float) -> Reply:
        """Send one request to the bridge; its reply, or CephCallFailed."""
        with self._lock:
            proc = self._bridge()
            ident = next(self._ids)
            fut: futures.Future[Reply] = futures.Future()
            self._pending[ident] = fut
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps({"id": ident, **request}) + "\n")
                proc.stdin.flush()
            except OSError as exc:
                self._pending.pop(ident, None)
                raise CephCallFailed(f"{what}: the rados bridge is gone: {exc}", errno.EPIPE)
        try:
            reply = fut.result(timeout=timeout + GRACE)
        except futures.TimeoutError:
            self._pending.pop(ident, None)
            raise CephCallFailed(f"{what}: no answer in {timeout:g}s (is an MDS "
                                 "active and the cluster reachable?)", errno.ETIMEDOUT)
        if reply["ret"] != 0:
            lines = (reply.get("err") or reply.get("out") or "no message").strip().splitlines()
            raise CephCallFailed(f"{what}: {lines[-1] if lines else 'failed'}",
                                 -int(reply["ret"]), reply.get("out") or "")
        return reply
