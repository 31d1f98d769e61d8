"""Locks other tools install: the native wheel is recorded in the pylock as a package of its
own, so ``uv pip install -r`` and ``pip install --no-deps -r`` of a URL-form lock
(``--no-portable``) install the whole stack, the same files ``kvenv apply`` installs (name and
version of every distribution, and every file's RECORD hash), from a loopback index of real
wheels; ``lock --check`` holds both forms to the same standard; an ``hf`` native is named by
the Hub's resolve URL at the pinned revision."""

from __future__ import annotations

import csv
import email.parser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from kvenv._util.urls import allow_loopback_http
from kvenv.cli import main
from kvenv.env.root import current_state
from kvenv.model.locations import Locations
from tests.support.applyenv import LOCAL_TARGET, REPO, REVISION
from tests.support.lockenv import serve_index
from tests.support.wheels import build_wheel, sha256_of

# Files each installer adds to a .dist-info of its own accord (not the wheel's).
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json"}

Installed = dict[str, tuple[str, dict[str, str]]]  # name -> (version, {path: RECORD hash})


def _project(root: Path, *, source: str = "path") -> Path:
    """A checkout: profiles/stack.toml (the native nativepkg, which needs helper, which needs
    dep), the native wheel under native/, the overlay wheels in house/ (the index)."""
    house = root / "house"
    build_wheel(house, "dep", "1.0", files={"dep/__init__.py": "D = 1\n"})
    build_wheel(
        house,
        "helper",
        "2.0",
        requires=["dep>=1"],
        files={"helper/__init__.py": "V = 2\n", "helper/data.txt": "x" * 300},
    )
    native = build_wheel(
        root / "native",
        "nativepkg",
        "1.0",
        requires=["helper>=2"],
        files={"nativepkg/__init__.py": "import helper\nN = 1\n"},
    )
    if source == "path":
        source_toml = f'kind = "path"\npath = "native/{native.name}"\n'
    else:
        source_toml = (
            f'kind = "hf"\nrepo = "{REPO}"\nrevision = "{REVISION}"\nfilename = "{native.name}"\n'
        )
    (root / "profiles").mkdir(parents=True)
    profile = root / "profiles" / "stack.toml"
    profile.write_text(
        f'schema = 1\nname = "stack"\n{LOCAL_TARGET}\n'
        f'[native]\nname = "nativepkg"\nversion = "1.0"\nsha256 = "{sha256_of(native)}"\n'
        f"size = {native.stat().st_size}\n[native.source]\n{source_toml}"
    )
    return profile


def _installed(*sites: Path) -> Installed:
    """Every distribution under ``sites``: its version and the hash of each file its RECORD
    lists inside the site (scripts, byte code and installer-added files left out)."""
    found: Installed = {}
    for site in sites:
        for dist_info in sorted(site.glob("*.dist-info")):
            meta = email.parser.HeaderParser().parsestr((dist_info / "METADATA").read_text())
            rows = {}
            with open(dist_info / "RECORD", newline="") as handle:
                for path, digest, *_ in csv.reader(handle):
                    name = path.rsplit("/", 1)[-1]
                    outside = path.startswith(("../", "/", "bin/")) or "__pycache__" in path
                    if digest and not outside and name not in _INSTALLER_FILES:
                        rows[path] = digest
            found[str(meta["Name"]).lower()] = (str(meta["Version"]), rows)
    return found


def _clean_env(tmp_path: Path) -> dict[str, str]:
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


