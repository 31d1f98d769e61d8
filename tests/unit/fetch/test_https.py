"""Downloads over real TLS on loopback: certificates verified against the store that
``SSL_CERT_FILE`` names, connections kept open between files."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvenv.errors import FetchError
from kvenv.fetch import fetch_all
from kvenv.plan.artifacts import Artifact
from tests.support.hubserver import HubServer
from tests.support.wheels import build_wheel, sha256_of

pytestmark = [
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl"),
    pytest.mark.usefixtures("download_client"),  # each test on both clients
]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[HubServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with HubServer(tls=context) as server:
        yield server


def _served(server: HubServer, tmp_path: Path, count: int) -> list[Artifact]:
    out = []
    for number in range(count):
        wheel = build_wheel(tmp_path / "src", f"tls{number:02d}", "1.0")
        url = server.add_static(f"/files/{wheel.name}", wheel.read_bytes())
        sha, size = sha256_of(wheel), wheel.stat().st_size
        out.append(Artifact(f"tls{number:02d}", "1.0", wheel.name, sha, size, "overlay", url))
    return out


def test_https_downloads_trust_ssl_cert_file_and_reuse_connections(
    tls_server: HubServer,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tls_server.url.startswith("https://127.0.0.1:")
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    artifacts = _served(tls_server, tmp_path, 8)
    got = fetch_all(artifacts, cache=tmp_path / "cache", jobs=2)
    assert sorted(got) == sorted(a.sha256 for a in artifacts)
    assert tls_server.count("GET") == 8
    assert 1 <= tls_server.connections <= 2  # two workers, two handshakes at most


def test_an_untrusted_certificate_stops_the_download(
    tls_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setattr("kvenv.fetch.core.BACKOFF_SECONDS", 0.0)
    [artifact] = _served(tls_server, tmp_path, 1)
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match=r"download failed: .*CERTIFICATE_VERIFY_FAILED"):
        fetch_all([artifact], cache=cache)
    assert tls_server.count("GET") == 0
    assert [p for p in cache.rglob("*") if p.is_file()] == []
