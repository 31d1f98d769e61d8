"""A loopback HTTP server that speaks the Hugging Face Hub's resolve protocol (for tests).

It serves what the real ``huggingface_hub`` 2.x client needs for ``hf_hub_download``:
``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` (``/datasets/{repo_id}/...`` for
datasets) with ``X-Repo-Commit`` (a branch added with ``add_branch`` resolves to its
commit), ``ETag``, ``X-Linked-Etag``/``X-Linked-Size`` (LFS files), ``Content-Length``,
``Accept-Ranges`` and ``Range`` requests; 404 with the ``X-Error-Code`` the client maps to
its errors (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) and 401 for a private
repository asked without its token. It also serves plain files and redirects (``add_static``,
``add_redirect``) for URL-source tests. It binds 127.0.0.1 on a random port
(``HubServer(tls=context)`` serves https) and counts the connections made to it.

Usage (the ``hub_server`` fixture below does all of this)::

    from tests.support.hubserver import HubServer, hub_env

    def test_it(hub_server: HubServer) -> None:       # with the fixture imported, or:
        hub_server.add_file("owner/repo", REV, "x-1.0-py3-none-any.whl", data)
        hub_server.tamper("x-1.0-py3-none-any.whl", "flip")   # or "truncate", "short", None
        ...  # kvenv.fetch.fetch_all(...) with an HfSource(repo="owner/repo", revision=REV, ...)
        assert hub_server.count("GET") == 1
        assert hub_server.requests[-1].had_auth           # never the token itself

To use the fixture in a test module, import it by name and list it in the module's
``__all__`` (so linters see the import as used)::

    from tests.support.hubserver import HubServer, hub_server

    __all__ = ["hub_server"]

or build your own fixture around :func:`hub_env` (``with hub_env(monkeypatch, dir) as s``).
The fixture:

- sets ``HF_ENDPOINT`` to the server (kvenv reads it at call time and passes ``endpoint=``
  explicitly, because ``huggingface_hub`` reads ``HF_ENDPOINT`` only once, at import),
- points ``HF_HOME`` and the client's token path at a temporary directory and removes
  ``HF_TOKEN``, ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` (tests set them as needed),
- enables :func:`kvenv._util.urls.allow_loopback_http`, the test-only seam that lets kvenv
  talk plain http to 127.0.0.1 (kvenv refuses http everywhere else).
"""

from __future__ import annotations

import hashlib
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import attrs
import pytest

Tamper = Literal["flip", "truncate", "short"]


@attrs.frozen
class Seen:
    """One request as the server saw it (whether a token was sent, never the token)."""

    method: str
    path: str
    had_auth: bool
    status: int


@attrs.define
class _Repo:
    revisions: dict[str, dict[str, tuple[bytes, bool]]] = attrs.field(factory=dict)
    token_digest: str | None = None
    branches: dict[str, str] = attrs.field(factory=dict)  # branch or tag -> commit


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class _CountingServer(ThreadingHTTPServer):
    """A threading HTTP server that counts the connections it accepts."""

    accepted = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        self.accepted += 1  # called from the serving thread only
        super().process_request(request, client_address)


