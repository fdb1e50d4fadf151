"""librados for the cephfs driver, in a process of Debian's own Python.

Debian's Ceph bindings (python3-rados) load only into the Python they were
built for, not into sharemgr's virtualenv, and the ``ceph`` command costs a
Python start per call. The driver runs this file with that Python
(``cephfs_python``): it connects once and answers one JSON request per
line on stdin, ``{"id", "target": "mgr"|"mon", "cmd": {...}, "timeout"}``
or ``{"id", "fence": "enter"|"renew"|"exit", ...}`` (the fencing token of
an object, kept in RADOS: doc/cephfs_driver.rst, "Fencing"), or ``{"id",
"exports": "put"|"remove"|"list", ...}`` (NFS-Ganesha's exports, kept in
RADOS: ``Exports``), or ``{"id", "omap": "get"|"set"|"rm", ...}`` (an
object's keys: ``omap``), with ``{"id",
"ret", "out", "err"}`` on stdout (``ret`` 0 or a negative errno), each
request in a thread of its own (librados is thread-safe).

It imports nothing of sharemgr: it runs outside sharemgr's environment."""

import errno
import json
import sys
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # Debian's bindings: the checker reads them as unknown
    from rados import Ioctx, Rados

# librados's LIBRADOS_LOCK_FLAG_MAY_RENEW (the bindings do not export it).
MAY_RENEW = 1
FENCE_KEY = "token"


class Request(TypedDict, total=False):
    """A request as the driver writes it (client.py): the keys of its kind."""

    id: int
    target: str  # a command's: "mgr" or "mon"
    cmd: dict[str, object]
    timeout: int
    fence: str  # a fencing request's: "enter", "renew" or "exit"
    exports: str  # an export store's: "put", "remove", "sync", "list" or "notify"
    omap: str  # an omap request's: "get", "set" or "rm"
    pool: str
    namespace: str
    obj: str
    cookie: str
    duration: int
    token: int
    wait: float
    index: str
    prefix: str
    share: str
    text: str
    notify_ms: int
    keys: list[str]
    values: list[str]


def main() -> int:
    conf, cluster, name, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        import rados  # Debian's, not on PyPI
    except ImportError as exc:
        print(json.dumps({"id": None, "ret": -2, "out": "", "err": f"no rados: {exc}"}),
              flush=True)
        return 1
    client = rados.Rados(conffile=conf, clustername=cluster, name=name)
    try:
        client.connect(timeout=timeout)
    except rados.Error as exc:
        print(json.dumps({"id": None, "ret": -getattr(exc, "errno", 5) or -5, "out": "",
                          "err": f"cannot connect: {exc}"}), flush=True)
        return 1
    print(json.dumps({"id": None, "ret": 0, "out": "", "err": "connected"}), flush=True)
    write = threading.Lock()
    fences = Fences(rados, client)
    exports = Exports(rados, client)

    def answer(request: Request) -> None:
        try:
            if "fence" in request:
                ret, out, err = fences.call(request)
            elif "exports" in request:
                ret, out, err = exports.call(request)
            elif "omap" in request:
                ret, out, err = omap(rados, client, request)
            else:
                cmd = json.dumps(request["cmd"])
                call = client.mgr_command if request.get("target") == "mgr" \
                    else client.mon_command
                ret, out, err = call(cmd, b"", timeout=int(request.get("timeout") or timeout))
            reply = {"id": request["id"], "ret": ret,
                     "out": out.decode(errors="replace") if isinstance(out, bytes) else out,
                     "err": err.decode(errors="replace") if isinstance(err, bytes) else err}
        except Exception as exc:  # the reply is the error: the driver raises it
            reply = {"id": request["id"], "ret": -getattr(exc, "errno", 5) or -5, "out": "",
                     "err": f"{type(exc).__name__}: {exc}"}
        with write:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()

    for line in sys.stdin:
        if line.strip():
            threading.Thread(target=answer, args=(json.loads(line),), daemon=True).start()
    client.shutdown()
    return 0


