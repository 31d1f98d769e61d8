"""artifacts_for over a real PEP 751 lock, offline bundles, and fetching from a bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kvenv._util import tomlio
from kvenv.cli import main
from kvenv.errors import ConflictError, FetchError, InputError, IntegrityError, LockError
from kvenv.fetch import fetch_all
from kvenv.fetch.bundle import make_bundle, open_bundle
from kvenv.lock.pylock import read_lock
from kvenv.model.loading import LoadedProfile, load_profile
from kvenv.model.profile import HfSource
from kvenv.plan.artifacts import artifacts_for
from tests.support.hubserver import HubServer, hub_server
from tests.support.wheels import build_wheel, sha256_of

__all__ = ["hub_server"]

REV = "89abcdef0123456789abcdef0123456789abcdef"


def _entry(wheel: Path, *, url: str | None = None, path: str | None = None) -> str:
    where = f'url = "{url}"' if url else f'path = "{path}"'
    return (
        f'{{ name = "{wheel.name}", {where}, size = {wheel.stat().st_size}, '
        f'hashes = {{ sha256 = "{sha256_of(wheel)}" }} }}'
    )


def _project(
    root: Path, server: HubServer, *, extra_packages: str = "", parent: bool = False
) -> LoadedProfile:
    """profiles/demo.toml (native on the loopback Hub) and locks/pylock.demo.toml with an
    https-style URL wheel, a path wheel, a package with two wheels and one for another OS."""
    native = build_wheel(root / "build", "nativepkg", "1.0", tag="cp312-cp312-linux_x86_64")
    server.add_file("org/native", REV, native.name, native.read_bytes())
    alpha = build_wheel(root / "build", "alpha", "1.0")
    alpha_url = server.add_static(f"/files/{alpha.name}", alpha.read_bytes())
    beta_any = build_wheel(root / "build", "beta", "2.0")
    beta_linux = build_wheel(root / "build", "beta", "2.0", tag="cp312-cp312-manylinux_2_17_x86_64")
    for wheel in (beta_any, beta_linux):
        server.add_static(f"/files/{wheel.name}", wheel.read_bytes())
    gamma = build_wheel(root / "locks" / "wheels", "gamma", "0.1")
    delta = build_wheel(root / "build", "delta", "3.0")
    (root / "profiles").mkdir(parents=True)
    (root / "profiles" / "demo.host.json").write_text('{"recorded": true}\n')
    header = 'schema = 1\nname = "demo"\n'
    if parent:
        (root / "profiles" / "base.toml").write_text(
            'schema = 1\nname = "base"\n[target]\npython = "3.12.13"\nabi = "cp312"\n'
            'glibc = "2.35"\n'
        )
        header += 'extends = "base"\n'
    else:
        header += '[target]\npython = "3.12.13"\nabi = "cp312"\nglibc = "2.35"\n'
    (root / "profiles" / "demo.toml").write_text(
        header
        + f"""
[host]
snapshot = "profiles/demo.host.json"

[native]
name = "nativepkg"
version = "1.0"
sha256 = "{sha256_of(native)}"
size = {native.stat().st_size}

[native.source]
kind = "hf"
repo = "org/native"
revision = "{REV}"
filename = "{native.name}"
"""
    )
    (root / "locks" / "pylock.demo.toml").write_text(
        f"""lock-version = "1.0"
created-by = "tests"

[tool.kvenv]
schema = 1
profile = "demo"
profile-digest = "sha256:{"0" * 64}"
target = "cpython 3.12.13 (cp312, manylinux_2_35_x86_64)"
protected = ["torch", "torchaudio", "torchvision"]
native = {{ name = "nativepkg", version = "1.0", sha256 = "{sha256_of(native)}" }}

[[packages]]
name = "alpha"
version = "1.0"
wheels = [{_entry(alpha, url=alpha_url)}]

[[packages]]
name = "beta"
version = "2.0"
wheels = [
  {_entry(beta_any, url=server.url + "/files/" + beta_any.name)},
  {_entry(beta_linux, url=server.url + "/files/" + beta_linux.name)},
]

