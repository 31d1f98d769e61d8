"""``kvenv pin SOURCE``: ``[native]`` and ``[native.source]`` written from a wheel file, an
https URL, ``hf://`` (a branch recorded as its commit, through the real ``huggingface_hub``
and the loopback Hub) or ``NAME==VERSION`` on a loopback index (several target wheels listed,
never guessed); the profile's comments kept; the relock run, and the profile put back when
it fails; a built-in profile refused; a placeholder sha256 pointed at ``kvenv pin``."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from kvenv.cli import main
from kvenv.lock.pylock import read_lock
from kvenv.model.loading import load_profile
from kvenv.model.profile import PathSource
from tests.support.hubserver import HubServer, hub_server
from tests.support.lockenv import NATIVE_TAG, basic_house, isolate_index_env, write_project
from tests.support.wheels import build_wheel, sha256_of

__all__ = ["hub_server"]

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose profile ``testbox`` pins nativepkg 1.0.0+cu128 (a path) with a comment
    the edit must keep, and a wheelhouse ``house/`` for the overlay."""
    isolate_index_env(monkeypatch, tmp_path / "cache")
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "proj"
    write_project(root, native_requires=("alpha>=1.0",))
    basic_house(root / "house")
    profile = root / "profiles" / "testbox.toml"
    profile.write_text("# Team profile: keep this comment.\n" + profile.read_text())
    monkeypatch.chdir(root)
    return root


def _flags(root: Path) -> list[str]:
    return ["--no-index", "--find-links", str(root / "house")]


