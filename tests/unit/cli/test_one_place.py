"""The same profile is the same place from anywhere (issue 23).

- The README's first command, run inside a checkout laid out as an editable install (``kvenv/``
  beside ``profiles/``, so ``./profiles/demo.toml`` *is* the built-in ``demo``), then every
  everyday command on ``demo`` from another directory, with the default root and cache; the
  same with kvenv built as a wheel (from that checkout) and installed in a venv of its own.
- docs/kaggle.md's "Offline" recipe, its code blocks taken from the page and run as written
  (``/kaggle/input`` is a read-only bind mount of a directory here), in a network namespace,
  with only ``$KVENV_PROFILE``, ``$KVENV_ROOT`` and ``$KVENV_CACHE_DIR`` set: ``kvenv.activate()``
  in Python finds what the CLI applied, and ``status`` and ``verify`` agree. The same for the
  page's single-file recipe (``kvenv bundle --single-file``, run by a python with no kvenv).
- A matrix: each documented way to name the profile (name, ``./profiles`` file, a path, a
  bundle's copy, ``$KVENV_PROFILE``), the root and the cache (flag, variable, default), from the
  CLI and from Python, reaches the one applied generation.

The demo is built here (tests/support/placedemo.py): the built-in one downloads from the index.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.placedemo import clean_env, demo_project

KVENV = str(Path(sys.executable).parent / "kvenv")


def _run(
    argv: list[str] | str, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        shell=isinstance(argv, str),
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in done.stderr, (argv, done.stderr)
    return done


def _ok(argv: list[str] | str, cwd: Path, env: dict[str, str], stdin: str | None = None) -> str:
    done = _run(argv, cwd, env, stdin)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def _checkout(base: Path, local: str = "demo") -> Path:
    """A copy of this checkout as an editable install sees it: the ``kvenv`` package beside
    ``profiles/``, ``locks/`` and ``schemas/`` (its built-ins), without the built-in ``local``
    (the test builds its own: :func:`tests.support.placedemo.demo_project`)."""
    checkout = base / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", f"{local}.toml", f"pylock.{local}.toml")
    for name in ("kvenv", "profiles", "locks", "schemas"):
        shutil.copytree(REPO / name, checkout / name, ignore=ignore)
    return checkout


def _readme_first_command() -> str:
    """The README's first command, after kvenv's install (``{ plan; apply demo && ... }``)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None
    line = next(ln for ln in block.group(1).splitlines() if ln.startswith("python3 -m venv"))
    install, _, rest = line.partition(" && { ")
    assert "pip install ." in install and rest.endswith("; }"), line
    return "{ " + rest.replace(".venv/bin/kvenv", "kvenv")


def _readme_then_anywhere(checkout: Path, env: dict[str, str], kvenv: str, tmp: Path) -> None:
    """The README's first command inside ``checkout``, then every everyday command on ``demo``
    from another directory, with the default root and cache (under ``env``'s ``HOME``)."""
    command = _readme_first_command().replace("/tmp/kvenv-demo.md", str(tmp / "demo.md"))
    out = _ok(command.replace("kvenv ", f"{kvenv} "), checkout, env)
    assert "<p># hello *kvenv*</p>" in out, out  # the applied console script ran
    runtimes = Path(env["HOME"]) / ".local" / "share" / "kvenv" / "runtimes" / "demo"
    assert (runtimes / "current.json").is_file()  # the default root
    away = tmp / "away"
    away.mkdir()
    code = "import markdown_it, mdurl; print(markdown_it.__file__)"
    out = _ok([kvenv, "run", "demo", "--", "python", "-c", code], away, env)
    assert out.startswith(str(runtimes)), out
    for command in ("list", "generations", "verify", "activate"):
        _ok([kvenv, command, "demo"], away, env)
    status = json.loads(_ok([kvenv, "status", "demo", "--json"], away, env))
    assert status["applied"] is True and status["owned"] is True, status
    assert status["current"] is True, status  # the built-in is the checkout's file
    shell_env = {**env, "SHELL": "/bin/sh"}
    stdin = f"markdown-it {tmp / 'demo.md'}\n"
    out = _ok([kvenv, "shell", "demo"], away, shell_env, stdin=stdin)
    assert "<p># hello *kvenv*</p>" in out, out
    # and the project file, named from the checkout again, is the same profile
    assert "already up to date" in _ok([kvenv, "apply", "demo"], checkout, env)
    assert "already up to date" in _ok([kvenv, "apply", "demo"], away, env)


