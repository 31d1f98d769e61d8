"""``kvenv why``, ``kvenv tree`` and ``kvenv export`` on a real lock of a checkout (small real
wheels on a loopback index, this machine as the target): chains through locked packages, host
packages (protected or not) and waivers; trees and their inverse; a name not in the lock;
and exports that other installers install from the checkout — ``pip install --require-hashes``
of the requirements file and ``uv pip install -r`` of the pylock, each into a fresh venv,
giving the lock's versions (the committed, portable lock names ``../wheels/`` paths only a
bundle has; the exported pylock names URLs)."""

from __future__ import annotations

import email.parser
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from kvenv._util.urls import allow_loopback_http
from kvenv.cli import main
from tests.support.applyenv import LOCAL_TARGET
from tests.support.lockenv import isolate_index_env, serve_index
from tests.support.wheels import build_wheel, sha256_of


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _checkout(root: Path) -> None:
    """profiles/stack.toml: native nativepkg (a path) requires helper, torch (protected on the
    host) and gone (waived); helper needs dep and hostlib (the host has it); the profile
    declares one more root, extra, in the lock (``--require``)."""
    house = root / "house"
    build_wheel(house, "dep", "1.0")
    build_wheel(house, "helper", "2.0", requires=["dep>=1", "hostlib>=1"])
    build_wheel(house, "extra", "1.0", requires=["dep"])
    native = build_wheel(
        root / "native", "nativepkg", "1.0", requires=["helper>=2", "torch", "gone>=1"]
    )
    (root / "profiles").mkdir(parents=True)
    version = platform.python_version()
    snapshot = {
        "schema": 1,
        "python": {"version": version, "abi": f"cp3{sys.version_info.minor}"},
        "platform": {"os": "linux", "machine": platform.machine()},
        "distributions": [
            {"name": "torch", "version": "2.10.0+cpu", "requires": []},
            {"name": "hostlib", "version": "1.5", "requires": []},
        ],
        "source": "recorded",
    }
    (root / "profiles" / "stack.host.json").write_text(json.dumps(snapshot))
    (root / "profiles" / "stack.toml").write_text(
        f'schema = 1\nname = "stack"\n{LOCAL_TARGET}\n'
        '[host]\nsnapshot = "profiles/stack.host.json"\nprotected = ["torch"]\n'
        '[[host.waivers]]\nname = "gone"\nreason = "not needed on this target"\n'
        f'[native]\nname = "nativepkg"\nversion = "1.0"\nsha256 = "{sha256_of(native)}"\n'
        f'size = {native.stat().st_size}\n[native.source]\nkind = "path"\n'
        f'path = "native/{native.name}"\n'
    )
    (root / "extra.txt").write_text("extra\n")


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_index_env(monkeypatch, tmp_path / "cache")
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "checkout"
    _checkout(root)
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def index(checkout: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The checkout locked (portable, the default) against a loopback index; yields while
    the index serves (``checkout / "index-url"`` holds its URL)."""
    with serve_index(checkout / "house") as url, allow_loopback_http():
        code = main(["lock", "stack", "--index-url", url, "--require", "extra.txt"])
        assert code == 0
        capsys.readouterr()
        (checkout / "index-url").write_text(url)
        yield checkout


def test_why_names_every_chain_host_packages_and_waivers(
    index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "why", "dep", "--profile", "stack")
    assert code == 0, err
    assert out.splitlines()[0] == "dep 1.0: 2 chains from the profile's roots"
    assert out.splitlines()[1:] == [  # shortest first
        "  extra 1.0 [declared: extra] -> dep 1.0 [dep]",
        "  nativepkg 1.0 (native) -> helper 2.0 [helper>=2] -> dep 1.0 [dep>=1]",
    ]
    code, out, _ = run(capsys, "why", "hostlib", "--profile", "stack", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["kind"] == "host" and report["version"] == "1.5"
    (chain,) = report["chains"]
    assert [(s["name"], s["via"]) for s in chain] == [
        ("nativepkg", "native"),
        ("helper", "locked"),
        ("hostlib", "host"),
    ]
    code, out, _ = run(capsys, "why", "torch", "--profile", "stack")
    assert code == 0 and "torch 2.10.0+cpu (host, protected): 1 chain" in out
    code, out, _ = run(capsys, "why", "gone", "--profile", "stack")
    assert code == 0 and "gone (waived: not needed on this target)" in out
    code, _, err = run(capsys, "why", "helpr", "--profile", "stack")
    assert code == 2
    assert "helpr is not in the lock" in err and "closest: helper" in err


def test_tree_and_its_inverse(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tree", "--profile", "stack")
    assert code == 0, err
    assert out.splitlines() == [
        "nativepkg 1.0 (native)",
        "├── gone (waived: not needed on this target) [gone>=1]",
        "├── helper 2.0 [helper>=2]",
        "│   ├── dep 1.0 [dep>=1]",
        "│   └── hostlib 1.5 (host) [hostlib>=1]",
        "└── torch 2.10.0+cpu (host, protected) [torch]",
        "extra 1.0 [declared: extra]",
        "└── dep 1.0 [dep] (*)",
    ]
    code, out, _ = run(capsys, "tree", "--profile", "stack", "--invert", "dep")
    assert code == 0
    assert out.splitlines() == [
        "dep 1.0",
        "├── extra 1.0 [dep] <- the profile (extra)",
        "└── helper 2.0 [dep>=1]",
        "    └── nativepkg 1.0 (native) [helper>=2] <- the profile ([native])",
    ]
    code, out, _ = run(capsys, "tree", "--profile", "stack", "--json")
    data = json.loads(out)
    native = data["tree"][0]
    assert native["name"] == "nativepkg" and native["kind"] == "native"
    assert [d["name"] for d in native["dependencies"]] == ["gone", "helper", "torch"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        UV_NO_CONFIG="1",
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_PYTHON_DOWNLOADS="never",
    )
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"


def _venv(path: Path, env: dict[str, str]) -> Path:
    _run(
        [sys.executable, "-m", "uv", "venv", str(path), "--python", sys.executable],
        env,
        path.parent,
    )
    return path / "bin" / "python"


def _versions(python: Path) -> dict[str, str]:
    (site,) = python.parent.parent.glob("lib/python3*/site-packages")
    found = {}
    for dist_info in site.glob("*.dist-info"):
        meta = email.parser.HeaderParser().parsestr((dist_info / "METADATA").read_text())
        found[str(meta["Name"]).lower()] = str(meta["Version"])
    return found


LOCKED = {"nativepkg": "1.0", "helper": "2.0", "dep": "1.0", "extra": "1.0"}


def test_export_requirements_installs_with_pip_require_hashes(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (index / "index-url").read_text()
    code, out, err = run(
        capsys, "export", "--profile", "stack", "--format", "requirements-txt", "-o", "req.txt"
    )
    assert code == 0, err
    text = (index / "req.txt").read_text()
    assert "# Left out, protected on the host (never installed): torch 2.10.0+cpu" in text
    assert "# Left out, provided by the host: hostlib 1.5" in text
    assert "./native/nativepkg-1.0-py3-none-any.whl \\\n    --hash=sha256:" in text
    assert "dep==1.0 \\\n    --hash=sha256:" in text
    assert "torch==" not in text and "hostlib==" not in text and "gone" not in text
    env = _env(tmp_path)
    python = _venv(tmp_path / "pip-venv", env)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install"]
    _run([*pip, "--require-hashes", "--no-deps", "--index-url", url, "-r", "req.txt"], env, index)
    assert _versions(python) == LOCKED
    # --urls: each wheel by its URL on the index (found through the page cache)
    with allow_loopback_http():
        code, out, err = run(
            capsys, "export", "-p", "stack", "--format", "requirements-txt", "--urls",
            "--index-url", url,
        )  # fmt: skip
    assert code == 0, err
    assert f"dep @ {url.replace('/simple/', '/')}" in out
    # --offline: the same URLs from the page cache the lock filled, no request
    with allow_loopback_http():
        code, again, err = run(
            capsys, "export", "-p", "stack", "--format", "requirements-txt", "--urls",
            "--index-url", url, "--offline",
        )  # fmt: skip
    assert code == 0, err
    assert again == out


def test_export_pylock_installs_with_uv_from_a_checkout(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (index / "index-url").read_text()
    committed = tomllib.loads((index / "locks" / "pylock.stack.toml").read_text())
    paths = {
        p["wheels"][0].get("path", "") for p in committed["packages"] if p["name"] != "nativepkg"
    }
    assert all(p.startswith("../wheels/") for p in paths)  # only a bundle has these
    with allow_loopback_http():
        code, _, err = run(
            capsys, "export", "-p", "stack", "--format", "pylock", "-o", "pylock.export.toml",
            "--index-url", url,
        )  # fmt: skip
    assert code == 0, err
    exported = tomllib.loads((index / "pylock.export.toml").read_text())
    wheels = {p["name"]: p["wheels"][0] for p in exported["packages"]}
    assert set(wheels) == set(LOCKED)
    assert wheels["dep"]["url"].startswith(url.replace("/simple/", "/"))
    assert wheels["nativepkg"]["path"] == "native/nativepkg-1.0-py3-none-any.whl"
    env = _env(tmp_path)
    python = _venv(tmp_path / "uv-venv", env)
    uv = [sys.executable, "-m", "uv", "pip", "install", "--python", str(python)]
    _run([*uv, "-r", "pylock.export.toml"], env, index)
    assert _versions(python) == LOCKED
    code, _, err = run(capsys, "export", "-p", "stack", "--format", "pylock", "-o", "x.toml")
    assert code == 2 and "pylock.NAME.toml" in err


def test_a_root_the_profile_declares_is_a_root_of_why_and_tree(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[overlay] requires`` lives in the profile (the lock does not repeat it): why and tree
    start from it as from a one-off ``--require``."""
    profile = checkout / "profiles" / "stack.toml"
    profile.write_text(profile.read_text() + '[overlay]\nrequires = ["extra"]\n')
    with serve_index(checkout / "house") as url, allow_loopback_http():
        assert main(["lock", "stack", "--index-url", url]) == 0
    capsys.readouterr()
    code, out, err = run(capsys, "why", "extra", "--profile", "stack")
    assert code == 0, err
    assert out.splitlines() == [
        "extra 1.0: 1 chain from the profile's roots",
        "  extra 1.0 [declared: extra]",
    ]
    code, out, _ = run(capsys, "tree", "--profile", "stack")
    assert code == 0
    assert out.splitlines()[-2:] == ["extra 1.0 [declared: extra]", "└── dep 1.0 [dep] (*)"]
