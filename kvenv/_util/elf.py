"""The dynamic section of an ELF shared object: the libraries it needs (``DT_NEEDED``) and its
own name (``DT_SONAME``), read from headers only.

The reader asks for byte ranges (``read_at(offset, size)``), so a caller can serve them from a
file, a zip member or HTTP range requests: the ELF header, the program headers, the
``PT_DYNAMIC`` segment and the few strings its entries name, never the code. Both classes
(32/64-bit) and both byte orders are read; anything malformed (truncated, out of range,
absurd counts) raises :class:`ElfError` and nothing else, which ``tests/hardening`` fuzzes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from kvenv.errors import IntegrityError

ReadAt = Callable[[int, int], bytes]

MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
# Bounds on what one object may make the reader fetch: real objects stay far below them.
MAX_PHNUM = 4096
MAX_PHENTSIZE = 256  # bytes of one program header (56 in ELF64, 32 in ELF32)
MAX_DYNAMIC = 1 << 20  # bytes of the dynamic segment read
MAX_NEEDED = 1024  # libraries one object may name
MAX_NAME = 4096  # bytes of one library name


class ElfError(IntegrityError):
    """A shared object whose headers cannot be read."""


class Dynamic(NamedTuple):
    """What an object's dynamic section says about linking."""

    needed: tuple[str, ...]
    soname: str | None
    bits: int  # 32 or 64
    machine: int  # e_machine (62 x86-64, 183 aarch64)


class _Layout(NamedTuple):
    ehdr: struct.Struct
    phdr: struct.Struct
    dyn: struct.Struct


def _layout(bits: int, order: str) -> _Layout:
    if bits == 64:
        return _Layout(
            struct.Struct(order + "HHIQQQIHHHHHH"),
            struct.Struct(order + "IIQQQQQQ"),
            struct.Struct(order + "qQ"),
        )
    return _Layout(
        struct.Struct(order + "HHIIIIIHHHHHH"),
        struct.Struct(order + "IIIIIIII"),
        struct.Struct(order + "iI"),
    )


def _read(read_at: ReadAt, offset: int, size: int, what: str) -> bytes:
    data = read_at(offset, size)
    if len(data) != size:
        raise ElfError(f"truncated ELF: {what} at byte {offset} runs past the end")
    return data


def is_elf(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of a file) starts an ELF object."""
    return head[:4] == MAGIC


def read_dynamic(read_at: ReadAt) -> Dynamic | None:
    """The linking facts of the ELF object behind ``read_at``; None when it is not ELF at all.
    An object without a ``PT_DYNAMIC`` segment (static) needs nothing."""
    ident = read_at(0, 16)
    if not is_elf(ident):
        return None
    if len(ident) < 16:
        raise ElfError("truncated ELF: no complete identification")
    bits = {1: 32, 2: 64}.get(ident[4])
    order = {1: "<", 2: ">"}.get(ident[5])
    if bits is None or order is None:
        raise ElfError(f"ELF class {ident[4]} / data encoding {ident[5]} is not valid")
    layout = _layout(bits, order)
    header = layout.ehdr.unpack(_read(read_at, 16, layout.ehdr.size, "the ELF header"))
    machine, phoff, phentsize, phnum = header[1], header[4], header[8], header[9]
    if phnum > MAX_PHNUM:
        raise ElfError(f"ELF with {phnum} program headers (more than {MAX_PHNUM})")
    if phnum and not layout.phdr.size <= phentsize <= MAX_PHENTSIZE:
        raise ElfError(f"ELF program header size {phentsize} is not plausible")
    table = _read(read_at, phoff, phnum * phentsize, "the program headers") if phnum else b""
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        fields = layout.phdr.unpack_from(table, index * phentsize)
        if bits == 64:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[2], fields[3], fields[5]
        else:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[1], fields[2], fields[4]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_filesz, p_offset))
        elif p_type == PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return Dynamic((), None, bits, machine)
    offset, size = dynamic
    size = min(size, MAX_DYNAMIC) // layout.dyn.size * layout.dyn.size
    entries = _read(read_at, offset, size, "the dynamic section")
    needed: list[int] = []
    soname: int | None = None
    strtab: int | None = None
    strsz: int | None = None
    for tag, value in layout.dyn.iter_unpack(entries):
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed.append(value)
        elif tag == DT_SONAME:
            soname = value
        elif tag == DT_STRTAB:
            strtab = value
        elif tag == DT_STRSZ:
            strsz = value
    if not needed and soname is None:
        return Dynamic((), None, bits, machine)
    if len(needed) > MAX_NEEDED:
        raise ElfError(f"ELF object naming {len(needed)} libraries (more than {MAX_NEEDED})")
    if strtab is None:
        raise ElfError("ELF dynamic section names libraries but has no DT_STRTAB")
    base = _file_offset(strtab, loads)

    def name(at: int) -> str:
        if strsz is not None and at >= strsz:
            raise ElfError(f"ELF string {at} lies outside DT_STRSZ {strsz}")
        data = read_at(base + at, MAX_NAME)
        end = data.find(b"\0")
        if end < 0:
            raise ElfError(f"ELF string at byte {base + at} has no end")
        return data[:end].decode("utf-8", "replace")

    return Dynamic(
        tuple(name(v) for v in needed), name(soname) if soname is not None else None, bits, machine
    )


def _file_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int:
    """Where the loaded address ``vaddr`` lies in the file (by the ``PT_LOAD`` holding it)."""
    for start, size, offset in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    raise ElfError(f"ELF address {vaddr:#x} lies in no loaded segment")


def bytes_reader(data: bytes) -> ReadAt:
    """``read_at`` over bytes in memory."""
    return lambda offset, size: data[offset : offset + size] if offset >= 0 else b""