def test_the_readme_demo_from_a_checkout_then_from_anywhere(tmp_path: Path) -> None:
    """An editable install: ``./profiles/demo.toml`` in the checkout *is* the built-in."""
    checkout = _checkout(tmp_path)
    env = clean_env(tmp_path / "home", checkout)
    where = _ok([sys.executable, "-c", "import kvenv; print(kvenv.__file__)"], tmp_path, env)
    assert where.strip() == str(checkout / "kvenv" / "__init__.py")  # the copy, as installed
    demo_project(checkout, env=env)
    _readme_then_anywhere(checkout, env, KVENV, tmp_path)


def test_the_readme_demo_with_kvenv_installed_from_its_wheel(tmp_path: Path) -> None:
    """kvenv built as a wheel (from a checkout whose demo is built here) and installed into a
    venv of its own: the built-in ``demo`` is the wheel's copy, ``./profiles/demo.toml`` the
    checkout's file; one profile, one root."""
    import venv

    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    checkout = _checkout(tmp_path)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, checkout / name)
    env = clean_env(tmp_path / "home", checkout)
    demo_project(checkout, env=env)
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)]
    _ok(build, checkout, env)
    (wheel,) = dist.glob("kvenv_overlay-*.whl")
    home = tmp_path / "kvenv-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
    python = home / "bin" / "python"
    paths = json.loads(
        _ok(
            [
                str(python),
                "-I",
                "-c",
                "import json,sysconfig;print(json.dumps(sysconfig.get_paths()))",
            ],
            tmp_path,
            env,
        )
    )
    scheme = {k: paths[k] for k in ("purelib", "platlib", "scripts", "data")}
    scheme["headers"] = paths["include"]
    with WheelFile.open(wheel) as source:
        install(source, SchemeDictionaryDestination(scheme, str(python), "posix"), {})
    # kvenv's dependencies: this test environment's, as a path entry (its .pth files, this
    # checkout's editable kvenv among them, are not processed from there)
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "attrs").is_dir())
    Path(paths["purelib"], "kvenv-test-deps.pth").write_text(deps + "\n")
    env.pop("PYTHONPATH")
    env["PATH"] = f"{home / 'bin'}:{env['PATH']}"
    where = _ok([str(python), "-c", "import kvenv; print(kvenv.__file__)"], tmp_path, env)
    assert where.strip() == str(Path(paths["purelib"]) / "kvenv" / "__init__.py"), where
    _readme_then_anywhere(checkout, env, str(home / "bin" / "kvenv"), tmp_path)


def _netns_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rnm", "true"], capture_output=True).returncode == 0


def _kaggle_offline_blocks() -> tuple[str, list[str]]:
    """docs/kaggle.md "Offline", the directory bundle's recipe (the one that installs kvenv and
    calls ``kvenv.activate()``): the connected machine's command, and the notebook cell's
    lines, as the page gives them."""
    text = (REPO / "docs" / "kaggle.md").read_text(encoding="utf-8")
    section = text.split("\n## Offline", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"```python\n(.*?)```", section, re.S)
    (cell,) = [body for body in cells if "import kvenv" in body]
    before = section[: section.index(cell)]
    commands = re.findall(r"`(kvenv bundle [^`]*-o kvenv-bundle)`", before)
    assert commands, "the directory bundle's command is not on the page"
    return commands[-1], [ln for ln in cell.splitlines() if ln.strip()]


