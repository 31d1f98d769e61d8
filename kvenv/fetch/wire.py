"""Keep-alive HTTP/1.1 connections over the standard library's ``http.client``, for the one
request a wheel download makes: ``GET``, its body read into a caller's buffer.

Why a second client beside httpx2 (:mod:`kvenv.fetch.http` routes between them): a wheel's
body arrives one TLS record (16 KiB) per socket read, and httpx2 runs its h11 state machine
and several layers of Python for each record; the vLLM closure is 75,000 records. Here the
body is read with ``HTTPResponse.readinto`` into a 256 KiB buffer, a loop in C (the buffered
reader) around the socket's reads: the same downloads took half the CPU (3.3 s against
6.9 s for the vLLM closure's 1.24 GB, 8 threads; ``docs/performance.md``).

What this module does not do is policy: which URLs may be fetched, redirects, credentials and
messages are :mod:`kvenv.fetch.http`'s. It opens connections to an origin (``https`` with the
given SSL context, ``http`` only where the caller allowed it), keeps the idle ones, sends a
request, and retries once on a fresh connection when a kept one turns out to have been closed
by the server (a keep-alive race: the request never reached it).

Each host's name is looked up once per pool (:class:`Names`; threads that ask at the same time
wait for the one lookup): a resolver that drops a query now and then costs its retry timeout
(5 s with glibc's defaults) once per lookup, and 8 download workers opening connections to the
same host would otherwise make 8 lookups. A failed lookup is not kept.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from email.message import Message
from typing import Literal
from urllib.parse import urlsplit

# Idle connections kept per origin; more are closed when given back.
IDLE_PER_ORIGIN = 32
# What a kept connection that the server closed raises when it is used again.
STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)

_Origin = tuple[str, str, int]  # scheme, host (IDNA-encoded), port
Kind = Literal["timeout", "closed", "url", "connect"]


class WireError(Exception):
    """What went wrong on a connection, classified for the caller's message: ``timeout`` (a
    connect or read waited longer than the timeout), ``closed`` (the server closed or reset
    the connection before the response was whole), ``url`` (a URL ``http.client`` cannot ask
    for), ``connect`` (anything else: name lookup, refused, TLS). Its text is the cause's."""

    def __init__(self, kind: Kind, cause: Exception) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.kind: Kind = kind


_CLOSED = (
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)
# What the standard library's client and the socket raise for a request that failed.
_FAILURES = (OSError, http.client.HTTPException, ValueError)


def classify(exc: Exception) -> WireError:
    """``exc`` (one of ``_FAILURES``) as a :class:`WireError`."""
    if isinstance(exc, TimeoutError):
        return WireError("timeout", exc)
    if isinstance(exc, http.client.InvalidURL | ValueError):  # UnicodeError too (IDNA)
        return WireError("url", exc)
    if isinstance(exc, _CLOSED):
        return WireError("closed", exc)
    return WireError("connect", exc)


def split(url: str) -> tuple[_Origin, str]:
    """``url``'s origin and request target (path and query); its user-info is the caller's.
    Raises :class:`WireError` (``url``) for a host that has no ASCII form."""
    parts = urlsplit(url)
    try:
        host = (parts.hostname or "").encode("idna").decode("ascii")
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise classify(exc) from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (parts.scheme, host, port), target