class Fences:
    """The highest fencing token accepted per backend object: one RADOS
    object per backend object (``obj``, in the pool and namespace the
    request names), its omap key ``token``. ``enter`` takes the object's
    exclusive lock (``cookie``: the call's, for ``duration`` seconds,
    waiting ``wait`` seconds for another holder), then refuses a lower
    token (-ESTALE, the highest in ``out``) or records a higher one by a
    write guarded with the version it read (of two writers that read one
    version, one wins and the other reads again). ``renew`` extends the
    lock while the call runs; ``exit`` releases it."""

    def __init__(self, rados: ModuleType, client: "Rados") -> None:
        self.rados = rados
        self.client = client

    def call(self, req: Request) -> tuple[int, str, str]:
        # An I/O context per request: the version a read leaves in it
        # (get_last_version) must be this request's, not another thread's.
        ctx = self.client.open_ioctx(req["pool"])
        try:
            ctx.set_namespace(req["namespace"])
            return self._call(ctx, req)
        finally:
            ctx.close()

    def _call(self, ctx: "Ioctx", req: Request) -> tuple[int, str, str]:
        obj, cookie = req["obj"], req["cookie"]
        if req["fence"] == "exit":
            try:
                ctx.unlock(obj, "fence", cookie)
            except self.rados.ObjectNotFound:  # expired, or broken by another
                pass
            return 0, "", ""
        if req["fence"] == "renew":
            try:
                ctx.lock_exclusive(obj, "fence", cookie, "sharemgr call",
                                   int(req["duration"]), MAY_RENEW)
            except self.rados.ObjectBusy:
                return -errno.EBUSY, "", "the lock was lost (expired and taken)"
            return 0, "", ""
        return self.enter(ctx, obj, cookie, int(req["token"]), int(req["duration"]),
                          float(req["wait"]))

    def enter(self, ctx: "Ioctx", obj: str, cookie: str, token: int, duration: int,
              wait: float) -> tuple[int, str, str]:
        rados = self.rados
        if not lock_within(rados, ctx, obj, ("fence", cookie, "sharemgr call", duration), wait):
            return -errno.EBUSY, "", (f"another call held {obj} for {wait:g}s")
        try:
            while True:
                with rados.ReadOpCtx() as op:
                    values, _ret = ctx.get_omap_vals_by_keys(op, (FENCE_KEY,))
                    ctx.operate_read_op(op, obj)
                    highest = dict(values).get(FENCE_KEY)
                version = ctx.get_last_version()
                if highest is not None and token < int(highest):
                    ctx.unlock(obj, "fence", cookie)
                    return -errno.ESTALE, highest.decode(), "fenced"
                if highest is not None and token == int(highest):
                    return 0, "", ""
                with rados.WriteOpCtx() as op:
                    op.assert_version(version)
                    ctx.set_omap(op, (FENCE_KEY,), (str(token).encode(),))
                    try:
                        ctx.operate_write_op(op, obj)
                        return 0, "", ""
                    except rados.OSError as exc:
                        if exc.errno not in (errno.ERANGE, errno.EOVERFLOW):
                            raise
        except Exception:
            try:
                ctx.unlock(obj, "fence", cookie)
            except rados.Error:
                pass
            raise


def lock_within(rados: ModuleType, ctx: "Ioctx", obj: str, lock: tuple[str, str, str, int],
                wait: float) -> bool:
    """Take the exclusive lock ``lock`` (name, cookie, description, seconds
    it lasts) on ``obj``, trying for ``wait`` seconds; False if another
    holder kept it that long."""
    name, cookie, desc, duration = lock
    deadline = time.monotonic() + wait
    while True:
        try:
            ctx.lock_exclusive(obj, name, cookie, desc, duration, 0)
            return True
        except rados.ObjectBusy:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def omap(rados: ModuleType, client: "Rados", req: Request) -> tuple[int, str, str]:
    """An object's omap: ``get`` (``keys``, or every key when none; JSON),
    ``set`` (``keys`` to ``values``; the object is made if missing) or
    ``rm`` (``keys``)."""
    ctx = client.open_ioctx(req["pool"])
    try:
        ctx.set_namespace(req["namespace"])
        keys = tuple(req.get("keys") or ())
        if req["omap"] == "get":
            try:
                with rados.ReadOpCtx() as op:
                    if keys:
                        values, _ret = ctx.get_omap_vals_by_keys(op, keys)
                    else:
                        values, _ret = ctx.get_omap_vals(op, "", "", 1 << 20)
                    ctx.operate_read_op(op, req["obj"])
                    return 0, json.dumps({k: v.decode() for k, v in values}), ""
            except rados.ObjectNotFound:
                return 0, "{}", ""
        with rados.WriteOpCtx() as op:
            if req["omap"] == "set":
                ctx.set_omap(op, keys, tuple(str(v).encode() for v in req["values"]))
            else:
                ctx.remove_omap_keys(op, keys)
            try:
                ctx.operate_write_op(op, req["obj"])
            except rados.ObjectNotFound:
                pass
        return 0, "", ""
    finally:
        ctx.close()


