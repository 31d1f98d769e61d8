"""The probes' window on the machine: files, programs, environment and NVML.

Every probe reads the host only through an :class:`Effects` value, so tests replay recorded
hosts (:meth:`Effects.recorded`) and the live one (:func:`live`) is the only code that touches
the real system. A missing file or program is a value (``None``), never an exception.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from kvenv.probe.nvml import NvmlReading, read_nvml

# How long one external program (nvidia-smi, nvcc, ldconfig) may take before it is a fact that
# it hangs. nvidia-smi on a busy multi-GPU box takes a second or two.
RUN_TIMEOUT = 20.0


@attrs.frozen
class RunResult:
    """What a finished program printed and returned."""

    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def text(self) -> str:
        """stdout and stderr together (nvidia-smi reports errors on stdout)."""
        return (self.stdout + "\n" + self.stderr).strip()


Runner = Callable[[Sequence[str], float], "RunResult | None"]


@attrs.frozen
class Effects:
    """Reads of the host. ``run`` returns None when the program cannot be started (absent,
    not executable, timed out); ``nvml`` returns None when pynvml is not importable."""

    environ: Mapping[str, str]
    read_text: Callable[[str], str | None]
    exists: Callable[[str], bool]
    is_dir: Callable[[str], bool]
    which: Callable[[str], str | None]
    run: Runner
    nvml: Callable[[], NvmlReading | None]
    libc: Callable[[], tuple[str, str] | None]

    @classmethod
    def recorded(
        cls,
        *,
        files: Mapping[str, str] | None = None,
        dirs: Sequence[str] = (),
        commands: Mapping[str, RunResult] | None = None,
        environ: Mapping[str, str] | None = None,
        nvml: NvmlReading | None = None,
        libc: tuple[str, str] | None = ("glibc", "2.35"),
    ) -> Effects:
        """A host replayed from recorded facts.

        ``files`` maps absolute paths to contents; ``dirs`` lists directories that exist;
        ``commands`` maps a command line (``"nvidia-smi --query-gpu=..."``, program by its bare
        name) to its recorded result; a program is on PATH when some command of it is recorded.
        """
        file_map = dict(files or {})
        command_map = dict(commands or {})
        dir_set = set(dirs)
        for path in file_map:
            parent = Path(path).parent
            while str(parent) not in dir_set and parent != parent.parent:
                dir_set.add(str(parent))
                parent = parent.parent
        programs = {line.split()[0] for line in command_map}

        def which(name: str) -> str | None:
            return f"/usr/bin/{name}" if name in programs else None

        def run(argv: Sequence[str], timeout: float) -> RunResult | None:
            line = " ".join([Path(argv[0]).name, *argv[1:]])
            return command_map.get(line)

        return cls(
            environ=dict(environ or {}),
            read_text=file_map.get,
            exists=lambda p: p in file_map or p in dir_set,
            is_dir=lambda p: p in dir_set,
            which=which,
            run=run,
            nvml=lambda: nvml,
            libc=lambda: libc,
        )


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _run(argv: Sequence[str], timeout: float) -> RunResult | None:
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return RunResult(done.returncode, done.stdout, done.stderr)


def _libc() -> tuple[str, str] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        text = None
    if text and text.startswith("glibc "):
        return "glibc", text.split()[1]
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    result = _run([ldd, "--version"], 5.0)
    if result is None:
        return None
    return parse_musl(result.text)


def parse_musl(text: str) -> tuple[str, str] | None:
    """musl's ``ldd --version`` prints ``musl libc (x86_64)`` then ``Version 1.2.4``."""
    if "musl" not in text.lower():
        return None
    for line in text.splitlines():
        if line.strip().lower().startswith("version "):
            return "musl", line.split()[1]
    return None


def _nvml() -> NvmlReading | None:
    try:
        import pynvml
    except ImportError:
        return None
    return read_nvml(pynvml)


def live() -> Effects:
    """The real machine."""
    return Effects(
        environ=os.environ,
        read_text=_read_text,
        exists=os.path.exists,
        is_dir=os.path.isdir,
        which=shutil.which,
        run=_run,
        nvml=_nvml,
        libc=_libc,
    )