class Reply:
    """One response: status, reason, headers, and its body read into a buffer. ``release``
    when the body has been read to its end (the connection is kept for the next request of
    the same origin), else ``close``."""

    def __init__(self, pool: Pool, origin: _Origin, connection: http.client.HTTPConnection) -> None:
        self._pool = pool
        self._origin = origin
        self._connection: http.client.HTTPConnection | None = connection
        self._response = connection.getresponse()
        self.status = int(self._response.status)
        self.reason = str(self._response.reason)
        self.headers: Message = self._response.msg

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def readinto(self, buffer: memoryview) -> int:
        """Fill ``buffer`` from the body; fewer bytes only at its end (0: the end)."""
        try:
            return self._response.readinto(buffer)
        except _FAILURES as exc:
            raise classify(exc) from None

    def release(self) -> None:
        """Keep the connection for the next request when the body was read to its end and the
        server keeps it open; else close it."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._response.isclosed() and not self._response.will_close:
            self._pool.give(self._origin, connection)
        else:
            self._response.close()
            connection.close()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        self._response.close()
        if connection is not None:
            connection.close()


Address = tuple[socket.AddressFamily, socket.SocketKind, int, tuple[object, ...]]


class Names:
    """Host names looked up once (thread-safe: one lookup per name however many threads ask
    at once; a failed one is forgotten, so the next connection asks again)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, int], Future[list[Address]]] = {}
        self._lock = threading.Lock()

    def addresses(self, host: str, port: int) -> list[Address]:
        key = (host, port)
        with self._lock:
            pending = self._found.get(key)
            mine = pending is None
            if pending is None:
                pending = self._found[key] = Future()
        if mine:
            try:
                found = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            except BaseException as exc:  # the threads waiting for it hear it too
                with self._lock:
                    del self._found[key]
                pending.set_exception(exc)
            else:
                pending.set_result([(f, t, p, a) for f, t, p, _, a in found])
        return pending.result()

    def connect(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """``socket.create_connection`` with the name looked up once (what ``http.client``
        calls to open its socket)."""
        last: OSError | None = None
        for family, kind, proto, where in self.addresses(*address):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(timeout)
                if source_address is not None:
                    sock.bind(source_address)
                sock.connect(where)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            return sock
        raise last or OSError(f"no address for {address[0]}")


class Pool:
    """Idle keep-alive connections by origin (thread-safe): each request takes one (or opens
    a new one) and gives it back when its body was read to the end."""

    def __init__(self, context: Callable[[], ssl.SSLContext]) -> None:
        self._context = context
        self._made: ssl.SSLContext | None = None
        self.names = Names()
        self._idle: dict[_Origin, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _ssl(self) -> ssl.SSLContext:
        with self._lock:
            if self._made is None:
                self._made = self._context()
            return self._made

    def _take(self, origin: _Origin) -> http.client.HTTPConnection | None:
        with self._lock:
            idle = self._idle.get(origin)
            return idle.pop() if idle else None

    def _open(self, origin: _Origin, timeout: float) -> http.client.HTTPConnection:
        scheme, host, port = origin
        connection: http.client.HTTPConnection
        if scheme == "https":
            connection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=self._ssl()
            )
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout)
        # the socket opened to the address looked up once (TLS still checks ``host``'s name)
        setattr(connection, "_create_connection", self.names.connect)
        return connection

    def give(self, origin: _Origin, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if not self._closed and len(idle) < IDLE_PER_ORIGIN:
                idle.append(connection)
                return
        connection.close()

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        """``GET url`` (its user-info ignored): the reply with its body unread. Raises
        :class:`WireError`."""
        origin, target = split(url)
        try:
            return self.send(origin, target, headers, timeout)
        except _FAILURES as exc:
            raise classify(exc) from None

    def send(
        self, origin: _Origin, target: str, headers: Mapping[str, str], timeout: float
    ) -> Reply:
        """``GET target`` (the path and query) on ``origin``: the reply with its body unread.
        Raises what ``http.client`` and the socket raise."""
        kept = self._take(origin)
        if kept is not None:
            kept.timeout = timeout
            if kept.sock is not None:
                kept.sock.settimeout(timeout)
            try:
                kept.request("GET", target, headers=dict(headers))
                return Reply(self, origin, kept)
            except STALE:
                kept.close()  # closed by the server while idle: the request never reached it
        connection = self._open(origin, timeout)
        try:
            connection.request("GET", target, headers=dict(headers))
            return Reply(self, origin, connection)
        except BaseException:
            connection.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for kept in self._idle.values() for c in kept]
            self._idle.clear()
        for connection in idle:
            connection.close()
