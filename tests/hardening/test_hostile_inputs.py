"""Hostile profiles, locks, manifests and generation pointers: each one is refused with one
clear message (exit 2 or 3, never a traceback) and nothing is written.

Every case starts from a valid project (a real native wheel and overlay wheel, a profile and
its lock: :mod:`tests.support.applyenv`), breaks one thing, then runs the commands that read it
(``kvenv apply`` first: the one that would write). The project directory must be byte for byte
unchanged, and the runtime root must not hold a generation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.applyenv import Project, locations, standard_project
from tests.support.hardening import CliResult, run_cli, tree_state
from tests.support.wheels import build_wheel, sha256_of

Edit = Callable[[Project], None]


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _profile(old: str, new: str) -> Edit:
    return lambda p: _sub(p.profile_path, old, new)


def _lock(old: str, new: str) -> Edit:
    return lambda p: _sub(p.lock_path, old, new)


def _native_hf(revision: str) -> Edit:
    def edit(p: Project) -> None:
        text = p.profile_path.read_text()
        start = text.index("[native.source]")
        end = text.index("[runtime.env]")
        source = (
            '[native.source]\nkind = "hf"\nrepo = "owner/repo"\n'
            f'revision = "{revision}"\nfilename = "{p.native.name}"\n'
        )
        p.profile_path.write_text(text[:start] + source + text[end:])

    return edit


def _native_source(toml: str) -> Edit:
    def edit(p: Project) -> None:
        text = p.profile_path.read_text()
        start = text.index("[native.source]")
        end = text.index("[runtime.env]")
        p.profile_path.write_text(text[:start] + "[native.source]\n" + toml + text[end:])

    return edit


def _overlay_package(name: str, wheel_name: str, where: str | None = None) -> Edit:
    """Replace the lock's one package by ``name`` with one wheel ``wheel_name``."""

    def edit(p: Project) -> None:
        text = p.lock_path.read_text()
        start = text.index("[[packages]]")
        end = text.index("[tool.kvenv]")
        source = where or f'path = "../wheels/{wheel_name}"'
        package = (
            f'[[packages]]\nname = "{name}"\nversion = "2.0"\n'
            f'[[packages.wheels]]\nname = "{wheel_name}"\n{source}\n'
            f'size = 10\nhashes = {{sha256 = "{"a" * 64}"}}\n\n'
        )
        p.lock_path.write_text(text[:start] + package + text[end:])

    return edit


def _duplicate_package(p: Project) -> None:
    text = p.lock_path.read_text()
    start = text.index("[[packages]]")
    end = text.index("[tool.kvenv]")
    p.lock_path.write_text(text[:end] + text[start:end] + text[end:])