@pytest.mark.skipif(not _netns_works(), reason="needs `unshare -rnm` (user, network, mounts)")
def test_the_kaggle_offline_recipe_runs_as_written(tmp_path: Path) -> None:
    command, cell = _kaggle_offline_blocks()
    assert command.startswith("kvenv bundle kaggle-t4x2-cu128 -o kvenv-bundle"), command
    # kvenv as installed, its built-in kaggle-t4x2-cu128 built here like the demo (the real
    # one pins vLLM for CUDA): a checkout copy, on the connected machine and offline alike.
    checkout = _checkout(tmp_path, "kaggle-t4x2-cu128")
    connected = clean_env(tmp_path / "connected-home", checkout)
    demo_project(checkout, "kaggle-t4x2-cu128", env=connected)
    machine = tmp_path / "connected"
    machine.mkdir()
    _ok(command, machine, connected)  # the page's command, unchanged
    inputs = tmp_path / "input"  # /kaggle/input: the dataset, mounted read-only below
    shutil.copytree(machine / "kvenv-bundle", inputs / "kvenv-bundle")
    # The offline notebook: its ! lines are shell commands, the rest is Python, in order.
    pip, *rest = cell
    assert pip.startswith("!pip install") and "kvenv-overlay" in pip  # kvenv itself: here already
    working = tmp_path / "working"
    working.mkdir()
    script = ["set -e"]
    python: list[str] = []
    for line in rest:
        line = line.replace("/kaggle/input", str(inputs))
        if line.startswith("!"):
            script.append(line[1:])
        else:
            python.append(line)
    assert python == ["import kvenv; kvenv.activate()"], python
    check = (
        "import markdown_it, mdurl, os, json\n"
        "print(json.dumps({'native': markdown_it.__file__, 'overlay': mdurl.__file__,"
        " 'manifest': os.environ.get('KVENV_MANIFEST')}))\n"
    )
    program = "\n".join(python) + "\n" + check
    script.append(f"python -c {shlex.quote(program)} > activated.json")
    script.append("kvenv status --json > status.json")
    script.append("kvenv verify --json > verify.json")
    env = clean_env(tmp_path / "home", checkout)
    env.update(  # only these: the profile by name (the built-in), the root, the cache
        KVENV_PROFILE="kaggle-t4x2-cu128",
        KVENV_ROOT=str(working / "kvenv"),
        KVENV_CACHE_DIR=str(working / "kvenv-cache"),
    )
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    argv = ["unshare", "-rnm", "sh", "-c", mount, str(inputs), "sh", "-c", "\n".join(script)]
    _ok(argv, working, env)
    activated = json.loads((working / "activated.json").read_text())
    root = working / "kvenv"
    assert activated["native"].startswith(str(root / "generations")), activated
    assert activated["overlay"].startswith(str(root / "generations")), activated
    status = json.loads((working / "status.json").read_text())
    verify = json.loads((working / "verify.json").read_text())
    assert status["applied"] is True and status["owned"] is True, status
    assert status["current"] is True, status  # the built-in is the profile the bundle holds
    assert verify["ok"] is True, verify
    generation = Path(activated["manifest"]).parent.name
    assert status["generation"] == verify["generation"] == generation, (status, verify)


