"""Network faults for functional tests: a TCP forwarder between an engine
and a server (PostgreSQL, Redis) that a test cuts (refused) or freezes
(dropped)."""

from __future__ import annotations

import socket
import threading
import time


class Proxy:
    """A TCP forwarder the test can cut (every connection closed, new ones
    refused) and restore on the same port: the database goes away and comes
    back for the daemon only. Or freeze: connections stay open and new ones
    are accepted, but nothing goes through until ``thaw`` (packets dropped,
    not refused: a partition, as the client sees it). Or slow: ``delay``
    seconds before each chunk goes through, both ways. ``host``: the address
    it listens on (a bridge's, for engines in network namespaces)."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = ("127.0.0.1", target_port)
        self.host = host
        self.delay = 0.0
        with socket.socket() as probe:
            probe.bind((host, 0))
            self.port = probe.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._flowing = threading.Event()
        self._flowing.set()

    def start(self) -> None:
        self._listener = socket.create_server((self.host, self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            self._flowing.wait()
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the server is down (killed): as it would refuse
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @property
    def up(self) -> bool:
        return self._listener is not None

    def cut(self) -> None:
        assert self._listener is not None
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        self._listener.close()
        self._listener = None
        with self._lock:
            conns, self._open = self._open, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()


def through(url: str, port: int) -> str:
    """``url`` pointed at a proxy on ``port`` of 127.0.0.1, its query (the
    test's Redis key namespace) kept."""
    from urllib.parse import urlsplit

    return urlsplit(url)._replace(netloc=f"127.0.0.1:{port}").geturl()