SHA_SHORT = "abc123"
PROFILE_CASES: dict[str, Edit] = {
    "schema-as-string": _profile("schema = 1", 'schema = "1"'),
    "name-as-int": _profile('name = "t"', "name = 5"),
    "size-as-string": _profile("size = ", 'size = "'),
    "size-negative": _profile("size = ", "size = -"),
    "unknown-key": _profile('name = "t"\n', 'name = "t"\nfrobnicate = true\n'),
    "not-toml": _profile("schema = 1", "schema = = 1"),
    "native-sha-short": lambda p: _sub(p.profile_path, sha256_of(p.native), SHA_SHORT),
    "native-sha-upper": lambda p: _sub(
        p.profile_path, sha256_of(p.native), sha256_of(p.native).upper()
    ),
    "path-traversal-source": _native_source('kind = "path"\npath = "../../etc/x.whl"\n'),
    "path-absolute-source": _native_source('kind = "path"\npath = "/etc/x.whl"\n'),
    "path-traversal-lock": _profile("[native]", '[overlay]\nlock = "../../lock.toml"\n[native]'),
    "path-traversal-root": _profile("[native]", '[paths]\nroot = "/tmp/../etc/kv"\n[native]'),
    "http-url-source": _native_source(
        'kind = "url"\nurl = "http://example.invalid/nativepkg-1.0-py3-none-any.whl"\n'
    ),
    "http-index-url": _native_source('kind = "index"\nindex_url = "http://example.invalid/s"\n'),
    "hf-branch-revision": _native_hf("main"),
    "hf-tag-revision": _native_hf("v1.0"),
    "hf-short-revision": _native_hf("0123456"),
    "hf-upper-revision": _native_hf("0123456789ABCDEF0123456789ABCDEF01234567"),
    "native-is-torch": _profile('name = "nativepkg"', 'name = "torch"'),
    "native-is-Torch": _profile('name = "nativepkg"', 'name = "Torch"'),
    "native-is-torch_": _profile('name = "nativepkg"', 'name = "torch_"'),
    "native-is-torch.": _profile('name = "nativepkg"', 'name = "torch."'),
    "native-is-torch[extra]": _profile('name = "nativepkg"', 'name = "torch[extra]"'),
    "native-is-TorchVision": _profile('name = "nativepkg"', 'name = "TorchVision"'),
    "env-bad-name": _profile("DEMO_VAR =", '"BAD NAME" ='),
    "extends-itself": _profile('name = "t"', 'name = "t"\nextends = "t.toml"'),
    "extends-traversal": _profile('name = "t"', 'name = "t"\nextends = "../../../etc/passwd"'),
    # names that change how processes load code, or that activation sets itself
    "env-LD_PRELOAD": _profile("DEMO_VAR =", 'LD_PRELOAD = "/tmp/x.so"\nDEMO_VAR ='),
    "env-LD_AUDIT": _profile("DEMO_VAR =", 'LD_AUDIT = "/tmp/x.so"\nDEMO_VAR ='),
    "env-PYTHONSTARTUP": _profile("DEMO_VAR =", 'PYTHONSTARTUP = "/tmp/x.py"\nDEMO_VAR ='),
    "env-BASH_ENV": _profile("DEMO_VAR =", 'BASH_ENV = "/tmp/x.sh"\nDEMO_VAR ='),
    "env-PYTHONPATH": _profile("DEMO_VAR =", 'PYTHONPATH = "/tmp"\nDEMO_VAR ='),
    "paths-root-empty": _profile("[native]", '[paths]\nroot = ""\n[native]'),
    "paths-cache-empty": _profile("[native]", '[paths]\ncache = ""\n[native]'),
    "gpu-memory-nan": _profile(
        "[runtime.env]", "[runtime]\ngpu_memory_utilization = nan\n[runtime.env]"
    ),
    "gpu-memory-inf": _profile(
        "[runtime.env]", "[runtime]\ngpu_memory_utilization = inf\n[runtime.env]"
    ),
    "description-too-long": _profile('name = "t"\n', f'name = "t"\ndescription = "{"x" * 5000}"\n'),
    "env-value-too-long": _profile("[runtime.env]\n", f'[runtime.env]\nBIG = "{"v" * 5000}"\n'),
    "profile-too-large": _profile('name = "t"\n', 'name = "t"\n' + "#" * (2 << 20) + "\n"),
}

LOCK_CASES: dict[str, Edit] = {
    "lock-not-toml": _lock("lock-version", "lock-version = = "),
    "lock-size-string": _lock("size = ", 'size = "'),
    "lock-version-wrong": _lock('lock-version = "1.0"', 'lock-version = "9.0"'),
    "lock-sha-short": _overlay_package("helper", "helper-2.0-py3-none-any.whl"),
    "lock-duplicate-package": _duplicate_package,
    "lock-http-url": _overlay_package(
        "helper",
        "helper-2.0-py3-none-any.whl",
        'url = "http://example.invalid/helper-2.0-py3-none-any.whl"',
    ),
    "lock-path-traversal": _overlay_package(
        "helper", "helper-2.0-py3-none-any.whl", f'path = "{"../" * 40}etc/passwd"'
    ),
    "lock-torch": _overlay_package("torch", "torch-2.0-py3-none-any.whl"),
    "lock-Torch": _overlay_package("Torch", "Torch-2.0-py3-none-any.whl"),
    "lock-torch_": _overlay_package("torch_", "torch_-2.0-py3-none-any.whl"),
    "lock-torch.": _overlay_package("torch.", "torch.-2.0-py3-none-any.whl"),
    "lock-torch[extra]": _overlay_package("torch[extra]", "torch-2.0-py3-none-any.whl"),
    "lock-torchaudio-upper": _overlay_package("TorchAudio", "torchaudio-2.0-py3-none-any.whl"),
    "lock-direct-url-torch-wheel": _overlay_package(
        "helper",
        "torch-2.0-py3-none-any.whl",
        'url = "https://example.invalid/torch-2.0-py3-none-any.whl"',
    ),
    "lock-too-large": _lock("lock-version", "#" * (33 << 20) + "\nlock-version"),
}
# lock-sha-short: _overlay_package writes a valid 64-hex hash; shorten it afterwards.
_short = LOCK_CASES["lock-sha-short"]
LOCK_CASES["lock-sha-short"] = lambda p: (_short(p), _lock("a" * 64, "a" * 12)(p))[-1]
LOCK_CASES["lock-sha-upper"] = lambda p: (_short(p), _lock("a" * 64, "A" * 64)(p))[-1]