class Exports:
    """NFS-Ganesha's exports of one backend, in RADOS where every engine
    and every ganesha reads them: an object per export (``prefix`` + share
    id) and an index object (``index``) of ``%url`` lines naming them,
    which ganesha's config includes and watches. The index's omap maps
    share id to export id. A change holds the index's exclusive lock while
    it writes the export, the omap and the index, so changes of engines on
    several hosts never lose one another's; ``notify`` then tells the index's
    watchers (ganesha re-reads its exports). ``put`` answers the export
    id, ``list`` every share's, ``notify`` whether the notify went out."""

    LOCK_SECONDS = 30
    MAX_ID = 65535  # ganesha's export ids are 16 bits; 0 is its pseudo root

    def __init__(self, rados: ModuleType, client: "Rados") -> None:
        self.rados = rados
        self.client = client

    def call(self, req: Request) -> tuple[int, str, str]:
        ctx = self.client.open_ioctx(req["pool"])
        try:
            ctx.set_namespace(req["namespace"])
            if req["exports"] == "list":
                return 0, json.dumps(self._ids(ctx, req["index"])), ""
            if req["exports"] == "notify":
                return 0, json.dumps(self._notify(ctx, req["index"], int(req["notify_ms"]))), ""
            return self._change(ctx, req)
        finally:
            ctx.close()

    def _ids(self, ctx: "Ioctx", index: str) -> dict[str, int]:
        try:
            with self.rados.ReadOpCtx() as op:
                values, _ret = ctx.get_omap_vals(op, "", "", self.MAX_ID + 1)
                ctx.operate_read_op(op, index)
                return {k: int(v) for k, v in values}
        except self.rados.ObjectNotFound:
            return {}

    def _change(self, ctx: "Ioctx", req: Request) -> tuple[int, str, str]:
        index, share = req["index"], req.get("share", "")
        obj = req["prefix"] + share
        cookie = f"{threading.get_ident()}-{time.monotonic_ns()}"
        lock = ("exports", cookie, "sharemgr exports", self.LOCK_SECONDS)
        if not lock_within(self.rados, ctx, index, lock,
                           float(req.get("wait", self.LOCK_SECONDS))):
            return -errno.EBUSY, "", f"another engine held {index}"
        try:
            ids = self._ids(ctx, index)
            export_id = ids.get(share)
            if req["exports"] == "sync":  # the index made from the omap (made if missing)
                pass
            elif req["exports"] == "put":
                if export_id is None:
                    used = set(ids.values())
                    export_id = next((i for i in range(1, self.MAX_ID + 1) if i not in used),
                                     None)
                    if export_id is None:
                        return -errno.ENOSPC, "", "no export id is free"
                ctx.write_full(obj, req["text"].replace("@EXPORT_ID@", str(export_id))
                               .encode())
                ids[share] = export_id
                with self.rados.WriteOpCtx() as op:
                    ctx.set_omap(op, (share,), (str(export_id).encode(),))
                    ctx.operate_write_op(op, index)
            else:
                ids.pop(share, None)
                with self.rados.WriteOpCtx() as op:
                    ctx.remove_omap_keys(op, (share,))
                    ctx.operate_write_op(op, index)
            # The index names only objects that exist: ganesha drops a
            # whole re-read over one %url it cannot open. So an export is
            # written before the index names it, and removed after.
            url = f"rados://{req['pool']}/{req['namespace']}/{req['prefix']}"
            ctx.write_full(index, "".join(f'%url "{url}{s}"\n' for s in sorted(ids)).encode())
            if req["exports"] == "remove":
                try:
                    ctx.remove_object(obj)
                except self.rados.ObjectNotFound:
                    pass
        finally:
            try:
                ctx.unlock(index, "exports", cookie)
            except self.rados.Error:
                pass
        return 0, json.dumps({"export_id": export_id}), ""

    def _notify(self, ctx: "Ioctx", index: str, timeout_ms: int) -> bool:
        """Notify the index's watchers (the call returns once each answered
        or the timeout passed); False when it failed."""
        try:
            ctx.notify(index, "sharemgr", timeout_ms)
        except self.rados.Error:
            return False
        return True


if __name__ == "__main__":
    sys.exit(main())
