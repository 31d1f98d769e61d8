"""The verifier a single-file bundle starts with: its ``__main__.py``, standard library only.

``python kvenv-PROFILE.pyz COMMAND`` runs this module first, and nothing else from the archive
until it has checked the interpreter and the whole file:

1. the interpreter: CPython, at least :data:`REQUIRES` (``kvenv bundle --single-file`` writes
   the oldest version the file's pure-Python code runs on into that line); any other is
   refused with one message;
2. the file: its last 64 bytes are the sha256 (hex) of every byte before them (the zip
   archive's comment, ``kvenv-pyz sha256=<hex>``, written last by the builder). A file whose
   bytes do not hash to it, whose comment is not there, or that was cut or extended, is
   refused with one message, before anything is read from the archive, imported or unpacked.

Then the archive's ``lib/`` (kvenv and its pure-Python dependencies) goes first on
``sys.path`` and :mod:`kvenv.cli.pyzrun` runs the command.

Run through ``runpy.run_path(FILE, run_name="kvenv_pyz")`` (in a notebook kernel) it imports
nothing from the archive into that process, whose own packages (attrs, packaging, ...) must
not be shadowed: it checks the interpreter and leaves ``activate(root=None)`` in the namespace
it returns, which runs ``python FILE activate --shell json`` in a child (the file is checked
there) and applies the result here as ``kvenv.activate()`` does (the generation's directories
ahead of site-packages, the ``.pth`` import lines its manifest lists run, nothing else in the
directories executed; the variables set).

A file that passed is sealed: its device, inode, size, mtime and ctime and its sha256 are
recorded in the user's cache (:func:`seal_file`), and a later run of the unchanged file skips
the hash (``verify`` and ``apply --repair`` always hash it). Any write moves the ctime, which
no user-level call can set back, so a changed file is hashed again and refused.

This self-check guards against a damaged or altered copy; whether the copy is the one that was
built is what the whole-file sha256 that ``kvenv bundle`` printed answers
(``sha256sum FILE``, or ``--sha256 HEX``, checked here). Kept tiny, on purpose: it is the one
part of the file that runs unchecked.
"""

from __future__ import annotations

import hashlib
import os
import sys

REQUIRES = (3, 10)  # oldest CPython: set by kvenv bundle --single-file
_MARK = b"kvenv-pyz sha256="
HEX = 64
_CHUNK = 1 << 20
_EXIT_BAD_INPUT = 2
HINT = "copy the file again, or rebuild it with `kvenv bundle PROFILE --single-file FILE`"


def archive() -> str:
    """The path of the single file (this module is its ``__main__.py``)."""
    return os.path.dirname(os.path.abspath(__file__))


def interpreter_problem(name: str) -> str | None:
    """Why this interpreter cannot run the file, or None."""
    implementation = sys.implementation.name
    if implementation == "cpython" and tuple(sys.version_info[:2]) >= REQUIRES:
        return None
    found = f"{implementation} {'.'.join(str(n) for n in sys.version_info[:3])}"
    wanted = f"CPython {REQUIRES[0]}.{REQUIRES[1]} or newer"
    return (
        f"{name} runs on {wanted}; this is {found} ({sys.executable})\n"
        "hint: run it with the host's own python3"
    )


def digests(path: str) -> tuple[str, str, str]:
    """(the digest the file carries, the sha256 of every byte before it, the whole file's
    sha256); the first is '' when the file does not end with ``MARK`` and 64 hex digits."""
    body = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        remaining = max(0, size - HEX)
        while remaining:
            got = stream.readinto(view[: min(_CHUNK, remaining)])
            if not got:
                break
            body.update(view[:got])
            remaining -= got
        tail = stream.read()
        stream.seek(max(0, size - HEX - len(_MARK)))
        mark = stream.read(len(_MARK))
    whole = body.copy()
    whole.update(tail)
    carried = tail.decode("ascii", "replace") if mark == _MARK and len(tail) == HEX else ""
    return carried, body.hexdigest(), whole.hexdigest()


def file_problem(path: str, expected: str | None = None) -> tuple[str | None, str]:
    """Why the file at ``path`` is not intact (or not the one whose whole-file sha256 is
    ``expected``), or None; and the whole file's sha256."""
    try:
        carried, actual, whole = digests(path)
    except OSError as error:
        return f"cannot read {path}: {error.strerror or error}", ""
    if not carried:
        return (
            f"{path} is not a kvenv single-file bundle, or it was cut or extended (it does "
            f"not end with its sha256)\nhint: {HINT}"
        ), whole
    if carried != actual:
        return (
            f"{path} is damaged or was changed: its bytes hash to sha256 {actual}, not to the "
            f"{carried} it carries; nothing was unpacked or run\nhint: {HINT}"
        ), whole
    return _unexpected(path, whole, expected), whole


def _unexpected(path: str, whole: str, expected: str | None) -> str | None:
    if expected is None or expected.lower() == whole:
        return None
    return (
        f"{path} is intact but is not the file you expected: its sha256 is {whole}, not "
        f"{expected}\nhint: check which file you attached"
    )


