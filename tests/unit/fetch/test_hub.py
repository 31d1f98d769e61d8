"""fetch_all against the real huggingface_hub client and a loopback Hub server."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import huggingface_hub.file_download
import pytest

from kvenv.errors import FetchError, IntegrityError
from kvenv.fetch import fetch_all
from kvenv.model.fields import HfRepo, Revision, WheelFilename
from kvenv.model.profile import HfSource
from kvenv.plan.artifacts import Artifact
from tests.support.hubserver import HubServer, Tamper, hub_server
from tests.support.wheels import build_wheel, sha256_of

REV = "0123456789abcdef0123456789abcdef01234567"
OTHER_REV = "fedcba9876543210fedcba9876543210fedcba98"
REPO = "kvenv-test/binaries"
TOKEN = "hf_testtokenABCDEFGHIJKLMNOPQRSTUVWXYZ0123"

__all__ = ["hub_server"]


def _native(
    tmp_path: Path, server: HubServer, *, repo_type: str = "model", version: str = "1.0"
) -> tuple[Artifact, bytes]:
    wheel = build_wheel(
        tmp_path / "src",
        "nativepkg",
        version,
        tag="cp312-cp312-linux_x86_64",
        files={"nativepkg/__init__.py": "x = 1\n" * 5000},
    )
    data = wheel.read_bytes()
    server.add_file(REPO, REV, wheel.name, data, repo_type=repo_type)
    source = HfSource(
        repo=HfRepo(REPO),
        revision=Revision(REV),
        filename=WheelFilename(wheel.name),
        repo_type="dataset" if repo_type == "dataset" else "model",
    )
    artifact = Artifact(
        name="nativepkg",
        version=version,
        filename=wheel.name,
        sha256=sha256_of(wheel),
        size=len(data),
        role="native",
        source=source,
    )
    return artifact, data


def _cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


def _no_token_anywhere(cache: Path, *texts: str) -> None:
    for path in _cache_files(cache):
        assert TOKEN.encode() not in path.read_bytes(), path
    for text in texts:
        assert TOKEN not in text


def test_downloads_and_verifies_with_the_real_client(hub_server: HubServer, tmp_path: Path) -> None:
    artifact, data = _native(tmp_path, hub_server)
    cache = tmp_path / "cache"
    seen: list[tuple[str, int, int | None]] = []
    got = fetch_all([artifact], cache=cache, progress=lambda *a: seen.append(a))
    path = got[artifact.sha256]
    assert path.read_bytes() == data
    assert path.name == artifact.filename
    assert path.is_relative_to(cache)
    assert hub_server.count("GET", "/resolve/") == 1
    assert seen and seen[-1][1] == len(data)
    # No temporary download directory is left behind.
    assert not [p for p in (cache / "artifacts-v1" / "tmp").iterdir()]
    # A second run reuses the cache without any request.
    before = len(hub_server.requests)
    assert fetch_all([artifact], cache=cache) == got
    assert len(hub_server.requests) == before


def test_dataset_repositories_resolve_under_datasets(hub_server: HubServer, tmp_path: Path) -> None:
    artifact, data = _native(tmp_path, hub_server, repo_type="dataset")
    got = fetch_all([artifact], cache=tmp_path / "cache")
    assert got[artifact.sha256].read_bytes() == data
    assert hub_server.count("GET", "/datasets/") == 1


def test_wrong_pin_raises_and_leaves_the_cache_unchanged(
    hub_server: HubServer, tmp_path: Path
) -> None:
    artifact, _ = _native(tmp_path, hub_server)
    cache = tmp_path / "cache"
    wrong = attrs.evolve(artifact, sha256="0" * 64)
    with pytest.raises(IntegrityError, match="sha256 mismatch") as info:
        fetch_all([wrong], cache=cache)
    assert artifact.sha256 in info.value.message
    assert _cache_files(cache) == []


@pytest.mark.parametrize(
    ("mode", "error", "pattern"),
    [
        ("flip", IntegrityError, "sha256 mismatch"),
        ("truncate", IntegrityError, "size mismatch"),
        ("short", FetchError, "Hugging Face Hub download failed"),
    ],
)
def test_corrupt_or_truncated_downloads_install_nothing(
    hub_server: HubServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: Tamper,
    error: type[Exception],
    pattern: str,
) -> None:
    # The Hub client retries a short read five times, sleeping a second each time.
    monkeypatch.setattr(huggingface_hub.file_download.time, "sleep", lambda _: None)
    artifact, _ = _native(tmp_path, hub_server)
    assert artifact.filename is not None
    hub_server.tamper(artifact.filename, mode)
    cache = tmp_path / "cache"
    with pytest.raises(error, match=pattern):
        fetch_all([artifact], cache=cache)
    assert _cache_files(cache) == []


def test_unknown_revision_is_a_clear_fetch_error(hub_server: HubServer, tmp_path: Path) -> None:
    artifact, _ = _native(tmp_path, hub_server)
    assert isinstance(artifact.source, HfSource)
    moved = attrs.evolve(artifact, source=attrs.evolve(artifact.source, revision=OTHER_REV))
    with pytest.raises(FetchError, match="revision not found") as info:
        fetch_all([moved], cache=tmp_path / "cache")
    assert REPO in info.value.message
    assert "/resolve/" + OTHER_REV in (info.value.hint or "")


def test_missing_file_is_a_clear_fetch_error(hub_server: HubServer, tmp_path: Path) -> None:
    artifact, _ = _native(tmp_path, hub_server)
    assert isinstance(artifact.source, HfSource)
    other = WheelFilename("nativepkg-1.0-cp312-cp312-linux_aarch64.whl")
    moved = attrs.evolve(
        artifact, filename=other, source=attrs.evolve(artifact.source, filename=other)
    )
    with pytest.raises(FetchError, match="file not found at this revision"):
        fetch_all([moved], cache=tmp_path / "cache")


def test_offline_needs_the_cache(hub_server: HubServer, tmp_path: Path) -> None:
    artifact, data = _native(tmp_path, hub_server)
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="--offline") as info:
        fetch_all([artifact], cache=cache, offline=True)
    assert "kvenv bundle" in (info.value.hint or "")
    assert artifact.filename is not None
    assert artifact.filename in info.value.render()
    assert hub_server.requests == []
    fetch_all([artifact], cache=cache)
    before = len(hub_server.requests)
    got = fetch_all([artifact], cache=cache, offline=True)
    assert got[artifact.sha256].read_bytes() == data
    assert len(hub_server.requests) == before


def test_hf_hub_offline_is_honoured(
    hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifact, _ = _native(tmp_path, hub_server)
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE"):
        fetch_all([artifact], cache=cache)
    assert hub_server.requests == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    fetch_all([artifact], cache=cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "yes")
    assert artifact.sha256 in fetch_all([artifact], cache=cache)


def test_token_is_sent_but_never_written_or_shown(
    hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifact, data = _native(tmp_path, hub_server)
    hub_server.require_token(REPO, TOKEN)
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="HF_TOKEN") as no_token:
        fetch_all([artifact], cache=cache)
    monkeypatch.setenv("HF_TOKEN", TOKEN[:-1] + "X")
    with pytest.raises(FetchError) as wrong_token:
        fetch_all([artifact], cache=cache)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    got = fetch_all([artifact], cache=cache)
    assert got[artifact.sha256].read_bytes() == data
    assert hub_server.requests[-1].had_auth
    _no_token_anywhere(
        cache,
        no_token.value.render(),
        wrong_token.value.render(),
        repr(no_token.value),
        str(wrong_token.value.__cause__),
    )
    assert TOKEN[:-1] not in wrong_token.value.render()


def test_a_cached_file_changed_in_place_is_fetched_again(
    hub_server: HubServer, tmp_path: Path
) -> None:
    artifact, data = _native(tmp_path, hub_server)
    cache = tmp_path / "cache"
    path = fetch_all([artifact], cache=cache)[artifact.sha256]
    path.chmod(0o644)
    path.write_bytes(b"X" + data[1:])
    got = fetch_all([artifact], cache=cache)[artifact.sha256]
    assert got.read_bytes() == data
    assert hub_server.count("GET", "/resolve/") == 2


def test_endpoint_must_be_https_outside_the_test_seam(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    source = HfSource(
        repo=HfRepo(REPO), revision=Revision(REV), filename=WheelFilename("a-1-py3-none-any.whl")
    )
    artifact = Artifact("a", "1", "a-1-py3-none-any.whl", "1" * 64, None, "native", source)
    with pytest.raises(FetchError, match=r"HF_ENDPOINT.*only https"):
        fetch_all([artifact], cache=tmp_path / "cache")


def test_a_dropped_connection_gives_one_message_not_the_clients_retries(
    hub_server: HubServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(huggingface_hub.file_download.time, "sleep", lambda _: None)
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    artifact, _ = _native(tmp_path, hub_server)
    assert artifact.filename is not None
    hub_server.tamper(artifact.filename, "short")
    with caplog.at_level(logging.WARNING), pytest.raises(FetchError):
        fetch_all([artifact], cache=tmp_path / "cache")
    assert hub_server.count("GET") > 1  # the client did retry, quietly
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub")]
    assert "resume" not in capfd.readouterr().err
    assert logger.level == level  # restored