def test_every_way_to_name_the_profile_root_and_cache_reaches_one_generation(
    tmp_path: Path,
) -> None:
    """One apply of the built-in ``demo`` (a checkout copy's), then each documented way to
    name the profile (built-in name, ``./profiles`` file, a path, a copy elsewhere, a bundle's
    copy, ``$KVENV_PROFILE`` by name or path, ``$KVENV_PROFILE_PATH``), the root (``--root``,
    ``$KVENV_ROOT``, the default) and the cache (``--cache``, ``$KVENV_CACHE_DIR``, the default),
    from the CLI (``activate``, quick and full path) and from Python (``kvenv.activate()``),
    activates that one generation."""
    checkout = _checkout(tmp_path)
    home = tmp_path / "home"
    base = clean_env(home, checkout)
    demo_project(checkout, env=base)
    away = tmp_path / "away"
    away.mkdir()
    _ok([KVENV, "apply", "demo"], away, base)  # the built-in, default root and cache
    root = home / ".local" / "share" / "kvenv" / "runtimes" / "demo"
    cache = home / ".cache" / "kvenv"
    generation = json.loads((root / "current.json").read_text())["generation"]
    project_file = checkout / "profiles" / "demo.toml"
    copy = shutil.copytree(checkout, tmp_path / "copy", ignore=shutil.ignore_patterns("kvenv"))
    _ok([KVENV, "bundle", "demo", "-o", str(tmp_path / "bundle")], away, base)
    bundled = tmp_path / "bundle" / "profiles" / "demo.toml"
    assert bundled.is_file()

    # (how, profile argument or None, working directory, environment added)
    profiles: list[tuple[str, str | None, Path, dict[str, str]]] = [
        ("built-in by name", "demo", away, {}),
        ("./profiles by name", "demo", checkout, {}),
        ("a path", str(project_file), away, {}),
        ("a relative path", "profiles/demo.toml", checkout, {}),
        ("a copy elsewhere", str(copy / "profiles" / "demo.toml"), away, {}),
        ("a bundle's copy", str(bundled), away, {}),
        ("$KVENV_PROFILE name", None, away, {"KVENV_PROFILE": "demo"}),
        ("$KVENV_PROFILE path", None, away, {"KVENV_PROFILE": str(bundled)}),
        ("$KVENV_PROFILE_PATH", "demo", away, {"KVENV_PROFILE_PATH": str(copy / "profiles")}),
    ]
    # (how, flags, environment added)
    roots = [
        ("default root", [], {}),
        ("--root", ["--root", str(root)], {}),
        ("$KVENV_ROOT", [], {"KVENV_ROOT": str(root)}),
    ]
    caches = [
        ("default cache", [], {}),
        ("--cache", ["--cache", str(cache)], {}),
        ("$KVENV_CACHE_DIR", [], {"KVENV_CACHE_DIR": str(cache)}),
    ]
    cases = [(p, roots[0], caches[0]) for p in profiles]
    cases += [(profiles[0], r, c) for r in roots for c in caches if (r, c) != (roots[0], caches[0])]
    seen = []
    for (how, ref, cwd, added), (root_how, root_flags, root_env), (
        cache_how,
        cache_flags,
        cache_env,
    ) in cases:
        env = {**base, **added, **root_env, **cache_env}
        label = f"{how} / {root_how} / {cache_how}"
        flags = [*root_flags, *cache_flags]
        for extra in ([], ["-v"]):  # the start-up path, and the full one
            argv = [KVENV, "activate", *([ref] if ref else []), *flags, "--shell", "json", *extra]
            hook = json.loads(_ok(argv, cwd, env))
            manifest = hook["set"]["KVENV_MANIFEST"]
            assert Path(manifest).parent.name == generation, (label, extra, manifest)
        if root_flags or cache_flags:
            continue  # kvenv.activate() takes the root and cache from the environment only
        code = (
            "import os, kvenv\n"
            f"assert kvenv.activate({ref!r}) is True\n"
            "import markdown_it\n"
            "print(os.environ['KVENV_MANIFEST'], markdown_it.__file__)\n"
        )
        manifest, module = _ok([sys.executable, "-c", code], cwd, env).split()
        assert Path(manifest).parent.name == generation, (label, "python", manifest)
        assert module.startswith(str(root / "generations" / generation)), (label, module)
        seen.append(label)
    assert len(seen) == len(profiles) + 3  # every profile way, and root/cache by env in Python


def _kaggle_single_file_blocks() -> tuple[str, list[str]]:
    """docs/kaggle.md "Offline", the single file's recipe: the connected machine's command and
    the notebook cell's lines, as the page gives them."""
    text = (REPO / "docs" / "kaggle.md").read_text(encoding="utf-8")
    section = text.split("\n## Offline", 1)[1].split("\n## ", 1)[0]
    consoles = re.findall(r"```console\n(.*?)```", section, re.S)
    (command,) = [ln[2:] for ln in consoles[0].splitlines() if ln.startswith("$ ")]
    cell = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "runpy" in b)
    return command, [ln for ln in cell.splitlines() if ln.strip()]