[[packages]]
name = "gamma"
version = "0.1"
wheels = [{_entry(gamma, path="wheels/" + gamma.name)}]

[[packages]]
name = "delta"
version = "3.0"
marker = 'sys_platform == "win32"'
wheels = [{_entry(delta, url=server.url + "/files/nope.whl")}]
{extra_packages}"""
    )
    return load_profile(str(root / "profiles" / "demo.toml"))


def test_artifacts_for_selects_the_targets_wheels(hub_server: HubServer, tmp_path: Path) -> None:
    loaded = _project(tmp_path, hub_server)
    artifacts = artifacts_for(loaded, loaded.lock_path)
    assert [(a.name, a.role) for a in artifacts] == [
        ("nativepkg", "native"),
        ("alpha", "overlay"),
        ("beta", "overlay"),
        ("gamma", "overlay"),
    ]
    assert isinstance(artifacts[0].source, HfSource)
    assert artifacts[2].filename == "beta-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"
    gamma = artifacts[3]
    assert isinstance(gamma.source, Path)
    assert gamma.source == tmp_path / "locks" / "wheels" / "gamma-0.1-py3-none-any.whl"
    assert artifacts_for(loaded, None) == artifacts[:1]
    # The same selection from every form of lock input.
    lockfile = read_lock(loaded.lock_path)
    assert artifacts_for(loaded, lockfile) == artifacts
    assert artifacts_for(loaded, lockfile.pylock) == artifacts
    assert artifacts_for(loaded, tomlio.read(loaded.lock_path)) == artifacts


def test_artifacts_for_refuses_protected_and_non_wheel_entries(
    hub_server: HubServer, tmp_path: Path
) -> None:
    digest = "a" * 64
    torch = f"""
[[packages]]
name = "torch"
version = "2.10.0"
[[packages.wheels]]
name = "torch-2.10.0-py3-none-any.whl"
url = "https://x.invalid/t.whl"
hashes = {{ sha256 = "{digest}" }}
"""
    loaded = _project(tmp_path / "a", hub_server, extra_packages=torch)
    with pytest.raises(ConflictError, match="protected"):
        artifacts_for(loaded, loaded.lock_path)
    sdist = f"""
[[packages]]
name = "epsilon"
version = "1.0"
[packages.sdist]
name = "epsilon-1.0.tar.gz"
url = "https://x.invalid/e.tar.gz"
hashes = {{ sha256 = "{digest}" }}
"""
    loaded = _project(tmp_path / "b", hub_server, extra_packages=sdist)
    with pytest.raises(LockError, match="not a wheel"):
        artifacts_for(loaded, loaded.lock_path)
    sha512 = """
