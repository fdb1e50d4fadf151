"""librados for the cephfs driver, in a process of Debian's own Python.

Debian's Ceph bindings (python3-rados) load only into the Python they were
built for, not into sharemgr's virtualenv, and the ``ceph`` command costs a
Python start per call. The driver runs this file with that Python
(``cephfs_python``): it connects once and answers one JSON request per
line on stdin, ``{"id", "target": "mgr"|"mon", "cmd": {...}, "timeout"}``,
with ``{"id", "ret", "out", "err"}`` on stdout (``ret`` 0 or a negative
errno), each request in a thread of its own (librados is thread-safe).

It imports nothing of sharemgr: it runs outside sharemgr's environment."""

import json
import sys
import threading


def main() -> int:
    conf, cluster, name, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        import rados  # type: ignore[import-not-found]  # Debian's, not on PyPI
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

    def answer(request: dict) -> None:
        cmd = json.dumps(request["cmd"])
        call = client.mgr_command if request.get("target") == "mgr" else client.mon_command
        try:
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


if __name__ == "__main__":
    sys.exit(main())
