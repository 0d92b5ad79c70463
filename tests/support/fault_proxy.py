"""A TCP proxy the tests put between SQE and a store, to make the network lie on loopback.

    proxy = FaultProxy(("127.0.0.1", 6379))     # listens on 127.0.0.1:<proxy.port>
    proxy.lose_reply_to(b"EVALSHA")             # the next such request runs; its reply is lost
    proxy.cut()                                 # every connection through it closed now
    proxy.blackhole(2.0)                        # for 2 s, nothing passes either way
    proxy.stop()

Each client connection gets its own connection upstream and two threads that copy bytes
between them.  ``lose_reply_to(marker)`` arms the proxy once: the next chunk a client sends
that holds ``marker`` is forwarded, and when the server's reply comes it is dropped and both
sides are closed, so the server did the work and the client sees ``Connection closed by
server``.  Only loopback addresses are ever used.
"""

from __future__ import annotations

import socket
import threading
import time

__all__ = ["FaultProxy"]


class FaultProxy:
    """A threaded TCP proxy to ``upstream`` with faults on demand (see the module docstring)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        assert upstream[0] in ("127.0.0.1", "localhost"), "a fault proxy stays on loopback"
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._marker: bytes | None = None  # armed: lose the reply to the request holding it
        self._losing: set[int] = set()  # ids of the pairs whose next reply is lost
        self._dark_until = 0.0
        self.replies_lost = 0
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """A ``redis://`` URL of the proxy (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, marker: bytes) -> None:
        """Forward the next request that holds ``marker``, then drop its reply and close."""
        with self._lock:
            self._marker = marker

    def cut(self) -> None:
        """Close every connection through the proxy now (new ones are taken as before)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _close(*pair)

    def blackhole(self, seconds: float) -> None:
        """For ``seconds``, pass nothing either way (bytes wait; new connections wait too)."""
        self._dark_until = time.monotonic() + seconds

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()
        self.cut()

    def _wait_light(self) -> None:
        while time.monotonic() < self._dark_until and not self._stopped:
            time.sleep(0.01)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._wait_light()
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
            pair_id = id(client)
            threading.Thread(target=self._pump, args=(client, server, pair_id, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, pair_id, False),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, pair_id: int,
              from_client: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._wait_light()
                if from_client:
                    with self._lock:
                        if self._marker is not None and self._marker in data:
                            self._marker = None
                            self._losing.add(pair_id)
                elif pair_id in self._losing:
                    with self._lock:
                        self._losing.discard(pair_id)
                        self.replies_lost += 1
                    break  # the reply is dropped; both sides are closed below
                sink.sendall(data)
        except OSError:
            pass
        _close(source, sink)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
