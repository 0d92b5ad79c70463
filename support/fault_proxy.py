"""A TCP proxy the tests put between SQE and a store, to make the network lie on loopback.

    proxy = FaultProxy(("127.0.0.1", 6379))     # listens on 127.0.0.1:<proxy.port>
    proxy.lose_reply_to(b"EVALSHA")             # the next such request runs; its reply is lost
    proxy.cut()                                 # every connection through it closed now
    proxy.blackhole(2.0)                        # for 2 s, nothing passes either way
    proxy.delay(0.3, 10.0)                      # for 10 s, every chunk waits 0.3 s
    proxy.stop()

Each client connection gets its own connection upstream and two threads that copy bytes
between them.  ``lose_reply_to(marker)`` arms the proxy once: the next chunk a client sends
that holds ``marker`` is forwarded, and when the server's reply comes it is dropped and both
sides are closed, so the server did the work and the client sees ``Connection closed by
server``.  Only loopback addresses are ever used.

A Kafka broker tells its clients where to connect next (its advertised address, in Metadata
and FindCoordinator responses), so a proxy in front of it must change that address or the
clients go around it.  With ``kafka=(advertised, ours)`` the proxy reads the Kafka protocol's
frames (a 4-byte size, then the request's API key and correlation id, or the response's
correlation id) and, in the responses to those two requests, replaces the broker's host
``advertised`` with ``ours`` -- two host strings of the same length (the broker listens on
127.0.0.2, the proxy on the same port of 127.0.0.1), so no size changes; an int marker of
``lose_reply_to`` is then an API key (0: Produce).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

__all__ = ["FaultProxy"]

_ADDRESS_APIS = (3, 10)  # Metadata, FindCoordinator: their responses name brokers


class FaultProxy:
    """A threaded TCP proxy to ``upstream`` with faults on demand (see the module docstring)."""

    def __init__(self, upstream: tuple[str, int], port: int = 0,
                 kafka: tuple[bytes, bytes] | None = None) -> None:
        assert upstream[0].startswith("127.") or upstream[0] == "localhost", \
            "a fault proxy stays on loopback"
        assert kafka is None or len(kafka[0]) == len(kafka[1]), "hosts of one length"
        self.upstream, self.kafka = upstream, kafka
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._marker: bytes | int | None = None  # armed: lose the reply to the request
        self._losing: set[int] = set()  # ids of the pairs whose next reply is lost
        self._asked: dict[int, set[int]] = {}  # per pair: correlation ids naming brokers
        self._dark_until = 0.0
        self._slow_until, self._slow = 0.0, 0.0
        self.replies_lost = 0
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """A ``redis://`` URL of the proxy (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, marker: bytes | int) -> None:
        """Forward the next request that holds ``marker`` (with ``kafka``, an int: the next
        request with that API key), then drop its reply and close."""
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

    def delay(self, latency: float, seconds: float) -> None:
        """For ``seconds``, hold every chunk ``latency`` seconds before passing it on."""
        self._slow, self._slow_until = latency, time.monotonic() + seconds

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()
        self.cut()

    def _wait_light(self) -> None:
        while time.monotonic() < self._dark_until and not self._stopped:
            time.sleep(0.01)
        if time.monotonic() < self._slow_until:
            time.sleep(self._slow)

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
            self._asked[pair_id] = set()
            for args in ((client, server, pair_id, True), (server, client, pair_id, False)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, pair_id: int,
              from_client: bool) -> None:
        frames = None
        if self.kafka:
            frames = _Frames(12, None) if from_client else \
                _Frames(8, lambda head: self._names_brokers(head, pair_id))
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._wait_light()
                for piece, head in (frames.feed(data) if frames else [(data, data)]):
                    if head is not None and from_client:
                        self._request(head, pair_id)
                    elif head is not None and pair_id in self._losing:
                        with self._lock:
                            self._losing.discard(pair_id)
                            self.replies_lost += 1
                        raise _Lost
                    sink.sendall(piece)
        except (OSError, _Lost):
            pass  # the reply is dropped or a side closed: both sides are closed below
        self._asked.pop(pair_id, None)
        _close(source, sink)

    def _request(self, head: bytes, pair_id: int) -> None:
        """Note what a request asks (``head``: its first chunk, or with ``kafka`` its frame's
        size, API key, version and correlation id): one the armed marker names, one naming
        brokers."""
        api = struct.unpack_from(">h", head, 4)[0] if self.kafka else None
        with self._lock:
            marker = self._marker
            hit = (api == marker) if isinstance(marker, int) else \
                (marker is not None and marker in head)
            if hit:
                self._marker = None
                self._losing.add(pair_id)
        if api in _ADDRESS_APIS:
            self._asked.get(pair_id, set()).add(struct.unpack_from(">i", head, 8)[0])

    def _names_brokers(self, head: bytes, pair_id: int) -> Callable[[bytes], bytes] | None:
        """For a response that answers a request naming brokers (``head``: its size and
        correlation id), what makes the broker's advertised host the proxy's."""
        assert self.kafka is not None
        asked = self._asked.get(pair_id, set())
        correlation = struct.unpack_from(">i", head, 4)[0]
        if correlation not in asked:
            return None
        asked.discard(correlation)
        advertised, ours = self.kafka
        return lambda frame: frame.replace(advertised, ours)


class _Lost(Exception):
    """The reply armed to be lost came: drop it and close the pair."""


class _Frames:
    """Cuts a byte stream into Kafka frames (a 4-byte big-endian size, then the body):
    :meth:`feed` gives pieces to pass on, each frame's first piece with its first ``head``
    bytes.  A frame ``whole`` gives a change for is held until it is complete and passed
    changed; any other passes as it comes (a fetch response can be many megabytes)."""

    def __init__(self, head: int,
                 whole: Callable[[bytes], Callable[[bytes], bytes] | None] | None) -> None:
        self.head, self.whole = head, whole
        self._buffer = bytearray()
        self._remaining = 0  # bytes of the frame being passed through still to come
        self._change: Callable[[bytes], bytes] | None = None  # the frame being held

    def feed(self, data: bytes) -> list[tuple[bytes, bytes | None]]:
        pieces: list[tuple[bytes, bytes | None]] = []
        view = memoryview(data)
        while view:
            if self._remaining:
                piece = bytes(view[:self._remaining])
                pieces.append((piece, None))
                self._remaining -= len(piece)
                view = view[len(piece):]
                continue
            self._buffer += view
            view = memoryview(b"")
            if len(self._buffer) < self.head:
                break
            end = 4 + struct.unpack_from(">i", self._buffer)[0]
            head = bytes(self._buffer[:self.head])
            if self._change is None and self.whole is not None:
                self._change = self.whole(head)
            if self._change is not None:  # held until whole, then changed
                if len(self._buffer) < end:
                    break
                pieces.append((self._change(bytes(self._buffer[:end])), head))
                self._change = None
            else:
                taken = min(end, len(self._buffer))
                pieces.append((bytes(self._buffer[:taken]), head))
                self._remaining = end - taken
            view = memoryview(bytes(self._buffer[min(end, len(self._buffer)):]))
            self._buffer = bytearray()
        return pieces


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
