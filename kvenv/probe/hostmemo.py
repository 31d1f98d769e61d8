"""The live host's identity: what a probe of it read, so that a later command can tell, without
probing again, that the host is the one a verdict was reached on (issue 13).

A host snapshot (:func:`kvenv.probe.host.take_snapshot`) is a function of three things, and
:func:`watch_probe` records each while the probe runs:

- the interpreter's own facts: kvenv's own interpreter by :func:`kvenv.probe.child.facts`
  (computed again, in process, every time), another one by the identity its facts are
  memoized under (:func:`kvenv.probe.pyinfo.remote_interpreter`: its binary, ``pyvenv.cfg``
  and import path directories, by stat);
- the distributions on its import path, read with ``importlib.metadata``: by the identity
  (device, inode, size, mtime, ctime) of every directory of that path, and of kvenv's own
  import path (where ``pynvml`` would be imported from). Installing, removing or upgrading a
  distribution adds or removes a ``*.dist-info`` entry, which changes its directory's mtime;
- every read made through :class:`kvenv.probe.effects.Effects`: each environment variable
  read (by the sha256 of its value; the masking of secrets by the sha256 of the secret
  values), each file read (by the sha256 of its bytes, read again; ``/proc/cpuinfo`` by its
  model and feature lines, a ``RECORD`` by its stat identity), each existence test and
  ``which``, the C library, and each program run. A program's answer is read again by running
  it, except ``ldconfig -p`` (a function of its binary and ``/etc/ld.so.cache``) and
  ``nvcc --version`` (a function of its binary), which are kept by the identity of those
  files. NVML and ``nvidia-smi`` (the GPUs, which can change without a file changing) are
  always asked again.

:func:`host_unchanged` replays all of it against the live machine: True only when every
answer is the same, so a verdict reached on the recorded probe holds for the live host.
What it cannot see: a distribution's metadata edited in place (without any entry of its
directory added, removed or renamed) — an installer never does that.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from kvenv._util.identity import sha256_hex, small_sha256, stamp, stat_identity

MEMO_VERSION = 1
# Programs whose answer is a function of files: (program name, argv tail) -> files it reads.
_PURE_RUNS: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {
    ("ldconfig", ("-p",)): ("/etc/ld.so.cache",),
    ("nvcc", ("--version",)): (),
}

Read = list[Any]  # [kind, argument, answer digest]

# /proc/cpuinfo changes at every read (clock speeds); only what the CPU probe keeps identifies
# it. A distribution's RECORD (the libraries probe reads torch's, a megabyte or two) is
# written anew by every install, so its stat identity stands for its bytes.
_CPUINFO = "/proc/cpuinfo"
_CPUINFO_KEYS = frozenset({"model name", "flags", "features", "cpu implementer", "cpu part"})
_RECORD = ".dist-info/RECORD"


def cpuinfo_digest(text: str) -> str:
    """The digest of what the CPU probe reads of a ``/proc/cpuinfo`` text (its model and
    feature lines), the same however the clock speeds moved."""
    kept = [
        line
        for line in text.splitlines()
        if line.partition(":")[0].strip().lower() in _CPUINFO_KEYS
    ]
    return sha256_hex("\n".join(kept).encode("utf-8", "surrogateescape"))


def _cpuinfo_digest() -> str | None:
    try:
        with open(_CPUINFO, encoding="utf-8", errors="replace") as stream:
            return cpuinfo_digest(stream.read())
    except OSError:
        return None


def _digest(value: object) -> str:
    return sha256_hex(repr(value).encode("utf-8", "surrogateescape"))


def _confstr_libc() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


def _secrets_digest(environ: Mapping[str, str]) -> str:
    from kvenv._util.redact import secret_values

    return _digest(sorted(secret_values(environ)))


class _WatchedEnviron(Mapping[str, str]):
    """``os.environ`` whose reads are recorded."""

    def __init__(self, environ: Mapping[str, str], reads: list[Read]) -> None:
        self._environ = environ
        self._reads = reads

    def __getitem__(self, key: str) -> str:
        value = self._environ.get(key)
        self._reads.append(["env", key, _digest(value)])
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._environ.get(key)
        self._reads.append(["env", key, _digest(value)])
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def items(self) -> Any:  # only the masking of secrets reads every variable
        self._reads.append(["env-secrets", None, _secrets_digest(self._environ)])
        return list(self._environ.items())

    def __iter__(self) -> Iterator[str]:
        self._reads.append(["env-all", None, _digest(sorted(self._environ.items()))])
        return iter(list(self._environ))

    def __len__(self) -> int:
        return len(self._environ)


def _program_files(argv: list[str]) -> tuple[str, ...] | None:
    files = _PURE_RUNS.get((os.path.basename(argv[0]), tuple(argv[1:])))
    return None if files is None else (argv[0], *files)


def watched(effects: Any, reads: list[Read]) -> Any:
    """``effects`` (:class:`~kvenv.probe.effects.Effects`) with every read appended to
    ``reads``."""
    from kvenv.probe.effects import Effects

    def read_text(path: str) -> str | None:
        # before the read: a change after it is seen
        if path == _CPUINFO:
            reads.append(["cpuinfo", path, _cpuinfo_digest()])
        elif path.endswith(_RECORD):
            reads.append(["read-stat", path, stat_identity(path)])
        else:
            reads.append(["read", path, small_sha256(path)])
        return effects.read_text(path)  # type: ignore[no-any-return]

    def exists(path: str) -> bool:
        answer = bool(effects.exists(path))
        reads.append(["exists", path, answer])
        return answer

    def is_dir(path: str) -> bool:
        answer = bool(effects.is_dir(path))
        reads.append(["is_dir", path, answer])
        return answer

    def which(name: str) -> str | None:
        answer = effects.which(name)
        reads.append(["which", name, answer])
        return answer  # type: ignore[no-any-return]

    def run(argv: Any, timeout: float) -> Any:
        argv = [str(a) for a in argv]
        files = _program_files(argv)
        if files is not None:
            reads.append(["run-files", argv, [stamp(f) for f in files]])
        result = effects.run(argv, timeout)
        if files is None:
            reads.append(["run", argv, _digest(result)])
        return result

    def nvml() -> Any:
        answer = effects.nvml()
        reads.append(
            ["nvml", None, _digest(answer)] if answer is not None else ["no-nvml", None, True]
        )
        return answer

    def libc() -> Any:
        text = _confstr_libc()
        answer = effects.libc()
        if text is not None and text.startswith("glibc "):  # the answer is this text's
            reads.append(["glibc", None, text])
        else:
            reads.append(["libc", None, _digest(answer)])
        return answer

    return Effects(
        environ=_WatchedEnviron(effects.environ, reads),
        read_text=read_text,
        exists=exists,
        is_dir=is_dir,
        which=which,
        run=run,
        nvml=nvml,
        libc=libc,
    )


def _replay(read: Read) -> bool:
    kind: str = read[0]
    argument: Any = read[1]
    answer: object = read[2]
    if kind == "env":
        return _digest(os.environ.get(argument)) == answer
    if kind == "env-secrets":
        return _secrets_digest(os.environ) == answer
    if kind == "env-all":
        return _digest(sorted(os.environ.items())) == answer
    if kind == "read":
        return small_sha256(argument) == answer
    if kind == "read-stat":
        return stat_identity(argument) == answer
    if kind == "cpuinfo":
        return _cpuinfo_digest() == answer
    if kind == "exists":
        return os.path.exists(argument) == answer
    if kind == "is_dir":
        return os.path.isdir(argument) == answer
    if kind == "which":
        import shutil

        found: object = shutil.which(argument)
        return found == answer
    if kind == "run-files":
        return [stamp(f) for f in _program_files(argument) or ()] == answer
    if kind == "no-nvml":  # pynvml was not importable; still not findable
        import importlib.util

        return importlib.util.find_spec("pynvml") is None
    if kind == "glibc":
        return _confstr_libc() == answer
    from kvenv.probe import effects

    live = effects.live()
    if kind == "run":
        return _digest(live.run(argument, effects.RUN_TIMEOUT)) == answer
    if kind == "nvml":
        return _digest(live.nvml()) == answer
    if kind == "libc":
        return _digest(live.libc()) == answer
    return False  # a kind this kvenv does not know: unsure


def interpreter_identity(python: str | None, sys_path: list[str]) -> list[Any] | None:
    """What the interpreter's facts and its distributions depend on: kvenv's own interpreter
    (``python`` None) by its facts, another by the identity its facts are memoized under;
    both with the stamp of every directory of ``sys_path`` and of kvenv's own import path.
    None when no identity can be had (an interpreter that is a script)."""
    own_path = [stamp(d) for d in sys.path if d]
    if python is None:
        from kvenv.probe import child

        facts: Any = child.facts()
        head: list[Any] = ["own", facts]
    else:
        from kvenv.probe.pystamp import remote_identity

        found = remote_identity(python, tuple(sys_path))
        if found is None:
            return None
        head = ["remote", python, found]
    return [MEMO_VERSION, head, [stamp(d) for d in sys_path], own_path]


def watch_probe(python: str | None, memo: Any = None) -> tuple[Any, dict[str, Any] | None]:
    """Probe the host as :func:`kvenv.probe.host.take_snapshot` does (``python`` None: kvenv's
    own interpreter, in process; ``memo``: where another interpreter's facts are kept) and
    return the snapshot with its identity (None when it has none; see the module)."""
    from kvenv.probe.effects import live
    from kvenv.probe.host import take_snapshot

    before = interpreter_identity(python, _sys_path_of(python, memo))
    reads: list[Read] = []
    snapshot = take_snapshot(python=python, memo=memo, effects=watched(live(), reads))
    sys_path = list(snapshot.python.sys_path)
    identity = interpreter_identity(python, sys_path)
    if before is None or identity != before:
        return snapshot, None  # changed while probed (or no identity): nothing to keep
    return snapshot, {"python": python, "sys_path": sys_path, "id": identity, "reads": reads}


def _sys_path_of(python: str | None, memo: Any) -> list[str]:
    if python is None:
        from kvenv.probe import child

        facts: Any = child.facts()
        return list(facts["sys_path"])
    from kvenv.probe.pyinfo import remembered_sys_path

    return remembered_sys_path(python, memo) or []


def host_unchanged(identity: Mapping[str, Any]) -> bool:
    """Whether the live host answers every read of ``identity`` (from :func:`watch_probe`)
    as it did then."""
    try:
        python = identity["python"]
        if interpreter_identity(python, list(identity["sys_path"])) != identity["id"]:
            return False
        return all(_replay(read) for read in identity["reads"])
    except (KeyError, TypeError, ValueError):
        return False


def identity_digest(identity: Mapping[str, Any]) -> str:
    """A short name for ``identity`` (for logs and tests)."""
    return sha256_hex(json.dumps(identity, sort_keys=True).encode())[:16]
