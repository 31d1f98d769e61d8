"""Real ELF shared objects built with gcc for the linkage tests: stub libraries with a given
soname, and objects whose ``DT_NEEDED`` names them (``-Wl,--no-as-needed -l:NAME``). Tests that
use them skip, saying why, where gcc is missing."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

GCC = shutil.which("gcc")


def need_gcc() -> str:
    if GCC is None:
        pytest.skip("gcc is not installed: the linkage tests build real ELF objects with it")
    return GCC


def shared_object(
    directory: Path,
    filename: str,
    *,
    needed: Sequence[str] = (),
    soname: str | None = None,
    filler: int = 0,
) -> Path:
    """Build ``directory/filename``, a shared object that needs each library of ``needed``
    (stubs with those sonames are built beside it first) and carries ``filler`` bytes of
    code-like data (so its dynamic section lies that far into the file)."""
    gcc = need_gcc()
    directory.mkdir(parents=True, exist_ok=True)
    stubs = directory / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in needed:
        if not (stubs / name).exists():
            source = stubs / f"{name}.c"
            symbol = "".join(c if c.isalnum() else "_" for c in name)
            source.write_text(f"int stub_{symbol}(void) {{ return 1; }}\n")
            subprocess.run(
                [
                    gcc,
                    "-shared",
                    "-fPIC",
                    "-o",
                    str(stubs / name),
                    f"-Wl,-soname,{name}",
                    str(source),
                ],
                check=True,
            )
    source = directory / f"{filename}.c"
    body = "int ext_entry(void) { return 42; }\n"
    if filler:
        start = ", ".join(str(i % 251) for i in range(64))
        body += f"const unsigned char filler[{filler}] = {{{start}}};\n"
    source.write_text(body)
    out = directory / filename
    argv = [gcc, "-shared", "-fPIC", "-o", str(out), str(source)]
    if soname:
        argv.append(f"-Wl,-soname,{soname}")
    argv += [f"-L{stubs}", "-Wl,--no-as-needed", *(f"-l:{name}" for name in needed)]
    subprocess.run(argv, check=True)
    return out


def synthetic_elf(
    needed: Sequence[str], soname: str | None = None, *, bits: int = 64, order: str = "<"
) -> bytes:
    """A minimal ELF shared object written byte by byte (no gcc): one ``PT_LOAD`` mapping the
    file at 0x10000, a ``PT_DYNAMIC`` segment, a string table. For 32-bit and big-endian cases
    and for fuzzing from a valid start."""
    ehdr = struct.Struct(order + ("HHIQQQIHHHHHH" if bits == 64 else "HHIIIIIHHHHHH"))
    phdr = struct.Struct(order + ("IIQQQQQQ" if bits == 64 else "IIIIIIII"))
    dyn = struct.Struct(order + ("qQ" if bits == 64 else "iI"))
    base = 0x10000
    strings = b"\0"
    offsets = []
    for name in [*needed, *([soname] if soname else [])]:
        offsets.append(len(strings))
        strings += name.encode() + b"\0"
    strtab_off = 16 + ehdr.size + 2 * phdr.size
    dyn_off = (strtab_off + len(strings) + 7) // 8 * 8
    entries = [(1, offsets[i]) for i in range(len(needed))]
    if soname:
        entries.append((14, offsets[-1]))
    entries += [(5, base + strtab_off), (10, len(strings)), (0, 0)]
    dynamic = b"".join(dyn.pack(tag, value) for tag, value in entries)
    total = dyn_off + len(dynamic)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1 if order == "<" else 2, 1]) + bytes(9)
    header = ehdr.pack(3, 62, 1, 0, 16 + ehdr.size, 0, 0, 16 + ehdr.size, phdr.size, 2, 0, 0, 0)

    def program(p_type: int, offset: int, size: int) -> bytes:
        if bits == 64:
            return phdr.pack(p_type, 4, offset, base + offset, base + offset, size, size, 8)
        return phdr.pack(p_type, offset, base + offset, base + offset, size, size, 4, 8)

    out = ident + header + program(1, 0, total) + program(2, dyn_off, len(dynamic))
    out += strings
    out += bytes(dyn_off - len(out)) + dynamic
    return out