def _project(tmp_path: Path) -> Project:
    return standard_project(tmp_path / "proj")


def _assert_refused(result: CliResult, codes: tuple[int, ...] = (2, 3)) -> None:
    assert result.code in codes, (result.code, result.out, result.err)
    assert "Traceback" not in result.text
    if result.out.startswith("{"):  # with --json the error is one JSON object on stdout
        error = json.loads(result.out)
        assert error["code"] == result.code and error["message"] and result.err == ""
        assert len(result.out) < 8000, "one clear message, not a dump"
        return
    assert result.err.startswith("kvenv: error:") or "usage:" in result.err, result.err
    assert len(result.err.strip()) < 4000, "one clear message, not a dump"


def _apply_args(project: Project, tmp_path: Path) -> list[str]:
    where = locations(tmp_path)
    root, cache = str(where.root), str(where.cache)
    return ["apply", str(project.profile_path), "--root", root, "--cache", cache, "--offline"]


def _assert_nothing_written(tmp_path: Path, before: dict[str, str]) -> None:
    assert tree_state(tmp_path / "proj") == before
    root = locations(tmp_path).root
    assert not (root / "current.json").exists()
    assert not (root / "generations").exists() or not any((root / "generations").iterdir())


@pytest.mark.parametrize("case", sorted(PROFILE_CASES))
def test_hostile_profile_is_refused(tmp_path: Path, case: str) -> None:
    project = _project(tmp_path)
    PROFILE_CASES[case](project)
    before = tree_state(tmp_path / "proj")
    for args in (
        _apply_args(project, tmp_path),
        ["plan", str(project.profile_path), "--json"],
        ["lock", str(project.profile_path), "--check"],
    ):
        result = run_cli(args)
        _assert_refused(result, (1, 2, 3) if args[0] == "lock" else (2, 3))
    _assert_nothing_written(tmp_path, before)
    assert not locations(tmp_path).root.exists(), "a refused profile must not create the root"


@pytest.mark.parametrize("case", sorted(LOCK_CASES))
def test_hostile_lock_is_refused(tmp_path: Path, case: str) -> None:
    project = _project(tmp_path)
    LOCK_CASES[case](project)
    before = tree_state(tmp_path / "proj")
    result = run_cli([a for a in _apply_args(project, tmp_path) if a != "--offline"])
    _assert_refused(result)
    named = (str(project.lock_path), "-2.0-py3-none-any.whl", "/etc/passwd")
    assert any(name in result.err for name in named), result.err
    _assert_nothing_written(tmp_path, before)


def test_uppercase_lock_hash_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path)
    digest = sha256_of(project.overlay[0])
    _sub(project.lock_path, digest, digest.upper())
    result = run_cli([a for a in _apply_args(project, tmp_path) if a != "--offline"])
    _assert_refused(result)


def test_wheel_whose_files_land_in_torch_is_refused_at_apply(tmp_path: Path) -> None:
    """A lock entry named "helper" whose wheel ships ``torch/__init__.py`` (and passes every
    hash check) is refused before anything is installed."""
    project = _project(tmp_path)
    sneaky = build_wheel(
        tmp_path / "proj" / "wheels" / "sneaky",
        "helper",
        "2.0",
        files={"helper/__init__.py": "", "torch/__init__.py": "pwned = True\n"},
    )
    _sub(project.lock_path, sha256_of(project.overlay[0]), sha256_of(sneaky))
    _sub(project.lock_path, f"size = {project.overlay[0].stat().st_size}", "size = 0")
    _sub(project.lock_path, "size = 0", f"size = {sneaky.stat().st_size}")
    _sub(project.lock_path, "../wheels/helper-2.0", "../wheels/sneaky/helper-2.0")
    before = tree_state(tmp_path / "proj")
    args = [a for a in _apply_args(project, tmp_path) if a != "--offline"]
    result = run_cli(args)
    _assert_refused(result)
    assert "torch" in result.err and "protected" in result.err
    _assert_nothing_written(tmp_path, before)