@pytest.mark.skipif(not _netns_works(), reason="needs `unshare -rnm` (user, network, mounts)")
def test_the_kaggle_single_file_recipe_runs_as_written(tmp_path: Path) -> None:
    """The single file's recipe, the cell run as IPython would (``!`` lines through the shell
    with ``{NAME}`` filled from the cell's variables) by a python with no kvenv, with only
    ``$KVENV_PROFILE``, ``$KVENV_ROOT`` and ``$KVENV_CACHE_DIR`` set; ``import vllm`` stands
    for the profile's native (here markdown_it). Then the file's ``status`` and ``verify``.
    (The file's own commands name its own copy of the profile, so this passed before issue 23's
    identity change too: it keeps the page's first recipe true with those variables set.)"""
    command, cell = _kaggle_single_file_blocks()
    assert command.startswith("kvenv bundle kaggle-t4x2-cu128 --single-file "), command
    checkout = _checkout(tmp_path, "kaggle-t4x2-cu128")
    connected = clean_env(tmp_path / "connected-home", checkout)
    demo_project(checkout, "kaggle-t4x2-cu128", env=connected)
    machine = tmp_path / "connected"
    machine.mkdir()
    _ok(command, machine, connected)  # the page's command, unchanged
    name = command.split("--single-file ", 1)[1].split()[0]
    inputs = tmp_path / "input"  # /kaggle/input: the dataset, mounted read-only below
    (inputs / "kvenv-bundle").mkdir(parents=True)
    shutil.copy2(machine / name, inputs / "kvenv-bundle" / name)
    kernel = tmp_path / "kernel"  # the notebook's Python: no kvenv
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(kernel)], check=True)
    program = ["import json, os, subprocess"]
    for line in cell:
        line = line.replace("/kaggle/input", str(inputs)).split("  #")[0].rstrip()
        if line.startswith("!"):
            program.append(
                f"subprocess.run({line[1:]!r}.format(**globals()), shell=True, check=True)"
            )
        else:
            program.append(line.replace("import vllm", "import markdown_it, mdurl"))
    program.append(
        "print(json.dumps({'native': markdown_it.__file__, 'overlay': mdurl.__file__,"
        " 'manifest': os.environ.get('KVENV_MANIFEST')}))"
    )
    working = tmp_path / "working"
    working.mkdir()
    (working / "cell.py").write_text("\n".join(program) + "\n")
    pyz = inputs / "kvenv-bundle" / name
    script = [
        "set -e",
        "python -I cell.py > activated.json",
        f"python -I {shlex.quote(str(pyz))} status --json > status.json",
        f"python -I {shlex.quote(str(pyz))} verify --json > verify.json",
    ]
    env = clean_env(tmp_path / "home", checkout)
    env.pop("PYTHONPATH")
    env["PATH"] = f"{kernel / 'bin'}:/usr/bin:/bin"
    env.update(
        KVENV_PROFILE="kaggle-t4x2-cu128",
        KVENV_ROOT=str(working / "kvenv"),
        KVENV_CACHE_DIR=str(working / "kvenv-cache"),
    )
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    argv = ["unshare", "-rnm", "sh", "-c", mount, str(inputs), "sh", "-c", "\n".join(script)]
    _ok(argv, working, env)
    # the cell's output: apply's report, then the line the check printed
    activated = json.loads((working / "activated.json").read_text().splitlines()[-1])
    root = working / "kvenv"
    assert activated["native"].startswith(str(root / "generations")), activated
    assert activated["overlay"].startswith(str(root / "generations")), activated
    status = json.loads((working / "status.json").read_text())
    verify = json.loads((working / "verify.json").read_text())
    assert status["applied"] is True and status["owned"] is True, status
    assert verify["ok"] is True, verify
    generation = Path(activated["manifest"]).parent.name
    assert status["generation"] == verify["generation"] == generation, (status, verify)
