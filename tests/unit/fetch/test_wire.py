"""The two download clients (:mod:`kvenv.fetch.wire` where no proxy is set, httpx2 where one
is): which one a run takes, a proxy really used, a kept connection the server closed, and the
same bytes, checks and messages from both (``test_url.py`` and ``test_https.py`` run on both)."""

from __future__ import annotations

import http.client
import socket
import socketserver
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kvenv._util.hashing import HashingWriter
from kvenv._util.urls import allow_loopback_http
from kvenv.errors import FetchError, TransientFetchError
from kvenv.fetch import http as kvenv_http
from kvenv.fetch import wire
from tests.support.hubserver import HubServer

PROXY_VARIABLES = (
    "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
    "NO_PROXY", "no_proxy",
)  # fmt: skip


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _get(url: str, connections: kvenv_http.Connections, target: Path) -> bytes:
    with target.open("wb") as raw:
        kvenv_http.download(url, HashingWriter(raw), connections=connections)
    return target.read_bytes()


# --- which client ------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_proxy_env")
@pytest.mark.parametrize(
    ("variables", "proxied"),
    [
        ({}, False),
        ({"HTTPS_PROXY": "http://proxy.invalid:3128"}, True),
        ({"http_proxy": "proxy.invalid:3128"}, True),
        ({"ALL_PROXY": "socks5://proxy.invalid:1080"}, True),
        ({"HTTPS_PROXY": "http://proxy.invalid:3128", "NO_PROXY": "*"}, False),
        ({"HTTPS_PROXY": "http://proxy.invalid:3128", "no_proxy": "a.invalid,*"}, False),
        ({"HTTPS_PROXY": "http://proxy.invalid:3128", "NO_PROXY": "files.invalid"}, True),
    ],
)
def test_a_configured_proxy_sends_downloads_over_httpx(
    variables: dict[str, str], proxied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert kvenv_http.proxy_configured() is proxied
    with kvenv_http.Connections() as connections:
        assert (connections.direct() is None) is proxied


class _Proxy(ThreadingHTTPServer):
    """A loopback forward proxy for http:// URLs that records what it relayed."""

    daemon_threads = True

    def __init__(self) -> None:
        self.relayed: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def do_GET(self) -> None:
        self.server.relayed.append(self.path)
        parts = urlsplit(self.path)
        upstream = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        upstream.request("GET", parts.path, headers={"Accept-Encoding": "identity"})
        answer = upstream.getresponse()
        body = answer.read()
        upstream.close()
        self.send_response(answer.status)
        for name in ("Location", "Content-Type"):
            if answer.getheader(name):
                self.send_header(name, answer.getheader(name) or "")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.usefixtures("no_proxy_env")
def test_downloads_go_through_the_configured_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _Proxy()
    serving = threading.Thread(target=proxy.serve_forever, daemon=True)
    serving.start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
        with HubServer() as server, allow_loopback_http():
            url = server.add_static("/files/a.bin", b"through the proxy" * 1000)
            with kvenv_http.Connections() as connections:
                assert connections.direct() is None
                assert _get(url, connections, tmp_path / "a.bin") == b"through the proxy" * 1000
        assert proxy.relayed == [url]
    finally:
        proxy.shutdown()
        proxy.server_close()


# --- kept connections ------------------------------------------------------------------------


class _OneRequestHandler(socketserver.BaseRequestHandler):
    """Answers one request with a keep-alive response, then closes the connection: a server
    whose idle timeout has passed by the time the client uses the connection again."""

    def handle(self) -> None:
        assert isinstance(self.server, _ClosingServer)
        self.server.accepted += 1
        request = b""
        while b"\r\n\r\n" not in request:
            piece = self.request.recv(4096)
            if not piece:
                return
            request += piece
        body = b"x" * 5000
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
            % (len(body), body)
        )
        self.request.shutdown(socket.SHUT_RDWR)


class _ClosingServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    accepted = 0  # connections served (counted by the handler)


