"""URL, local-path and index sources; the https-only policy; parallel fetches."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from kvenv._util.redact import redact_url
from kvenv._util.urls import allow_loopback_http, check_url, loopback_http_allowed
from kvenv.errors import FetchError, IntegrityError
from kvenv.fetch import fetch_all
from kvenv.model.fields import WheelFilename
from kvenv.model.profile import IndexSource
from kvenv.plan.artifacts import Artifact
from tests.support.hubserver import HubServer, Tamper
from tests.support.wheels import build_wheel, sha256_of

pytestmark = pytest.mark.usefixtures("download_client")  # each test on both clients


@pytest.fixture
def server() -> Iterator[HubServer]:
    with HubServer() as running, allow_loopback_http():
        yield running


def _wheel(directory: Path, name: str, version: str = "1.0") -> tuple[Path, str, int]:
    wheel = build_wheel(directory, name, version)
    return wheel, sha256_of(wheel), wheel.stat().st_size


def _served(server: HubServer, tmp_path: Path, name: str) -> tuple[Artifact, bytes]:
    wheel, sha, size = _wheel(tmp_path / "src", name)
    url = server.add_static(f"/files/{wheel.name}", wheel.read_bytes())
    artifact = Artifact(name, "1.0", wheel.name, sha, size, "overlay", url)
    return artifact, wheel.read_bytes()


# --- policy (unit level) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://example.invalid/x.whl",
        "ftp://example.invalid/x.whl",
        "file:///etc/passwd",
        "https:///no-host.whl",
        "http://127.0.0.1:8000/x.whl",
        "http://localhost:8000/x.whl",
        "http://[::1]:8000/x.whl",
    ],
)
def test_only_https_is_allowed(url: str) -> None:
    assert not loopback_http_allowed()
    with pytest.raises(FetchError, match="only https"):
        check_url(url)


def test_the_test_seam_allows_loopback_http_only() -> None:
    with allow_loopback_http():
        check_url("http://127.0.0.1:8000/x.whl")
        check_url("http://[::1]:8000/x.whl")
        with pytest.raises(FetchError, match="only https"):
            check_url("http://example.invalid/x.whl")
        with pytest.raises(FetchError, match="only https"):
            check_url("http://localhost:8000/x.whl")
    with pytest.raises(FetchError):
        check_url("http://127.0.0.1:8000/x.whl")


def test_redact_drops_credentials_and_queries() -> None:
    shown = redact_url("https://user:secret@files.example/a/b.whl?X-Amz-Signature=abc#frag")
    assert shown == "https://files.example/a/b.whl?…"
    assert "secret" not in shown and "abc" not in shown


def test_http_urls_are_refused_before_any_request(tmp_path: Path) -> None:
    with HubServer() as server:
        url = server.add_static("/files/a-1.0-py3-none-any.whl", b"data")
        artifact = Artifact("a", "1.0", "a-1.0-py3-none-any.whl", "1" * 64, 4, "overlay", url)
        with pytest.raises(FetchError, match="only https"):
            fetch_all([artifact], cache=tmp_path / "cache")
        assert server.requests == []


# --- through the loopback seam ------------------------------------------------------------------


def test_url_source_download_is_verified(server: HubServer, tmp_path: Path) -> None:
    artifact, data = _served(server, tmp_path, "alpha")
    got = fetch_all([artifact], cache=tmp_path / "cache")
    assert got[artifact.sha256].read_bytes() == data
    assert server.count("GET") == 1


def test_redirect_to_plain_http_is_refused(server: HubServer, tmp_path: Path) -> None:
    artifact, _ = _served(server, tmp_path, "alpha")
    assert isinstance(artifact.source, str)
    # The seam permits the loopback origin; the redirect target is a non-loopback http URL.
    redirect = server.add_redirect(
        "/moved/alpha-1.0-py3-none-any.whl", "http://example.invalid/alpha-1.0-py3-none-any.whl"
    )
    moved = attrs.evolve(artifact, source=redirect)
    with pytest.raises(FetchError, match="refusing redirect"):
        fetch_all([moved], cache=tmp_path / "cache")
    assert server.count("GET", "/moved/") == 1


def test_redirect_within_policy_is_followed(server: HubServer, tmp_path: Path) -> None:
    artifact, data = _served(server, tmp_path, "alpha")
    assert isinstance(artifact.source, str)
    redirect = server.add_redirect("/moved/alpha.whl", artifact.source)
    got = fetch_all([attrs.evolve(artifact, source=redirect)], cache=tmp_path / "cache")
    assert got[artifact.sha256].read_bytes() == data


@pytest.mark.parametrize(
    ("mode", "error", "pattern"),
    [
        ("flip", IntegrityError, "sha256 mismatch"),
        ("truncate", IntegrityError, "size mismatch"),
        ("short", FetchError, "connection closed"),
    ],
)
def test_bad_bytes_never_reach_the_cache(
    server: HubServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: Tamper,
    error: type[Exception],
    pattern: str,
) -> None:
    monkeypatch.setattr("kvenv.fetch.core.BACKOFF_SECONDS", 0.0)
    artifact, _ = _served(server, tmp_path, "alpha")
    assert artifact.filename is not None
    server.tamper(artifact.filename, mode)
    cache = tmp_path / "cache"
    with pytest.raises(error, match=pattern):
        fetch_all([artifact], cache=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_http_errors_name_the_url(server: HubServer, tmp_path: Path) -> None:
    artifact = Artifact(
        "a", "1.0", "a-1.0-py3-none-any.whl", "1" * 64, None, "overlay", server.url + "/nope.whl"
    )
    with pytest.raises(FetchError, match=r"HTTP 404 .*/nope\.whl"):
        fetch_all([artifact], cache=tmp_path / "cache")


def test_many_small_wheels_in_parallel(server: HubServer, tmp_path: Path) -> None:
    served = [_served(server, tmp_path, f"pkg{i:02d}") for i in range(24)]
    calls: list[str] = []
    lock = threading.Lock()

    def progress(label: str, done: int, total: int | None) -> None:
        with lock:
            calls.append(label)

    got = fetch_all([a for a, _ in served], cache=tmp_path / "cache", jobs=6, progress=progress)
    assert len(got) == 24
    for artifact, data in served:
        assert got[artifact.sha256].read_bytes() == data
    assert {a.label for a, _ in served} <= set(calls)
    assert server.count("GET") == 24


def test_downloads_reuse_pooled_connections(server: HubServer, tmp_path: Path) -> None:
    served = [_served(server, tmp_path, f"pool{i:02d}") for i in range(12)]
    got = fetch_all([a for a, _ in served], cache=tmp_path / "cache", jobs=3)
    for artifact, data in served:
        assert got[artifact.sha256].read_bytes() == data
    assert server.count("GET") == 12
    # three workers keep their connections open between files: 12 files, at most 3 handshakes
    assert 1 <= server.connections <= 3


def test_redirects_reuse_the_connection_and_stop_after_ten(
    server: HubServer, tmp_path: Path
) -> None:
    artifact, data = _served(server, tmp_path, "alpha")
    assert isinstance(artifact.source, str)
    first = server.add_redirect("/hop/1", "/hop/2")  # a relative Location
    server.add_redirect("/hop/2", artifact.source)
    got = fetch_all([attrs.evolve(artifact, source=first)], cache=tmp_path / "cache")
    assert got[artifact.sha256].read_bytes() == data
    assert server.count("GET") == 3 and server.connections == 1
    loop = server.add_redirect("/loop/alpha.whl", "/loop/alpha.whl")
    with pytest.raises(FetchError, match="more than 10 redirects"):
        fetch_all([attrs.evolve(artifact, source=loop)], cache=tmp_path / "cache2")
    assert server.count("GET", "/loop/") == 11


def test_credentials_in_a_url_never_reach_a_message(server: HubServer, tmp_path: Path) -> None:
    url = server.url.replace("http://", "http://user:s3cret@") + "/nope/a-1.0-py3-none-any.whl"
    artifact = Artifact("a", "1.0", "a-1.0-py3-none-any.whl", "1" * 64, None, "overlay", url)
    with pytest.raises(FetchError, match="HTTP 404") as info:
        fetch_all([artifact], cache=tmp_path / "cache")
    assert "s3cret" not in str(info.value) and "user" not in info.value.message


def test_credentials_go_to_their_host_only(server: HubServer, tmp_path: Path) -> None:
    artifact, data = _served(server, tmp_path, "alpha")
    assert isinstance(artifact.source, str)
    with HubServer() as first:
        moved = first.add_redirect("/a/alpha.whl", artifact.source)  # another origin
        url = moved.replace("http://", "http://user:s3cret@")
        got = fetch_all([attrs.evolve(artifact, source=url)], cache=tmp_path / "cache")
        assert got[artifact.sha256].read_bytes() == data
        assert [seen.had_auth for seen in first.requests] == [True]
    assert [seen.had_auth for seen in server.requests] == [False]


@pytest.mark.parametrize(
    "url", ["https://a..b.invalid/a-1.0-py3-none-any.whl", "https://a\tb.invalid/a.whl"]
)
def test_a_url_the_client_cannot_ask_for_is_one_error(url: str, tmp_path: Path) -> None:
    artifact = Artifact("a", "1.0", "a-1.0-py3-none-any.whl", "1" * 64, None, "overlay", url)
    with pytest.raises(FetchError, match=r"download failed: .* for https://"):
        fetch_all([artifact], cache=tmp_path / "cache")


def test_unreachable_server_is_a_transient_error_without_traceback(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a-1.0-py3-none-any.whl"
    artifact = Artifact("a", "1.0", "a-1.0-py3-none-any.whl", "1" * 64, None, "overlay", url)
    with allow_loopback_http(), pytest.raises(FetchError, match=r"download failed: .*refused"):
        fetch_all([artifact], cache=tmp_path / "cache")


def test_one_bad_artifact_fails_the_whole_fetch(server: HubServer, tmp_path: Path) -> None:
    served = [_served(server, tmp_path, f"pkg{i}") for i in range(6)]
    bad = attrs.evolve(served[3][0], sha256="2" * 64)
    artifacts = [a for a, _ in served[:3]] + [bad] + [a for a, _ in served[4:]]
    with pytest.raises(IntegrityError, match="sha256 mismatch"):
        fetch_all(artifacts, cache=tmp_path / "cache", jobs=3)


def test_duplicates_are_fetched_once(server: HubServer, tmp_path: Path) -> None:
    artifact, _ = _served(server, tmp_path, "alpha")
    got = fetch_all([artifact, artifact], cache=tmp_path / "cache")
    assert list(got) == [artifact.sha256]
    assert server.count("GET") == 1


def test_hostile_file_names_are_refused(tmp_path: Path) -> None:
    artifact = Artifact("a", "1", "../../evil.whl", "1" * 64, None, "overlay", tmp_path / "x")
    with pytest.raises(IntegrityError, match="file name"):
        fetch_all([artifact], cache=tmp_path / "cache")


# --- local paths and indexes --------------------------------------------------------------------


def test_local_path_is_verified_and_copied(tmp_path: Path) -> None:
    wheel, sha, size = _wheel(tmp_path / "house", "local")
    artifact = Artifact("local", "1.0", wheel.name, sha, size, "native", wheel)
    cache = tmp_path / "cache"
    got = fetch_all([artifact], cache=cache, offline=True)[sha]
    assert got.read_bytes() == wheel.read_bytes()
    assert got.is_relative_to(cache) and not got.samefile(wheel)
    wrong = attrs.evolve(artifact, sha256="3" * 64)
    with pytest.raises(IntegrityError):
        fetch_all([wrong], cache=tmp_path / "cache2")
    missing = attrs.evolve(artifact, source=tmp_path / "gone.whl", sha256="4" * 64)
    with pytest.raises(FetchError, match="not found"):
        fetch_all([missing], cache=cache)


def test_index_source_with_find_links(tmp_path: Path) -> None:
    house = tmp_path / "house"
    wheel, sha, size = _wheel(house, "natty", "2.0")
    _wheel(house, "natty", "1.0")
    source = IndexSource(kind="index", filename=WheelFilename(wheel.name))
    artifact = Artifact("natty", "2.0", wheel.name, sha, size, "native", source)
    got = fetch_all([artifact], cache=tmp_path / "cache", find_links=[str(house)])
    assert got[sha].read_bytes() == wheel.read_bytes()
    unnamed = attrs.evolve(artifact, filename=None, source=IndexSource(kind="index"))
    got = fetch_all([unnamed], cache=tmp_path / "cache2", find_links=[str(house)])
    assert got[sha].name == wheel.name
    absent = attrs.evolve(unnamed, version="3.0", sha256="5" * 64)
    with pytest.raises(FetchError, match="not found on"):
        fetch_all([absent], cache=tmp_path / "cache3", find_links=[str(house)])


def test_offline_refuses_index_and_url_sources(tmp_path: Path) -> None:
    artifacts = [
        Artifact("a", "1", None, "6" * 64, None, "native", IndexSource(kind="index")),
        Artifact("b", "1", "b-1-py3-none-any.whl", "7" * 64, 3, "overlay", "https://x.invalid/b"),
    ]
    with pytest.raises(FetchError, match="2 artifact") as info:
        fetch_all(artifacts, cache=tmp_path / "cache", offline=True)
    assert len(info.value.problems) == 2


def test_cache_trust_is_a_marker_unless_rehash_is_asked(tmp_path: Path) -> None:
    wheel, sha, size = _wheel(tmp_path / "house", "local")
    artifact = Artifact("local", "1.0", wheel.name, sha, size, "native", wheel)
    cache = tmp_path / "cache"
    cached = fetch_all([artifact], cache=cache)[sha]
    # Same size, same mtime, same inode: the cheap check trusts the verified marker...
    stat = cached.stat()
    cached.chmod(0o644)
    data = bytearray(cached.read_bytes())
    data[10] ^= 0xFF
    with open(cached, "r+b") as handle:
        handle.write(bytes(data))
    os.utime(cached, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fetch_all([artifact], cache=cache)[sha] == cached
    # ...and a full re-hash finds the change, evicts the entry and copies the source again.
    again = fetch_all([artifact], cache=cache, rehash_cached=True)[sha]
    assert again.read_bytes() == wheel.read_bytes()


def test_importing_fetch_and_bundle_stays_light() -> None:
    code = (
        "import sys, kvenv.fetch, kvenv.fetch.bundle, kvenv.cli.bundle\n"
        "heavy = {'huggingface_hub', 'unearth', 'httpx2', 'requests', 'resolvelib'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.network
def test_index_source_over_real_https(tmp_path: Path) -> None:
    from unearth import PackageFinder

    best = PackageFinder().find_best_match("six==1.17.0").best
    assert best is not None and best.link.hashes is not None
    filename = str(best.link.filename)
    sha = best.link.hashes["sha256"]
    source = IndexSource(kind="index", filename=WheelFilename(filename))
    artifact = Artifact("six", "1.17.0", filename, sha, None, "overlay", source)
    got = fetch_all([artifact], cache=tmp_path / "cache")[sha]
    assert sha256_of(got) == sha
    # The wheel's own URL is https and goes through kvenv's urllib downloader as well.
    direct = Artifact(
        "six", "1.17.0", filename, sha, None, "overlay", best.link.url_without_fragment
    )
    assert fetch_all([direct], cache=tmp_path / "cache2")[sha].name == filename


def test_a_body_is_hashed_and_written_in_large_pieces(
    server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body arrives a read at a time; kvenv hashes and writes it in pieces of
    ``WRITE_BYTES`` (fewer calls under the GIL), with the same bytes and progress to the end."""
    from kvenv._util.hashing import HashingWriter
    from kvenv.fetch import http

    data = os.urandom(3 * http.WRITE_BYTES + 12345)
    url = server.add_static("/files/big.bin", data)
    writes: list[int] = []
    original = HashingWriter.write

    def counted(self: HashingWriter, chunk: bytes | bytearray | memoryview) -> int:
        writes.append(len(chunk))
        return original(self, chunk)

    monkeypatch.setattr(HashingWriter, "write", counted)
    heard: list[tuple[int, int | None]] = []
    target = tmp_path / "big.bin"
    with target.open("wb") as raw:
        sink = HashingWriter(raw, limit=len(data))
        http.download(url, sink, size=len(data), progress=lambda d, t: heard.append((d, t)))
    assert target.read_bytes() == data
    assert sum(writes) == len(data) and len(writes) <= 4
    assert all(size >= http.WRITE_BYTES for size in writes[:-1])
    assert heard[-1] == (len(data), len(data))
