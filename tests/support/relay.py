"""A TCP relay that a test can cut, to a TCP address or a Unix socket: a network fault
between the service and its database, made with real sockets."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class Relay:
    """Listens on 127.0.0.1 and pumps each connection to ``upstream`` (a ``(host, port)``
    or a Unix socket path). ``cut`` breaks every connection and refuses new ones; ``start``
    again listens on the same port. ``cut_on``: bytes that, when a client sends them, cut
    the relay before they are forwarded (a fault in the middle of a transaction)."""

    def __init__(self, upstream: tuple[str, int] | str, cut_on: bytes | None = None) -> None:
        self.upstream = upstream
        self.cut_on = cut_on
        self.port = 0
        self.tripped = threading.Event()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def start(self) -> Relay:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.port, self._listener = listener.getsockname()[1], listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _connect(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
            return server
        return socket.create_connection(self.upstream)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = self._connect()
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and self.cut_on is not None and self.cut_on in data:
                    self.cut_on = None
                    self.tripped.set()
                    self.cut()
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        if self._listener is not None:
            with suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        for sock in self._sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()