def _venv_site(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "checkout"
    _project(root)
    monkeypatch.chdir(root)
    return root


def test_uv_and_pip_install_a_url_lock_as_kvenv_apply_does(
    checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = "profiles/stack.toml"
    lock = checkout / "locks" / "pylock.stack.toml"
    env = _clean_env(tmp_path)
    with serve_index(checkout / "house") as url, allow_loopback_http():
        base = ["lock", profile, "--index-url", url, "--cache-dir", str(tmp_path / "lc")]
        assert main([*base, "--no-portable"]) == 0
        portable = checkout / "portable" / "pylock.stack.toml"
        assert main([*base, "--portable", "-o", str(portable)]) == 0
        capsys.readouterr()
        # lock --check holds both forms to the same standard
        assert main(["lock", "--check", profile]) == 0
        assert main(["lock", "--check", profile, "-o", str(portable)]) == 0
        where = Locations(tmp_path / "root", tmp_path / "cache")
        assert main(["apply", profile, "--root", str(where.root), "--cache", str(where.cache)]) == 0
        # the lock's own tools, from the URL-form lock alone (overlay by URL, native by path)
        uv = [sys.executable, "-m", "uv", "pip", "install", "--no-index", "-r", str(lock)]
        _run(
            [*uv, "--python", sys.executable, "--target", str(tmp_path / "uv-target")],
            env,
            tmp_path,
        )
        _run(
            [
                sys.executable,
                "-m",
                "uv",
                "venv",
                str(tmp_path / "venv"),
                "--python",
                sys.executable,
            ],
            env,
            tmp_path,
        )
        _run([*uv, "--python", str(tmp_path / "venv" / "bin" / "python")], env, tmp_path)
        pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-r", str(lock)]
        _run([*pip, "--target", str(tmp_path / "pip-target")], env, tmp_path)

    doc = tomllib.loads(lock.read_text())
    (native,) = [p for p in doc["packages"] if p["tool"]["kvenv"].get("native")]
    assert native["wheels"][0]["path"] == "../native/nativepkg-1.0-py3-none-any.whl"
    overlay = [p for p in doc["packages"] if p is not native]
    assert all(p["wheels"][0]["url"].startswith(url.replace("/simple/", "/")) for p in overlay)
    bundled = tomllib.loads(portable.read_text())
    assert {p["wheels"][0]["path"] for p in bundled["packages"]} == {
        f"../wheels/{p['wheels'][0]['name']}" for p in doc["packages"]
    }

    _, manifest = current_state(where)
    assert manifest is not None
    applied = _installed(Path(manifest.dirs.native), Path(manifest.dirs.overlay))
    assert {n: v for n, (v, _) in applied.items()} == {
        "nativepkg": "1.0",
        "helper": "2.0",
        "dep": "1.0",
    }
    assert all(rows for _, rows in applied.values())
    assert _installed(tmp_path / "uv-target") == applied
    assert _installed(_venv_site(tmp_path / "venv")) == applied
    assert _installed(tmp_path / "pip-target") == applied


def test_an_hf_native_is_named_by_the_hub_resolve_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "checkout"
    profile = _project(root, source="hf")
    monkeypatch.chdir(root)
    (root / "native.txt").write_text("helper>=2\n")
    base = ["lock", str(profile), "--find-links", "house", "--no-index"]
    base += ["--native-requires", "native.txt", "--cache-dir", str(tmp_path / "lc")]
    assert main([*base, "--no-portable"]) == 0
    lock = root / "locks" / "pylock.stack.toml"
    doc = tomllib.loads(lock.read_text())
    (native,) = [p for p in doc["packages"] if p["tool"]["kvenv"].get("native")]
    wheel = native["wheels"][0]
    assert wheel["url"] == (
        f"https://huggingface.co/{REPO}/resolve/{REVISION}/nativepkg-1.0-py3-none-any.whl"
    )
    assert native["tool"]["kvenv"]["requires"] == ["helper>=2"]
    assert main(["lock", "--check", str(profile)]) == 0
    # another revision's URL is a stale lock
    lock.write_text(lock.read_text().replace(f"/resolve/{REVISION}/", "/resolve/main/"))
    capsys.readouterr()
    assert main(["lock", "--check", str(profile), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert any(p["path"].endswith(".wheels[0].url") for p in report["problems"])
    # the portable form names it where a bundle keeps it
    assert main([*base, "--portable"]) == 0
    doc = tomllib.loads(lock.read_text())
    (native,) = [p for p in doc["packages"] if p["tool"]["kvenv"].get("native")]
    assert native["wheels"][0] == {
        "name": "nativepkg-1.0-py3-none-any.whl",
        "path": "../wheels/nativepkg-1.0-py3-none-any.whl",
        "size": wheel["size"],
        "hashes": wheel["hashes"],
    }
    assert main(["lock", "--check", str(profile)]) == 0


@pytest.mark.network
def test_the_demo_url_lock_installs_from_the_real_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in demo, locked with --no-portable against the real index: uv and pip install
    what `kvenv apply demo` installs (markdown-it-py, the native, and mdurl)."""
    from tests.support.paths import REPO as CHECKOUT

    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    root = tmp_path / "checkout"
    (root / "profiles").mkdir(parents=True)
    (root / "profiles" / "demo.toml").write_text((CHECKOUT / "profiles" / "demo.toml").read_text())
    monkeypatch.chdir(root)
    cache = ["--cache-dir", str(tmp_path / "lc")]
    assert main(["lock", "demo", "--no-portable", "--fresh", *cache]) == 0
    where = Locations(tmp_path / "root", tmp_path / "cache")
    assert main(["apply", "demo", "--root", str(where.root), "--cache", str(where.cache)]) == 0
    lock = root / "locks" / "pylock.demo.toml"
    env = _clean_env(tmp_path)
    uv = [sys.executable, "-m", "uv", "pip", "install", "-r", str(lock), "--python", sys.executable]
    _run([*uv, "--target", str(tmp_path / "uv-target")], env, tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "-r", str(lock)]
    _run([*pip, "--target", str(tmp_path / "pip-target")], env, tmp_path)
    _, manifest = current_state(where)
    assert manifest is not None
    applied = _installed(Path(manifest.dirs.native), Path(manifest.dirs.overlay))
    assert set(applied) == {"markdown-it-py", "mdurl"}
    assert _installed(tmp_path / "uv-target") == applied
    assert _installed(tmp_path / "pip-target") == applied
