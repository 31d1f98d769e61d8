"""The live host's identity: what a probe of it read, so that a later command can tell, without
probing again, that the host is the one a verdict was reached on (issue 13); and the identity
another interpreter's own facts are memoized under (:mod:`kvenv.probe.pyinfo`, memo kind
``interpreter``). Standard library only: :func:`host_unchanged` is on the start-up paths.

A host snapshot (:func:`kvenv.probe.host.take_snapshot`) is a function of three things, and
:func:`kvenv.probe.host.watch_probe` records each while the probe runs, as a list of reads
``[kind, argument, answer]`` that :func:`host_unchanged` replays against the live machine
(True only when every answer is the same):

- the interpreter (``interpreter``): kvenv's own by its facts (:func:`kvenv.probe.child.facts`,
  computed again in process every time), another by the path its binary resolves to, with
  :func:`interpreter_deps` (its binary, ``pyvenv.cfg`` and import path directories); and
  kvenv's own import path (where ``pynvml`` would be imported from);
- the distributions on its import path, read with ``importlib.metadata``: by the identity of
  every directory of that path (``stat``). Installing, removing or upgrading a distribution
  adds or removes a ``*.dist-info`` entry, which changes its directory's mtime;
- every read made through :class:`kvenv.probe.effects.Effects`. Where a read is one of the
  memo's dependencies (:mod:`kvenv._util.memo`) it is recorded as one and replayed with
  :func:`kvenv._util.memo.capture`: a file read by its bytes (``bytes``; a ``RECORD`` by its
  identity, ``stat``: every install rewrites it), a directory test (``isdir``), a variable
  (``env``; every variable, ``env`` of the prefix ``*``). The rest are the probe's own kinds:
  ``/proc/cpuinfo`` by its model and feature lines (``cpuinfo``), the masking of secrets by the
  sha256 of the secret values (``env-secrets``), ``exists``, ``which``, the C library
  (``glibc``, else ``libc``), and each program run (``run``: run again), except ``ldconfig
  -p`` (a function of its binary and ``/etc/ld.so.cache``) and ``nvcc --version`` (of its
  binary), kept by the ``stat`` of those files. NVML and ``nvidia-smi`` (the GPUs, which can
  change without a file changing) are always asked again (``nvml``, ``no-nvml``).

What it cannot see: a distribution's metadata edited in place (without any entry of its
directory added, removed or renamed) — an installer never does that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kvenv._util import memo
from kvenv._util.identity import sha256_hex

# Programs whose answer is a function of files: (program name, argv tail) -> files it reads.
_PURE_RUNS: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {
    ("ldconfig", ("-p",)): ("/etc/ld.so.cache",),
    ("nvcc", ("--version",)): (),
}
# The reads that are memo dependencies, replayed by the memo's own capture.
_MEMO_KINDS = frozenset({"bytes", "stat", "isdir", "env"})

Read = list[Any]  # [kind, argument, answer]

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
    """``os.environ`` whose reads are recorded (as the memo's ``env``: the live
    environment is the one watched)."""

    def __init__(self, environ: Mapping[str, str], reads: list[Read]) -> None:
        self._environ = environ
        self._reads = reads

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return str(value)

    def get(self, key: str, default: Any = None) -> Any:
        self._reads.append(memo.dep("env", key))
        value = self._environ.get(key)
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def items(self) -> Any:  # only the masking of secrets reads every variable
        self._reads.append(["env-secrets", None, _secrets_digest(self._environ)])
        return list(self._environ.items())

    def __iter__(self) -> Iterator[str]:
        self._reads.append(memo.dep("env", ["*", []]))
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
        else:
            reads.append(memo.dep("stat" if path.endswith(_RECORD) else "bytes", path))
        return effects.read_text(path)  # type: ignore[no-any-return]

    def answered(kind: str, ask: Any) -> Any:
        """``ask`` (one argument) with its argument and answer recorded as a read ``kind``."""

        def read(argument: str) -> Any:
            answer = ask(argument)
            reads.append([kind, argument, answer])
            return answer

        return read

    def run(argv: Any, timeout: float) -> Any:
        argv = [str(a) for a in argv]
        files = _program_files(argv)
        reads.extend(memo.dep("stat", f) for f in files or ())
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
        exists=answered("exists", lambda path: bool(effects.exists(path))),
        is_dir=answered("isdir", lambda path: bool(effects.is_dir(path))),
        which=answered("which", effects.which),
        run=run,
        nvml=nvml,
        libc=libc,
    )


def _replay(read: Read) -> bool:
    kind: str = read[0]
    argument: Any = read[1]
    answer: object = read[2]
    if kind in _MEMO_KINDS:
        return bool(memo.capture(kind, argument) == answer)
    if kind == "interpreter":
        return _interpreter(argument) == answer
    if kind == "env-secrets":
        return _secrets_digest(os.environ) == answer
    if kind == "cpuinfo":
        return _cpuinfo_digest() == answer
    if kind == "exists":
        return os.path.exists(argument) == answer
    if kind == "which":
        import shutil

        found: object = shutil.which(argument)
        return found == answer
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


def interpreter_key(python: str) -> list[str]:
    """What another interpreter's facts are kept for: its path and the path it resolves to
    (a link repointed is another interpreter)."""
    return [python, os.path.realpath(python)]


def interpreter_deps(python: str, sys_path: Iterable[str]) -> list[memo.Dep] | None:
    """What the facts of ``python -I`` depend on besides :func:`interpreter_key`: its binary,
    the binary it resolves to, the ``pyvenv.cfg`` beside it or one level up, and every
    directory of its import path (a new ``.pth`` changes its directory), as the memo's
    ``stat`` dependencies. None for anything but a native executable (a script, such as a
    pyenv shim, chooses its interpreter when it runs)."""
    try:
        with open(python, "rb") as handle:
            if handle.read(4) != b"\x7fELF":
                return None
    except OSError:
        return None
    bindir = os.path.dirname(os.path.abspath(python))
    configs = [os.path.join(d, "pyvenv.cfg") for d in (bindir, os.path.dirname(bindir))]
    paths = [python, os.path.realpath(python), *configs, *sys_path]
    return [memo.dep("stat", path) for path in paths]


def _interpreter(python: str | None) -> list[Any]:
    """The ``interpreter`` read's answer: kvenv's own interpreter (None) by its facts, another
    by :func:`interpreter_key`; with kvenv's own import path."""
    if python is None:
        from kvenv.probe import child

        head: Any = _digest(child.facts())
    else:
        head = interpreter_key(python)
    return [head, [d for d in sys.path if d]]


def interpreter_reads(python: str | None, sys_path: list[str]) -> list[Read] | None:
    """What the interpreter's facts and its distributions depend on (see the module); None
    when no identity can be had (an interpreter that is a script)."""
    deps = [memo.dep("stat", d) for d in sys_path]
    if python is not None:
        found = interpreter_deps(python, sys_path)
        if found is None:
            return None
        deps = found
    own = [memo.dep("stat", d) for d in sys.path if d]
    return [["interpreter", python, _interpreter(python)], *deps, *own]


def host_unchanged(identity: Mapping[str, Any]) -> bool:
    """Whether the live host answers every read of ``identity`` (from
    :func:`kvenv.probe.host.watch_probe`) as it did then."""
    try:
        return all(_replay(read) for read in identity["reads"])
    except (KeyError, TypeError, ValueError, IndexError):
        return False