@pytest.fixture
def closing_server() -> Iterator[tuple[str, _ClosingServer]]:
    server = _ClosingServer(("127.0.0.1", 0), _OneRequestHandler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("no_proxy_env")
def test_a_kept_connection_the_server_closed_is_replaced(
    closing_server: tuple[str, _ClosingServer], tmp_path: Path
) -> None:
    base, server = closing_server
    with allow_loopback_http(), kvenv_http.Connections() as connections:
        for number in range(3):
            assert _get(f"{base}/f{number}", connections, tmp_path / f"f{number}") == b"x" * 5000
    assert server.accepted == 3


def test_the_pool_keeps_what_was_read_to_the_end_only() -> None:
    with HubServer() as server, allow_loopback_http():
        server.add_static("/files/a.bin", b"a" * 100_000)
        origin = ("http", "127.0.0.1", int(server.url.rsplit(":", 1)[1]))
        pool = wire.Pool(lambda: pytest.fail("no TLS here"))
        try:
            reply = pool.send(origin, "/files/a.bin", {}, 10.0)
            buffer = memoryview(bytearray(1000))
            assert reply.readinto(buffer) == 1000
            reply.release()  # not read to the end: closed, not kept
            reply = pool.send(origin, "/files/a.bin", {}, 10.0)
            assert sum(iter(lambda: reply.readinto(buffer), 0)) == 100_000
            reply.release()  # read to the end: kept
            reply = pool.send(origin, "/files/a.bin", {}, 10.0)
            reply.close()
        finally:
            pool.close()
        assert server.connections == 2


@pytest.mark.usefixtures("no_proxy_env")
def test_a_non_ascii_host_is_one_clear_error(tmp_path: Path) -> None:
    with kvenv_http.Connections() as connections, pytest.raises(FetchError) as info:
        _get("https://exa\u00admple..invalid/a.whl", connections, tmp_path / "a.whl")
    assert info.value.message.startswith("download failed: ")


class _FullDisk(HashingWriter):
    def write(self, chunk: bytes | bytearray | memoryview) -> int:
        raise OSError(28, "No space left on device")


@pytest.mark.usefixtures("download_client")
def test_the_sinks_own_error_is_not_a_download_error(tmp_path: Path) -> None:
    """A write that fails (a full disk) is the disk's error, not a transient download failure
    to retry."""
    with HubServer() as server, allow_loopback_http():
        url = server.add_static("/files/a.bin", b"a" * 100_000)
        with (tmp_path / "a.bin").open("wb") as raw, pytest.raises(OSError) as info:
            kvenv_http.download(url, _FullDisk(raw))
    assert not isinstance(info.value, FetchError) and info.value.errno == 28


@pytest.mark.usefixtures("download_client")
def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/a.whl"
        with (
            allow_loopback_http(),
            (tmp_path / "a.whl").open("wb") as raw,
            pytest.raises(TransientFetchError, match=r"timed out for http://127\.0\.0\.1"),
        ):
            kvenv_http.download(url, HashingWriter(raw), timeout=0.3)


@pytest.mark.usefixtures("no_proxy_env")
def test_each_host_is_looked_up_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four workers open four connections to one host and ask the resolver once."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def counted(host: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        threading.Event().wait(0.05)  # the others arrive while the first lookup runs
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    with HubServer() as server, allow_loopback_http(), kvenv_http.Connections() as connections:
        urls = [server.add_static(f"/files/{n}.bin", b"n" * 300_000) for n in range(12)]

        def one(number: int) -> bytes:
            return _get(urls[number], connections, tmp_path / f"{number}.bin")

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(one, range(12))) == [b"n" * 300_000] * 12
        assert 2 <= server.connections <= 4
    assert asked == ["127.0.0.1"]


def test_a_failed_lookup_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[Any] = [socket.gaierror(-3, "Temporary failure in name resolution")]
    real = socket.getaddrinfo

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if answers:
            raise answers.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", flaky)
    names = wire.Names()
    with pytest.raises(socket.gaierror):
        names.addresses("127.0.0.1", 80)
    assert names.addresses("127.0.0.1", 80)[0][3][:2] == ("127.0.0.1", 80)


def test_a_lookup_that_fails_oddly_releases_those_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name the resolver refuses with a codec error (not an OSError) fails every thread
    waiting for that lookup instead of leaving them waiting."""
    started = threading.Event()

    def refused(*args: Any, **kwargs: Any) -> Any:
        started.set()
        threading.Event().wait(0.1)
        raise UnicodeError("label too long")

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    names = wire.Names()
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(names.addresses, "x.invalid", 443) for _ in range(3)]
        for future in futures:
            with pytest.raises(UnicodeError):
                future.result(timeout=10)