def test_a_wheel_file_is_pinned_and_locked(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = build_wheel(project / "wheels", "nativepkg", "1.1.0", requires=["beta"], tag=NATIVE_TAG)
    code, out, err = run(capsys, "pin", str(wheel), "--profile", "testbox", *_flags(project))
    assert code == 0, err
    assert "pinned: nativepkg 1.0.0+cu128 -> nativepkg 1.1.0" in out
    text = (project / "profiles" / "testbox.toml").read_text()
    assert text.startswith("# Team profile: keep this comment.\n")
    native = tomllib.loads(text)["native"]
    assert native == {
        "name": "nativepkg",
        "version": "1.1.0",
        "sha256": sha256_of(wheel),
        "size": wheel.stat().st_size,
        "source": {"kind": "path", "path": f"wheels/{wheel.name}"},
    }
    lock = read_lock(project / "locks" / "pylock.testbox.toml")
    assert lock.kvenv.native.version == "1.1.0"
    assert {p.name for p in lock.pylock.packages} >= {"beta"}
    code, _, err = run(capsys, "lock", "testbox", "--check")
    assert code == 0, err


def test_a_wheel_outside_the_project_is_refused(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (project / "profiles" / "testbox.toml").read_bytes()
    wheel = build_wheel(tmp_path / "elsewhere", "nativepkg", "1.1.0", tag=NATIVE_TAG)
    code, _, err = run(capsys, "pin", str(wheel), "--profile", "testbox", "--no-lock")
    assert code == 2 and "outside the profile's project" in err
    assert (project / "profiles" / "testbox.toml").read_bytes() == before


def test_a_failed_lock_puts_the_profile_back(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (project / "profiles" / "testbox.toml").read_bytes()
    wheel = build_wheel(project / "wheels", "nativepkg", "2.0", requires=["nosuch>=1"])
    code, _, err = run(capsys, "pin", str(wheel), "--profile", "testbox", *_flags(project))
    assert code != 0
    assert "was left as it was" in err
    assert (project / "profiles" / "testbox.toml").read_bytes() == before
    # --no-lock writes the pin alone
    code, out, err = run(capsys, "pin", str(wheel), "--profile", "testbox", "--no-lock")
    assert code == 0, err
    assert "next: kvenv lock" in out
    assert load_profile("testbox").profile.native.version == "2.0"  # type: ignore[union-attr]


def test_name_version_from_the_index_lists_several_and_takes_one(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    house = project / "house"
    # two wheels of 3.0 fit the cp312 manylinux target; one for Windows does not
    one = build_wheel(house, "nativepkg", "3.0", requires=["beta"], tag=NATIVE_TAG)
    two = build_wheel(house, "nativepkg", "3.0", tag="py3-none-any")
    build_wheel(house, "nativepkg", "3.0", tag="cp312-cp312-win_amd64")
    code, _, err = run(
        capsys, "pin", "nativepkg==3.0", "--profile", "testbox", "--no-lock", *_flags(project)
    )
    assert code == 2, err
    assert "2 wheels of nativepkg 3.0 fit the profile's target" in err
    assert one.name in err and two.name in err and "win_amd64" not in err
    assert "--file" in err
    code, _, err = run(
        capsys,
        "pin",
        "nativepkg==3.0",
        "--file",
        one.name,
        "--profile",
        "testbox",
        "--json",
        *_flags(project),
    )
    assert code == 0, err
    native = tomllib.loads((project / "profiles" / "testbox.toml").read_text())["native"]
    assert native["source"] == {"kind": "index", "filename": one.name}
    assert (native["sha256"], native["size"]) == (sha256_of(one), one.stat().st_size)
    assert read_lock(project / "locks" / "pylock.testbox.toml").kvenv.native.version == "3.0"
    code, _, err = run(
        capsys, "pin", "nativepkg==9.9", "--profile", "testbox", "--no-lock", *_flags(project)
    )
    assert code == 2 and "no wheel of nativepkg 9.9 for the profile's target" in err
    assert "3.0" in err  # the versions seen


def test_json_is_one_document(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = build_wheel(project / "wheels", "nativepkg", "1.2", requires=["beta"], tag=NATIVE_TAG)
    code, out, err = run(
        capsys, "pin", str(wheel), "--profile", "testbox", "--json", *_flags(project)
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["native"]["version"] == "1.2" and report["changed"] is True
    assert report["previous"]["version"] == "1.0.0+cu128"
    assert report["lock"]["changed"] is True


def test_hf_branch_is_recorded_as_its_commit(
    project: Path, hub_server: HubServer, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = build_wheel(project / "built", "nativepkg", "4.0", requires=["beta"], tag=NATIVE_TAG)
    hub_server.add_file("team/wheels", COMMIT, wheel.name, wheel.read_bytes())
    hub_server.add_branch("team/wheels", "main", COMMIT)
    source = f"hf://team/wheels@main/{wheel.name}"
    code, _, err = run(capsys, "pin", source, "--profile", "testbox", *_flags(project))
    assert code == 0, err
    assert f"main resolved to commit {COMMIT}" in err
    native = tomllib.loads((project / "profiles" / "testbox.toml").read_text())["native"]
    assert native["source"] == {
        "kind": "hf",
        "repo": "team/wheels",
        "revision": COMMIT,
        "filename": wheel.name,
    }
    assert (native["sha256"], native["size"]) == (sha256_of(wheel), wheel.stat().st_size)
    # an unknown branch: the Hub's answer, nothing written
    before = (project / "profiles" / "testbox.toml").read_bytes()
    code, _, err = run(capsys, "pin", f"hf://team/wheels@nope/{wheel.name}", "--profile", "testbox")
    assert code == 2 and "revision not found" in err
    assert (project / "profiles" / "testbox.toml").read_bytes() == before


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with HubServer(tls=context) as server:
        yield server


def test_an_https_url_is_downloaded_and_hashed(
    project: Path, tls_server: HubServer, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = build_wheel(project / "built", "nativepkg", "5.0", requires=["beta"], tag=NATIVE_TAG)
    url = tls_server.add_static(f"/w/{wheel.name}", wheel.read_bytes())
    code, _, err = run(capsys, "pin", url, "--profile", "testbox", "--no-lock")
    assert code == 0, err
    native = tomllib.loads((project / "profiles" / "testbox.toml").read_text())["native"]
    assert native["source"] == {"kind": "url", "url": url}
    assert (native["sha256"], native["size"]) == (sha256_of(wheel), wheel.stat().st_size)


def test_a_builtin_profile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no project profile named demo here: the built-in
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = run(capsys, "pin", "markdown-it-py==3.0.0", "--profile", "demo", "--no-lock")
    assert code == 2
    assert "demo is a built-in profile" in err
    assert "kvenv init NAME --extends demo" in err


def test_a_placeholder_sha256_points_at_pin(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = project / "profiles" / "testbox.toml"
    text = profile.read_text()
    sha = tomllib.loads(text)["native"]["sha256"]
    profile.write_text(text.replace(sha, "0" * 64))
    code, _, err = run(capsys, "lock", "testbox", *_flags(project))
    assert code == 2, err
    assert "$.native.sha256" in err and "placeholder" in err
    assert "kvenv pin native/nativepkg-1.0.0+cu128-" in err
    assert "--native-requires" not in err


def test_a_child_of_a_builtin_is_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fix the refusal names works: ``kvenv init NAME --extends demo`` then ``kvenv pin``
    (demo pins an ``index`` source; the child's ``path`` source replaces it whole)."""
    isolate_index_env(monkeypatch, tmp_path / "cache")
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "init", "mine", "--extends", "demo")
    assert code == 0, err
    wheel = build_wheel(tmp_path / "wheels", "markdown-it-py", "3.0.1", requires=["mdurl"])
    code, _, err = run(capsys, "pin", str(wheel), "--profile", "mine", "--no-lock")
    assert code == 0, err
    native = load_profile("mine").profile.native
    assert native is not None and native.version == "3.0.1"
    assert native.source == PathSource(kind="path", path=f"wheels/{wheel.name}")  # type: ignore[arg-type]
    assert (
        "# Everything not set here comes from 'demo'"
        in (tmp_path / "profiles" / "mine.toml").read_text()
    )
