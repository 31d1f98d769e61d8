"""A cold apply runs as a pipeline (kvenv.env.store.Unpacker, kvenv.fetch.core.fetch_all's
``on_ready``): a wheel is unpacked as soon as it has arrived and been verified, while the others
still download, and the largest downloads start first. Observed through the server, not by the
clock: the server holds one download back until the store shows another wheel unpacked."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvenv._util.urls import allow_loopback_http
from kvenv.env.store import lookup
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    helper_wheel,
    host_snapshot,
    locations,
    native_wheel,
    sha256_of,
    write_project,
)
from tests.support.wheels import build_wheel


class _Server:
    """Serves wheels by name; ``hold[name]`` is called before that one is sent (it may wait)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.order: list[str] = []
        self.hold: dict[str, object] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                name = self.path.rsplit("/", 1)[-1]
                server.order.append(name)
                wait = server.hold.get(name)
                if callable(wait):
                    wait()
                data = server.files.get(name)
                if data is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/files/{name}"


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server()
    running.thread.start()
    try:
        with allow_loopback_http():
            yield running
    finally:
        running.httpd.shutdown()
        running.httpd.server_close()


def _served_project(
    tmp_path: Path, server: _Server, sizes: dict[str, int]
) -> tuple[Project, dict[str, Path]]:
    """A project whose overlay wheels (one per name, with a payload of about that many bytes
    of incompressible data) are downloaded from ``server``."""
    wheels = tmp_path / "proj" / "wheels"
    built = {
        name: build_wheel(
            wheels,
            name,
            "1.0",
            files={f"{name}/__init__.py": "X = 1\n", f"{name}/blob.bin": os.urandom(size)},
        )
        for name, size in sizes.items()
    }
    project = write_project(
        tmp_path / "proj",
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels), *built.values()],
    )
    lock = project.lock_path.read_text()
    for wheel in built.values():
        server.files[wheel.name] = wheel.read_bytes()
        lock = lock.replace(f'path = "../wheels/{wheel.name}"', f'url = "{server.url(wheel.name)}"')
    project.lock_path.write_text(lock)
    return project, built


def test_the_largest_download_starts_first(tmp_path: Path, server: _Server) -> None:
    sizes = {"aaasmall": 1_000, "mmmlarge": 400_000, "zzzmiddle": 60_000}
    project, built = _served_project(tmp_path, server, sizes)
    site = fake_host_site(tmp_path)
    result = apply(
        project.loaded(), project.lock(), host_snapshot(site), locations(tmp_path), jobs=1
    )
    assert result.status == "applied"
    by_size = sorted(built.values(), key=lambda w: -w.stat().st_size)
    assert server.order == [w.name for w in by_size]


def test_a_wheel_is_unpacked_while_another_still_downloads(tmp_path: Path, server: _Server) -> None:
    project, built = _served_project(tmp_path, server, {"big": 300_000, "late": 1_000})
    where = locations(tmp_path)
    big_sha = sha256_of(built["big"])
    seen: list[bool] = []

    def until_big_is_unpacked() -> None:
        # the download of "late" does not end before "big" is in the store (or 30 s passed:
        # then the apply went on without a pipeline, and the test fails below)
        done = threading.Event()
        for _ in range(3000):
            if lookup(where.store, big_sha) is not None:
                break
            done.wait(0.01)
        seen.append(lookup(where.store, big_sha) is not None)

    server.hold[built["late"].name] = until_big_is_unpacked
    site = fake_host_site(tmp_path)
    result = apply(project.loaded(), project.lock(), host_snapshot(site), where, jobs=4)
    assert result.status == "applied"
    assert seen == [True]