# -- manifests and the generation pointer ------------------------------------------------------


def _applied(tmp_path: Path) -> tuple[Project, Path]:
    project = _project(tmp_path)
    where = locations(tmp_path)
    args = ["apply", str(project.profile_path), "--root", str(where.root)]
    result = run_cli([*args, "--cache", str(where.cache)])
    assert result.code == 0, result.err
    pointer = json.loads((where.root / "current.json").read_text())
    manifest = where.root / "generations" / pointer["generation"] / "manifest.json"
    return project, manifest


def _edit_json(path: Path, edit: Callable[[dict[str, object]], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _set(dotted: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(data: dict[str, object]) -> None:
        keys = dotted.split(".")
        target: object = data
        for key in keys[:-1]:
            assert isinstance(target, dict)
            target = target[key]
        assert isinstance(target, dict)
        target[keys[-1]] = value

    return edit


MANIFEST_CASES: dict[str, Callable[[dict[str, object]], None]] = {
    "native-dir-outside-root": _set("dirs.native", "/etc"),
    "bin-dir-traversal": _set("dirs.bin", "ROOT/generations/../../../../usr/bin"),
    "pythonpath-outside-root": _set("activation.pythonpath", ["/tmp/evil"]),
    "path-outside-root": _set("activation.path", ["/usr/local/evil/bin"]),
    "root-relative": _set("root", "relative/root"),
    "root-elsewhere": _set("root", "/somewhere/else"),
    "generation-traversal": _set("dirs.generation", "../../etc"),
    "schema-string": _set("schema", "1"),
    "distributions-not-list": _set("distributions", {"a": 1}),
    "unknown-key": _set("surprise", True),
    # inside the root and well-formed, but not what kvenv wrote: the pointer's digest refuses them
    "env-LD_PRELOAD": _set("activation.env", {"LD_PRELOAD": "/tmp/evil.so"}),
    "ld-library-path-added": _set("activation.ld_library_path", ["/tmp/evil-libs"]),
    "kvenv-version-changed": _set("kvenv_version", "0.0.1"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_CASES))
def test_edited_manifest_is_refused(tmp_path: Path, case: str) -> None:
    project, manifest = _applied(tmp_path)
    root = locations(tmp_path).root

    def edit(data: dict[str, object]) -> None:
        MANIFEST_CASES[case](data)
        for key in ("bin",):
            dirs = data.get("dirs")
            if isinstance(dirs, dict) and str(dirs.get(key, "")).startswith("ROOT"):
                dirs[key] = str(root) + str(dirs[key])[4:]

    _edit_json(manifest, edit)
    before = tree_state(tmp_path)
    common = [str(project.profile_path), "--root", str(root), "--cache", str(tmp_path / "cache")]
    for command in ("activate", "status", "verify"):
        result = run_cli([command, *common])
        # verify is the check: a damaged state is a failed check (exit 1) that names the file
        # and the repair; the other commands refuse it as bad input
        _assert_refused(result, (1,) if command == "verify" else (2, 3))
        assert str(manifest) in result.err, result.err
    result = run_cli(["activate", "--manifest", str(manifest), "--root", str(root)])
    _assert_refused(result)
    assert tree_state(tmp_path) == before


POINTER_CASES: dict[str, str] = {
    "traversal": json.dumps({"schema": 1, "generation": "../../etc", "previous": None}),
    "absolute": json.dumps({"schema": 1, "generation": "/etc", "previous": None}),
    "wrong-type": json.dumps({"schema": 1, "generation": 7, "previous": None}),
    "not-json": "{",
    "list": "[]",
}


@pytest.mark.parametrize("case", sorted(POINTER_CASES))
def test_edited_pointer_is_refused(tmp_path: Path, case: str) -> None:
    project, _ = _applied(tmp_path)
    root = locations(tmp_path).root
    (root / "current.json").write_text(POINTER_CASES[case])
    before = tree_state(tmp_path)
    common = [str(project.profile_path), "--root", str(root), "--cache", str(tmp_path / "cache")]
    for command in ("activate", "status", "verify", "reset"):
        _assert_refused(run_cli([command, *common]), (1,) if command == "verify" else (2, 3))
    assert tree_state(tmp_path) == before


HOSTILE_TOTAL = len(PROFILE_CASES) + len(LOCK_CASES) + 1 + len(MANIFEST_CASES) + len(POINTER_CASES)
