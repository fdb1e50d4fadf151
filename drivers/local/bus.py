"""A private D-Bus for one ganesha.nfsd, so that the driver can ask the
running server what it exports (its ``ExportMgr`` interface) on a host
without a system bus (containers, minimal hosts), and so that two backends'
servers never meet on one bus name.

The bus daemon is ``dbus-daemon`` with a configuration of its own (only
root may connect; the socket in a short runtime folder, as a Unix socket
path has at most 107 bytes); calls go through ``busctl --json``, which
prints the reply as JSON. Both are optional: without them ganesha runs
without a bus and the driver reads back the exports file instead."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sharemgr.common.jsontypes import JSONValue
from sharemgr.drivers.exceptions import ShareBackendException
from sharemgr.drivers.local import commands, process
from sharemgr.drivers.local.fencing import write_atomic

PROGRAM = "dbus-daemon"
CLIENT = "busctl"
CALL_TIMEOUT = 5.0


class BusUnavailable(ShareBackendException):
    """The bus, or the server on it, did not answer."""


def tools_present() -> bool:
    return not commands.missing([PROGRAM, CLIENT])


def render_config(socket: Path, pid_file: Path) -> str:
    return "\n".join([
        '<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"',
        ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">',
        "<!-- Written by the sharemgr local driver: ganesha's private bus. -->",
        "<busconfig>",
        "  <type>system</type>",
        f"  <listen>unix:path={socket}</listen>",
        f"  <pidfile>{pid_file}</pidfile>",
        "  <auth>EXTERNAL</auth>",
        '  <policy user="root">',
        '    <allow own="*"/>',
        '    <allow send_destination="*"/>',
        '    <allow receive_sender="*"/>',
        "  </policy>",
        '  <policy context="default">',
        '    <deny own="*"/>',
        '    <deny send_destination="*"/>',
        "  </policy>",
        "</busconfig>",
        "",
    ])


class PrivateBus:
    """One dbus-daemon: its configuration and pid file under ``root``, its
    socket under ``socket_dir``."""

    def __init__(self, root: Path, socket_dir: Path) -> None:
        self.config = root / "bus.conf"
        self.pid_file = root / "bus.pid"
        self.socket = socket_dir / "bus.sock"

    @property
    def address(self) -> str:
        return f"unix:path={self.socket}"

    def setup(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.config, render_config(self.socket, self.pid_file))

    def running(self) -> bool:
        return process.pid_of(self.pid_file, PROGRAM) is not None

    def ensure_running(self) -> None:
        if self.running():
            return
        self.pid_file.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        commands.run([PROGRAM, f"--config-file={self.config}", "--fork"], timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.running() and self.socket.exists():
                return
            time.sleep(0.05)
        raise ShareBackendException(f"{PROGRAM} --config-file={self.config} started but "
                                    f"{self.socket} did not appear")

    def stop(self) -> None:
        process.stop(self.pid_file, PROGRAM)


def call(address: str | None, dest: str, path: str, interface: str, method: str,
         signature: str = "", *args: str) -> list[JSONValue]:
    """The reply's values of one method call (``address`` None: the
    system bus).

    :raises BusUnavailable: no bus, no such service, or an error reply.
    """
    argv = [CLIENT, f"--address={address}" if address else "--system", "--json=short",
            f"--timeout={CALL_TIMEOUT:g}", "call", dest, path, interface, method]
    if signature:
        argv += [signature, *args]
    try:
        out = commands.run(argv, timeout=CALL_TIMEOUT * 2)
    except commands.CommandFailed as exc:
        raise BusUnavailable(str(exc)) from None
    try:
        data = json.loads(out.stdout)["data"]
    except (ValueError, KeyError, TypeError):
        raise BusUnavailable(f"{CLIENT} answered {out.stdout[:200]!r}") from None
    if not isinstance(data, list):
        raise BusUnavailable(f"{CLIENT} answered {out.stdout[:200]!r}")
    return data
