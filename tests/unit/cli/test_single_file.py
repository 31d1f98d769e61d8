"""``kvenv bundle PROFILE --single-file FILE``, run as a user on an offline Kaggle notebook
would: the file alone in a read-only directory, a fresh interpreter with no kvenv, no network.

The file is built from the demo project (tests/support/demo.py) with this checkout's kvenv,
copied alone into ``input/`` and run by a new virtual environment's python (no kvenv, no
packages, ``-I``) inside ``unshare -rnm``: a user namespace with no network and ``input/`` a
read-only bind mount (skipped where the machine does not allow namespaces). ``apply``,
``activate`` (a new shell imports the overlay from the runtime root), ``verify`` and
``status`` all pass; a copy with one byte changed, anywhere but in the verifier's own code, is
refused with one message before anything is unpacked (no cache, no root)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.demo import KVENV, clean_env, demo_project, netns_works
from tests.support.hermetic import real_home

pytestmark = pytest.mark.skipif(
    not netns_works(), reason="needs `unshare -rnm` (a user, network and mount namespace)"
)
READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(the single file, alone in its directory; a python with no kvenv; the sha256 printed)."""
    base = tmp_path_factory.mktemp("single")
    project = demo_project(base)
    out = base / "built" / "kvenv-demo.pyz"
    done = subprocess.run(
        [KVENV, "bundle", "demo", "--single-file", str(out), "--cache", str(base / "c")],
        cwd=project,
        capture_output=True,
        text=True,
        env=clean_env(base),
    )
    assert done.returncode == 0, done.stderr
    printed = next(line.split()[1] for line in done.stdout.splitlines() if "sha256 " in line)
    inputs = base / "input"
    inputs.mkdir()
    shutil.copy2(out, inputs / out.name)
    host = base / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(host)], check=True)
    python = host / "bin" / "python"
    no_kvenv = subprocess.run([python, "-I", "-c", "import kvenv"], capture_output=True)
    assert no_kvenv.returncode != 0  # the host has no kvenv of its own
    return inputs / out.name, python, printed