[[packages]]
name = "zeta"
version = "1.0"
[[packages.wheels]]
name = "zeta-1.0-py3-none-any.whl"
url = "https://x.invalid/z.whl"
hashes = { sha512 = "00" }
"""
    loaded = _project(tmp_path / "c", hub_server, extra_packages=sha512)
    with pytest.raises(LockError, match="invalid lock") as info:
        artifacts_for(loaded, loaded.lock_path)
    assert ".wheels[0].hashes: the wheel has no sha256 hash" in info.value.render()


def test_bundle_then_offline_fetch_from_it(hub_server: HubServer, tmp_path: Path) -> None:
    loaded = _project(tmp_path / "project", hub_server, parent=True)
    out = tmp_path / "bundle"
    info = make_bundle(loaded, out, cache=tmp_path / "cache")
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == [
        "SHA256SUMS",
        "bundle.json",
        "locks/pylock.demo.toml",
        "profiles/demo.host.json",
        "profiles/demo.toml",
        "wheels/alpha-1.0-py3-none-any.whl",
        "wheels/beta-2.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        "wheels/gamma-0.1-py3-none-any.whl",
        "wheels/nativepkg-1.0-cp312-cp312-linux_x86_64.whl",
    ]
    assert len(info.artifacts) == 4
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=out, check=True)
    opened = open_bundle(out)
    assert opened.index == info.index and opened.verified
    # The bundled profile is one document (no extends) and loads on its own.
    bundled = load_profile(str(opened.profile_path))
    assert bundled.profile.extends is None
    assert bundled.profile.target == loaded.profile.target
    assert bundled.lock_path == opened.lock_path
    assert opened.index.profile.digest == bundled.digest
    # Offline, from the bundle alone: no request reaches the server, files are used in place.
    before = len(hub_server.requests)
    artifacts = artifacts_for(bundled, bundled.lock_path)
    got = fetch_all(
        artifacts, cache=tmp_path / "fresh-cache", bundle=open_bundle(out).local_files()
    )
    assert len(hub_server.requests) == before
    assert set(got) == {a.sha256 for a in artifacts}
    for artifact in artifacts:
        assert got[artifact.sha256].parent == out / "wheels"
        assert sha256_of(got[artifact.sha256]) == artifact.sha256


def test_a_corrupt_bundle_is_refused(hub_server: HubServer, tmp_path: Path) -> None:
    loaded = _project(tmp_path / "project", hub_server)
    out = tmp_path / "bundle"
    make_bundle(loaded, out, cache=tmp_path / "cache")
    wheel = out / "wheels" / "alpha-1.0-py3-none-any.whl"
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="does not match its SHA256SUMS") as info:
        open_bundle(out)
    assert any("alpha" in p.message for p in info.value.problems)
    artifacts = artifacts_for(loaded, loaded.lock_path)
    with pytest.raises(IntegrityError):
        fetch_all(artifacts, cache=tmp_path / "fresh", bundle=open_bundle(out).local_files())
    assert main(["bundle", "--verify", str(out)]) == 1
    (out / "SHA256SUMS").write_text("not a sum line\n")
    with pytest.raises(InputError, match="malformed SHA256SUMS"):
        open_bundle(out)


def test_a_bundle_missing_an_artifact_says_so(hub_server: HubServer, tmp_path: Path) -> None:
    loaded = _project(tmp_path / "project", hub_server)
    out = tmp_path / "bundle"
    make_bundle(loaded, out, cache=tmp_path / "cache")
    extra = build_wheel(tmp_path / "more", "omega", "1.0")
    artifacts = artifacts_for(loaded, loaded.lock_path)
    omega = type(artifacts[0])(
        "omega", "1.0", extra.name, sha256_of(extra), None, "overlay", "https://x.invalid/o.whl"
    )
    with pytest.raises(FetchError, match="neither in the bundle") as info:
        fetch_all(
            [*artifacts, omega], cache=tmp_path / "fresh", bundle=open_bundle(out).local_files()
        )
    assert [p.message.split(" ")[0] for p in info.value.problems] == [extra.name]


def test_foreign_directories_are_never_overwritten(hub_server: HubServer, tmp_path: Path) -> None:
    loaded = _project(tmp_path / "project", hub_server)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a kvenv bundle"):
        make_bundle(loaded, foreign, cache=tmp_path / "cache")
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    # An existing bundle is replaced as a whole; an empty directory is fine.
    out = tmp_path / "bundle"
    out.mkdir()
    make_bundle(loaded, out, cache=tmp_path / "cache")
    (out / "wheels" / "stale.whl").write_bytes(b"old")
    make_bundle(loaded, out, cache=tmp_path / "cache")
    assert not (out / "wheels" / "stale.whl").exists()
    assert open_bundle(out).verified
    assert not [p for p in tmp_path.iterdir() if ".kvenv-" in p.name]


def test_cli_bundle_json_and_verify(
    hub_server: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = _project(tmp_path / "project", hub_server)
    out = tmp_path / "bundle"
    args = ["bundle", str(loaded.path), "-o", str(out), "--cache", str(tmp_path / "c"), "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "kvenv-bundle" and data["verified"] is True
    assert len(data["artifacts"]) == 4
    assert main(["bundle", "--verify", str(out)]) == 0
    assert "match SHA256SUMS" in capsys.readouterr().out
    assert main(["bundle", str(loaded.path)]) == 2
    assert "-o DIR" in capsys.readouterr().err
