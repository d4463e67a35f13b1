"""A TCP proxy on 127.0.0.1 that counts the round trips between its clients and their server.

A round trip is counted each time a client starts sending after its server has sent, on
each connection: a request that arrives in pieces, or requests pipelined before any answer,
count once, and so does an answer in pieces. The count is the number of times a client
waited on the network, whatever the network's latency; the proxy's own latency does not
change it.
"""

import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from types import TracebackType
from typing import Self

CHUNK = 65536


class _Turn:
    """Which side of one connection sent last."""

    __slots__ = ("server_sent_last",)

    def __init__(self) -> None:
        # A new connection's first message is its client's, and the first round trip.
        self.server_sent_last = True


class Proxy:
    """Forwards each connection made to ``port`` to a new connection from ``connect``.

    Use it as a context manager: leaving it closes the listener and every connection,
    which the clients then see as their server gone.
    """

    def __init__(self, connect: Callable[[], socket.socket]) -> None:
        """Listen on a free port of 127.0.0.1; ``connect`` opens a connection to the server."""
        self._connect = connect
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._round_trips = 0
        self._closing = False
        self._sockets: list[socket.socket] = [self._listener]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def round_trips(self) -> int:
        """Round trips so far, over every connection."""
        with self._lock:
            return self._round_trips

    def _accept(self) -> None:
        """Take each connection, open its server's, and start forwarding both ways."""
        while True:
            client, _ = self._listener.accept()
            with self._lock:
                closing = self._closing
            if closing:  # the connection __exit__ makes to wake this thread
                client.close()
                return
            try:
                server = self._connect()
            except OSError:
                client.close()  # its client sees the server gone, as it would without a proxy
                continue
            for end in (client, server):
                if end.family != socket.AF_UNIX:  # each message goes out as it is written
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            turn = _Turn()
            pumps = [
                threading.Thread(
                    target=self._pump, args=(client, server, turn), kwargs={"from_client": True}
                ),
                threading.Thread(
                    target=self._pump, args=(server, client, turn), kwargs={"from_client": False}
                ),
            ]
            with self._lock:
                self._sockets += [client, server]
                self._threads += pumps
            for pump in pumps:
                pump.daemon = True
                pump.start()

    def _pump(
        self, source: socket.socket, target: socket.socket, turn: _Turn, *, from_client: bool
    ) -> None:
        """Forward what ``source`` sends to ``target``, counting round trips, until one closes.

        The turn changes before the bytes go on, so a client cannot answer before its
        server's turn is recorded.
        """
        with suppress(OSError):
            while data := source.recv(CHUNK):
                with self._lock:
                    if from_client and turn.server_sent_last:
                        self._round_trips += 1
                    turn.server_sent_last = not from_client
                target.sendall(data)
        for end in (source, target):  # the other direction stops too
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Self:
        """The proxy, already listening."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the listener and every connection, once the threads using them have ended."""
        with self._lock:
            self._closing = True
        socket.create_connection(("127.0.0.1", self.port)).close()  # wakes accept()
        self._threads[0].join()
        with self._lock:
            ends, threads = list(self._sockets), list(self._threads)
        for end in ends:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)  # wakes recv() in the pumps
        for thread in threads:
            thread.join()
        for end in ends:
            end.close()