def _offline(
    command: str, pyz: Path, base: Path, *, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` (a shell line) with no network and the file's directory read-only."""
    env = clean_env(home or base)
    env["PATH"] = "/usr/bin:/bin"  # no kvenv on PATH either
    argv = ["unshare", "-rnm", "sh", "-c", READ_ONLY, str(pyz.parent)]
    argv += ["bash", "-c", 'touch "$0" 2>/dev/null && exit 99; ' + command, str(pyz)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=base)


def test_the_single_file_applies_activates_and_verifies_offline_without_kvenv(
    made: tuple[Path, Path, str], tmp_path: Path
) -> None:
    pyz, python, printed = made
    root = tmp_path / "root"
    run = f"{shlex.quote(str(python))} -I {shlex.quote(str(pyz))}"
    about = _offline(f"{run} --about", pyz, tmp_path)
    assert about.returncode == 0, about.stderr
    assert f"sha256:  {printed}" in about.stdout
    assert "runs on: CPython 3." in about.stdout and "isal: native code" in about.stdout

    applied = _offline(f"{run} apply --root {root}", pyz, tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert "applied demo: generation " in applied.stdout
    assert f"host python: {python} (from --python)" in applied.stdout
    assert f"{pyz} activate --root {root}" in applied.stdout  # the fix runs the file again
    assert applied.stdout.count("not copied") == 1  # one summary note, not one per package
    cache = tmp_path / "home" / ".cache" / "kvenv"
    assert len(list(cache.glob("artifacts-v1/sha256/*/*/*.whl"))) == 2  # streamed, checked

    shell = f'eval "$({run} activate --root {root})" && '
    shell += f"{python} -c 'import markdown_it, mdurl; print(markdown_it.__file__, mdurl.__file__)'"
    imported = _offline(shell, pyz, tmp_path)
    assert imported.returncode == 0, imported.stderr
    files = imported.stdout.split()
    assert len(files) == 2 and all(f.startswith(f"{root}/generations/") for f in files)

    verified = _offline(f"{run} verify --root {root}", pyz, tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert "2 distributions match their RECORD" in verified.stdout
    status = _offline(f"{run} status --root {root}", pyz, tmp_path)
    assert status.returncode == 0, status.stderr
    assert "profile: demo" in status.stdout and "current: yes" in status.stdout
    assert _offline(f"{run} --sha256 {printed} status --root {root}", pyz, tmp_path).returncode == 0
    wrong = _offline(f"{run} --sha256 {'0' * 64} status --root {root}", pyz, tmp_path)
    assert wrong.returncode == 2 and "not the file you expected" in wrong.stderr


def _places(pyz: Path) -> dict[str, int]:
    """A byte in each part of the file: a wheel, kvenv's code, a dependency, the manifest,
    the verifier's docstring, the central directory and the digest at the end."""
    data = pyz.read_bytes()
    with zipfile.ZipFile(pyz) as archive:
        infos = {i.filename: i for i in archive.infolist()}

        def inside(name: str) -> int:
            info = infos[name]
            return info.header_offset + 30 + len(info.filename) + info.compress_size // 2

        wheel = next(n for n in infos if n.startswith("bundle/wheels/mdurl"))
        docstring = infos["__main__.py"].header_offset + 30 + len("__main__.py") + 200
        central = data.rindex(b"PK\x01\x02")
    return {
        "a wheel": inside(wheel),
        "kvenv's code": inside("lib/kvenv/env/apply.py"),
        "a dependency": inside("lib/attr/__init__.py"),
        "the manifest": inside("kvenv-pyz.json"),
        "the verifier's docstring": docstring,
        "the central directory": central + 20,
        "the digest": len(data) - 10,
    }


PARTS = (
    "a wheel",
    "kvenv's code",
    "a dependency",
    "the manifest",
    "the verifier's docstring",
    "the central directory",
    "the digest",
)


@pytest.mark.parametrize("name", PARTS)
def test_one_changed_byte_is_refused_before_anything_is_unpacked(
    made: tuple[Path, Path, str], tmp_path: Path, name: str
) -> None:
    pyz, python, _ = made
    where = _places(pyz)[name]
    damaged_dir = tmp_path / "input"
    damaged_dir.mkdir()
    damaged = damaged_dir / pyz.name
    data = bytearray(pyz.read_bytes())
    data[where] ^= 0x01
    damaged.write_bytes(bytes(data))
    root = tmp_path / "root"
    run = f"{shlex.quote(str(python))} -I {shlex.quote(str(damaged))}"
    refused = _offline(f"{run} apply --root {root}", damaged, tmp_path)
    assert refused.returncode == 2, (name, refused.stdout, refused.stderr)
    assert refused.stderr.startswith("kvenv: error: "), (name, refused.stderr)
    assert "damaged or was changed" in refused.stderr or "cut or extended" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "home").exists() and not root.exists()  # nothing unpacked


def test_a_cut_or_extended_file_is_refused(made: tuple[Path, Path, str], tmp_path: Path) -> None:
    pyz, python, _ = made
    for label, data in (("cut", pyz.read_bytes()[:-1]), ("extended", pyz.read_bytes() + b"\n")):
        changed = tmp_path / label / pyz.name
        changed.parent.mkdir()
        changed.write_bytes(data)
        done = _offline(f"{python} -I {changed} status", changed, tmp_path)
        assert done.returncode == 2, (label, done.stderr)
        assert "cut or extended" in done.stderr, (label, done.stderr)
        assert not (tmp_path / "home").exists()


def test_a_sealed_file_changed_in_place_is_hashed_again_and_refused(
    made: tuple[Path, Path, str], tmp_path: Path
) -> None:
    pyz, python, _ = made
    copy = tmp_path / "input" / pyz.name
    copy.parent.mkdir()
    shutil.copy2(pyz, copy)
    first = _offline(f"{python} -I {copy} --about", copy, tmp_path)
    assert first.returncode == 0, first.stderr
    seals = tmp_path / "home" / ".cache" / "kvenv" / "single-file" / "seals"
    assert len(list(seals.glob("*.json"))) == 1  # checked in full once, then sealed
    where = _places(copy)["a wheel"]
    with open(copy, "r+b") as stream:  # same size, same path: only the ctime tells
        stream.seek(where)
        byte = stream.read(1)
        stream.seek(where)
        stream.write(bytes([byte[0] ^ 0x01]))
    again = _offline(f"{python} -I {copy} --about", copy, tmp_path)
    assert again.returncode == 2 and "damaged or was changed" in again.stderr, again.stderr


def _other_python(version: str) -> str | None:
    """The executable of another CPython ``version`` on this machine (on PATH, or one that
    pyenv installed), if there is one."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(real_home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    for found in candidates:
        if found is None:
            continue
        done = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
        )
        if done.returncode == 0:
            return done.stdout.strip()
    return None


def test_an_older_python_is_refused_with_one_message(
    made: tuple[Path, Path, str], tmp_path: Path
) -> None:
    pyz, _, _ = made
    about = _offline(f"{made[1]} -I {pyz} --about", pyz, tmp_path)
    oldest = about.stdout.split("runs on: CPython ", 1)[1].split()[0]
    older = f"3.{int(oldest.split('.')[1]) - 1}"
    python = _other_python(older)
    if python is None:
        pytest.skip(f"no python{older} on this machine")
    refused = _offline(f"{python} -I {pyz} apply --root {tmp_path / 'root'}", pyz, tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"kvenv: error: {pyz.name} runs on CPython {oldest} or newer")
    assert "Traceback" not in refused.stderr and not (tmp_path / "root").exists()


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_a_newer_python_runs_the_file_from_its_sources(
    made: tuple[Path, Path, str], tmp_path: Path, version: str
) -> None:
    pyz, built_with, _ = made
    python = _other_python(version)
    if python is None:
        pytest.skip(f"no python{version} on this machine")
    done = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"], text=True,
                          capture_output=True)  # fmt: skip
    mine = subprocess.run([built_with, "-c", "import sys; print(sys.version_info[:2])"],
                          text=True, capture_output=True)  # fmt: skip
    if done.stdout == mine.stdout:
        pytest.skip(f"python{version} is the one the file was built with")
    root = tmp_path / "root"
    applied = _offline(f"{python} -I {pyz} apply --root {root}", pyz, tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert f"host python: {python} (from --python)" in applied.stdout
    status = _offline(f"{python} -I {pyz} status --root {root}", pyz, tmp_path)
    assert status.returncode == 0 and "current: yes" in status.stdout, status.stderr