def seal_file(path: str) -> str:
    """Where the seal of the file at ``path`` is kept: the user's cache, never the file's
    directory (a Kaggle dataset is read-only)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(os.path.realpath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(base, "kvenv", "single-file", "seals", key[:32] + ".json")


def _identity(st: os.stat_result) -> list[int]:
    """:func:`kvenv._util.identity.of_stat`, written again: this module runs before anything is
    imported from the archive."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def sealed_digest(path: str) -> str | None:
    """The whole sha256 of the file at ``path`` when an earlier run checked it in full and
    it is unchanged since (same device, inode, size, mtime and ctime); else None."""
    import json

    try:
        with open(seal_file(path), encoding="utf-8") as stream:
            data = json.load(stream)
        identity = _identity(os.stat(path))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("identity") != identity:
        return None
    whole = data.get("sha256")
    return whole if isinstance(whole, str) and len(whole) == HEX else None


def write_seal(path: str, before: os.stat_result, whole: str) -> None:
    """Record that the file at ``path``, as ``before`` says it was, hashed to ``whole`` and
    passed; nothing when it changed while it was hashed or the seal cannot be written."""
    import json

    try:
        identity = _identity(os.stat(path))
        if identity != _identity(before):
            return
        target = seal_file(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        part = f"{target}.{os.getpid()}.tmp"
        with open(part, "w", encoding="utf-8") as stream:
            seal = {"file": os.path.realpath(path), "identity": identity, "sha256": whole}
            json.dump(seal, stream)
        os.replace(part, target)
    except OSError:
        pass


def refuse(message: str) -> int:
    sys.stderr.write(f"kvenv: error: {message}\n")
    return _EXIT_BAD_INPUT


def _expected(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--sha256 HEX`` taken out of the command line (the file's expected whole sha256)."""
    rest = list(argv)
    for number, word in enumerate(rest):
        if word == "--sha256" and number + 1 < len(rest):
            value = rest[number + 1]
            del rest[number : number + 2]
            return value, rest
        if word.startswith("--sha256="):
            del rest[number]
            return word.split("=", 1)[1], rest
    return None, rest


def checked(argv: list[str]) -> tuple[str, str, list[str]] | int:
    """The file's path, its whole sha256 and the command line left, once the interpreter and
    the file passed; else the exit code of the refusal (already reported). A file sealed by
    an earlier full check and unchanged since is not hashed again, except for ``verify`` and
    ``apply --repair``, which hash it in full."""
    path = archive()
    problem = interpreter_problem(os.path.basename(path))
    if problem is not None:
        return refuse(problem)
    expected, rest = _expected(argv)
    full = rest[:1] == ["verify"] or "--repair" in rest
    whole = None if full else sealed_digest(path)
    if whole is not None:
        problem = _unexpected(path, whole, expected)
    else:
        try:
            before = os.stat(path)
        except OSError as error:
            return refuse(f"cannot read {path}: {error.strerror or error}")
        problem, whole = file_problem(path, expected)
        if problem is None:
            write_seal(path, before, whole)
    if problem is not None:
        return refuse(problem)
    if os.path.join(path, "lib") not in sys.path:
        sys.path.insert(0, os.path.join(path, "lib"))
    return path, whole, rest


def main() -> int:
    """``python FILE COMMAND ...``: check, then run the command (kvenv.cli.pyzrun)."""
    done = checked(sys.argv[1:])
    if isinstance(done, int):
        return done
    path, whole, rest = done
    import importlib

    runner = importlib.import_module("kvenv.cli.pyzrun")
    code: int = runner.run_file(path, whole, rest)
    return code


def activate_here(root: str | None = None) -> bool:
    """Activate the file's applied profile in this interpreter (and, through ``os.environ``,
    its children), as ``kvenv.activate()`` does; ``root``: the runtime root (default: as
    ``python FILE activate`` finds it). Raises RuntimeError with kvenv's message when the file
    is refused or nothing is applied."""
    import importlib
    import json
    import subprocess

    argv = [sys.executable, archive(), "activate", "--shell", "json"]
    done = subprocess.run(argv + (["--root", str(root)] if root else []), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode("utf-8", "replace").strip())
    data = json.loads(done.stdout)
    prepend = data.get("prepend", {})
    entries = list(prepend.get("PYTHONPATH", []))
    # as kvenv.env.activation.activate_in_process: paths added, nothing in the directories
    # executed; only the .pth import lines the manifest lists (its wheels' allowed ones) run
    sys.path[:] = entries + [p for p in sys.path if p not in entries]
    for line in data.get("pth_imports", []):
        try:
            exec(line)  # what site.addpackage does with such a line
        except Exception as exc:
            sys.stderr.write(f"kvenv: a .pth import line failed ({line!r}): {exc}\n")
    for name, values in prepend.items():
        current = [e for e in os.environ.get(name, "").split(os.pathsep) if e]
        os.environ[name] = os.pathsep.join(values + [e for e in current if e not in values])
    for name, value in data.get("set", {}).items():
        os.environ[name] = value
    importlib.invalidate_caches()
    return True


def load() -> None:
    """``runpy.run_path(FILE, run_name="kvenv_pyz")``: refuse another interpreter (SystemExit
    with the message), else leave :func:`activate_here` in the namespace as ``activate``.
    Imports nothing from the archive."""
    problem = interpreter_problem(os.path.basename(archive()))
    if problem is not None:
        raise SystemExit(refuse(problem))
    globals()["activate"] = activate_here  # the name a notebook calls: pyz["activate"]()


if __name__ == "__main__":
    sys.exit(main())
elif __name__ == "kvenv_pyz":
    load()