class HubServer:
    """The server. Use as a context manager, or through the ``hub_server`` fixture."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._static: dict[str, bytes] = {}
        self._redirects: dict[str, tuple[int, str]] = {}
        self._tamper: dict[str, Tamper] = {}
        self._lock = threading.Lock()
        self.requests: list[Seen] = []
        self._httpd = _CountingServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:  # https: the handshake made as each connection is accepted
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host!s}:{port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # -- content ------------------------------------------------------------------------------

    def add_file(
        self,
        repo_id: str,
        revision: str,
        filename: str,
        data: bytes,
        *,
        repo_type: str = "model",
        lfs: bool = True,
    ) -> str:
        """Serve ``data`` as ``filename`` at ``revision``; returns the resolve path."""
        with self._lock:
            repo = self._repos.setdefault((repo_type, repo_id), _Repo())
            repo.revisions.setdefault(revision, {})[filename] = (data, lfs)
        prefix = "/datasets" if repo_type == "dataset" else ""
        return f"{prefix}/{repo_id}/resolve/{revision}/{filename}"

    def add_branch(
        self, repo_id: str, branch: str, commit: str, *, repo_type: str = "model"
    ) -> None:
        """Make ``branch`` (or a tag) name ``commit``: a resolve at the branch serves the
        commit's files with ``X-Repo-Commit: <commit>``, as the Hub does."""
        with self._lock:
            self._repos.setdefault((repo_type, repo_id), _Repo()).branches[branch] = commit

    def require_token(self, repo_id: str, token: str, *, repo_type: str = "model") -> None:
        """Make the repository private: only ``Authorization: Bearer <token>`` may read it."""
        with self._lock:
            self._repos.setdefault((repo_type, repo_id), _Repo()).token_digest = _digest(token)

    def tamper(self, filename: str, mode: Tamper | None) -> None:
        """Serve ``filename`` wrongly: ``flip`` a byte (same size), ``truncate`` to half (the
        headers agree with the short body), or ``short`` (full length announced, half sent)."""
        with self._lock:
            if mode is None:
                self._tamper.pop(filename, None)
            else:
                self._tamper[filename] = mode

    def add_static(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``path`` (for URL sources); returns the full URL."""
        with self._lock:
            self._static[path] = data
        return self.url + path

    def add_redirect(self, path: str, location: str, code: int = 302) -> str:
        with self._lock:
            self._redirects[path] = (code, location)
        return self.url + path

    @property
    def connections(self) -> int:
        """How many TCP connections clients opened to the server so far."""
        return self._httpd.accepted

    def count(self, method: str | None = None, contains: str = "") -> int:
        with self._lock:
            return sum(
                1
                for seen in self.requests
                if (method is None or seen.method == method) and contains in seen.path
            )

    # -- protocol -----------------------------------------------------------------------------

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _lookup(
        self, raw_path: str, authorization: str | None
    ) -> tuple[int, dict[str, str], bytes, str | None]:
        """(status, headers, body, filename) for a resolve path."""
        parts = raw_path.split("/")[1:]
        repo_type = "model"
        if parts and parts[0] in ("datasets", "spaces"):
            repo_type = parts[0][:-1]
            parts = parts[1:]
        if len(parts) < 5 or parts[2] != "resolve":
            return 404, {"X-Error-Code": "RepoNotFound"}, b"", None
        repo_id = f"{unquote(parts[0])}/{unquote(parts[1])}"
        revision = unquote(parts[3])
        filename = unquote("/".join(parts[4:]))
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            if repo is None:
                return 404, {"X-Error-Code": "RepoNotFound"}, b"", None
            if repo.token_digest is not None:
                token = (authorization or "").removeprefix("Bearer ").strip()
                if not token or _digest(token) != repo.token_digest:
                    headers = {
                        "X-Error-Code": "RepoNotFound",
                        "X-Error-Message": "Invalid username or password.",
                    }
                    return 401, headers, b"", None
            revision = repo.branches.get(revision, revision)
            files = repo.revisions.get(revision)
            if files is None:
                return 404, {"X-Error-Code": "RevisionNotFound"}, b"", None
            entry = files.get(filename)
            if entry is None:
                headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": revision}
                return 404, headers, b"", None
            data, lfs = entry
        sha = hashlib.sha256(data).hexdigest()
        headers = {"X-Repo-Commit": revision, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}
        if lfs:
            headers["X-Linked-Etag"] = f'"{sha}"'
        return 200, headers, data, filename


def _handler_for(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None  # quiet, and never logs a header

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _serve(self, *, head: bool) -> None:
            path = urlsplit(self.path).path
            with server._lock:
                static = server._static.get(path)
                redirect = server._redirects.get(path)
            if redirect is not None:
                code, location = redirect
                self._reply(code, {"Location": location})
            elif static is not None:
                self._send_data(200, {}, static, path.rsplit("/", 1)[-1], head)
            else:
                authorization = self.headers.get("Authorization")
                status, headers, body, filename = server._lookup(path, authorization)
                if status != 200 or filename is None:
                    self._reply(status, headers)
                else:
                    self._send_data(200, headers, body, filename, head)

        def _send_data(
            self,
            status: int,
            headers: dict[str, str],
            body: bytes,
            filename: str,
            head: bool,
        ) -> None:
            with server._lock:
                mode = server._tamper.get(filename)
            if mode == "truncate":
                body = body[: len(body) // 2]
            if mode == "flip" and body:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            start = 0
            range_header = self.headers.get("Range")
            if range_header and range_header.startswith("bytes=") and not head:
                first = range_header.removeprefix("bytes=").split("-")[0]
                start = int(first) if first.isdigit() else 0
                if start:
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
            if "X-Linked-Etag" in headers:
                headers["X-Linked-Size"] = str(len(body))
            headers["Accept-Ranges"] = "bytes"
            payload = body[start:]
            self._record(status)  # before the client can see the answer and look
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if head:
                return
            if mode == "short":
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

        def _record(self, status: int) -> None:
            had_auth = self.headers.get("Authorization") is not None
            server._record(Seen(self.command, urlsplit(self.path).path, had_auth, status))

        def _reply(self, status: int, headers: dict[str, str]) -> None:
            self._record(status)  # before the client can see the answer and look
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextmanager
def hub_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> Iterator[HubServer]:
    """Start a server and point ``huggingface_hub`` and kvenv at it (see the module doc)."""
    from huggingface_hub import constants

    from kvenv._util.urls import allow_loopback_http

    home.mkdir(parents=True, exist_ok=True)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with HubServer() as server, allow_loopback_http():
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def hub_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    """A running :class:`HubServer` with ``HF_ENDPOINT`` pointing at it (see the module doc)."""
    with hub_env(monkeypatch, tmp_path / "hf-home") as server:
        yield server
